// The AI SDK's own client (npm ai 6) against `bosun serve --dev` on the scripted model in
// ai_sdk.yaml: DefaultChatTransport + readUIMessageStream, and AbstractChat over an
// in-memory state (what useChat wraps). The client validates every part it reads against
// its own schema: a malformed or unknown part puts the chat in the "error" state, so every
// scenario that should succeed checks that the chat is "ready" with no error.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from "ai";

const URL_ = process.env.BOSUN_URL;
const TOKEN = process.env.BOSUN_TOKEN;
const MEMBER_TOKEN = process.env.BOSUN_MEMBER_TOKEN;
const OTHER_ORG_TOKEN = process.env.BOSUN_OTHER_ORG_TOKEN;
const API = `${URL_}/v1/ai-sdk/chat`;
const ENGINE_BUILDER = "wo_66e434af2a31";
const TEMPO_RUN = "wo_f6ed3930eade";
const SAM_OKAFOR = "mem_e3378ad35736";

// The fields each part may carry in the strict schemas of ai 6.0.0 (before 6.0.120 the
// client refused any other field; later ones accept them): what every ai 6 client knows.
const STRICT_FIELDS = {
  start: ["messageId", "messageMetadata"],
  "start-step": [],
  "finish-step": [],
  finish: ["finishReason", "messageMetadata"],
  abort: ["reason"],
  error: ["errorText"],
  "message-metadata": ["messageMetadata"],
  "text-start": ["id", "providerMetadata"],
  "text-delta": ["id", "delta", "providerMetadata"],
  "text-end": ["id", "providerMetadata"],
  "reasoning-start": ["id", "providerMetadata"],
  "reasoning-delta": ["id", "delta", "providerMetadata"],
  "reasoning-end": ["id", "providerMetadata"],
  "tool-input-available": ["toolCallId", "toolName", "input", "providerExecuted", "providerMetadata", "dynamic", "title"],
  "tool-approval-request": ["approvalId", "toolCallId"],
  "tool-output-available": ["toolCallId", "output", "providerExecuted", "providerMetadata", "dynamic", "preliminary"],
  "tool-output-error": ["toolCallId", "errorText", "providerExecuted", "providerMetadata", "dynamic"],
  "tool-output-denied": ["toolCallId"],
};
const seen = []; // every part any test's transport read

/** Record the parts of an event-stream response, leaving the response as it was. */
function recorded(response) {
  if (!response.body || !response.headers.get("content-type")?.startsWith("text/event-stream")) {
    return response;
  }
  const [mine, theirs] = response.body.tee();
  new Response(mine).text().then(
    (raw) => {
      for (const frame of raw.split("\n\n")) {
        if (frame.startsWith("data: {")) seen.push(JSON.parse(frame.slice(6)));
      }
    },
    () => {}, // a dropped connection: its parts are not needed
  );
  return new Response(theirs, { status: response.status, headers: response.headers });
}

class MemoryState {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  };
  snapshot = (thing) => structuredClone(thing);
}

class NodeChat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new MemoryState() });
  }
}

/** A transport that signs in with `token` and counts (and can break) its requests. */
function transport({ token = TOKEN, fetch: wrapped = fetch } = {}) {
  const calls = [];
  const counted = async (url, init) => {
    calls.push(`${init?.method ?? "GET"} ${new URL(url).pathname}`);
    return recorded(await wrapped(url, init));
  };
  const made = new DefaultChatTransport({
    api: API,
    headers: { Authorization: `Bearer ${token}` },
    fetch: counted,
  });
  return Object.assign(made, { calls });
}

function chat(options = {}) {
  const { token, fetch: wrapped, ...rest } = options;
  return new NodeChat({ id: `chat-${randomUUID()}`, transport: transport({ token, fetch: wrapped }), ...rest });
}

async function until(check, what, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function assertReady(c) {
  assert.equal(c.error, undefined, `the chat failed: ${c.error?.message}`);
  assert.equal(c.status, "ready");
}

const assistant = (c) => c.messages.at(-1);
const textOf = (message) =>
  message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const toolPart = (message, name) =>
  message.parts.find((p) => p.type === "dynamic-tool" && p.toolName === name);

async function sessionEvents(sessionId) {
  const response = await fetch(`${URL_}/v1/sessions/${sessionId}/events`, {
    headers: { Authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()).events;
}

test("a streamed answer, read part by part with readUIMessageStream", async () => {
  const t = transport();
  const stream = await t.sendMessages({
    chatId: `chat-${randomUUID()}`,
    trigger: "submit-message",
    messageId: undefined,
    messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "Say hello to the AI SDK" }] }],
    abortSignal: undefined,
  });
  const snapshots = [];
  let failure;
  for await (const message of readUIMessageStream({ stream, onError: (e) => (failure = e) })) {
    snapshots.push(message);
  }
  assert.equal(failure, undefined, `the stream failed: ${failure?.message}`);
  const last = snapshots.at(-1);
  assert.equal(textOf(last), "Hello from Bosun, streamed part by part to the AI SDK.");
  const texts = snapshots.map(textOf).filter((text) => text.length > 0);
  assert.ok(new Set(texts).size > 3, "the text arrived in several deltas");
  assert.equal(last.id, last.metadata.turnId, "the turn id is the message id");
  assert.equal(last.metadata.status, "completed");
  assert.equal(last.metadata.usage.output_tokens, 12);
  assert.deepEqual(last.parts.find((p) => p.type === "data-plan").data.strategy, "simple");
});

test("the raw stream: the protocol header, data frames and [DONE]", async () => {
  const response = await fetch(API, {
    method: "POST",
    headers: { Authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({
      id: `chat-${randomUUID()}`,
      trigger: "submit-message",
      messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "Say hello to the AI SDK" }] }],
    }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("x-vercel-ai-ui-message-stream"), "v1");
  assert.match(response.headers.get("content-type"), /^text\/event-stream/);
  const frames = (await response.text()).split("\n\n").filter(Boolean);
  assert.equal(frames.at(-1), "data: [DONE]");
  const types = frames.slice(0, -1).map((f) => JSON.parse(f.replace(/^data: /, "")).type);
  assert.deepEqual(types.slice(0, 2), ["start", "start-step"]);
  assert.deepEqual(types.slice(-2), ["finish-step", "finish"]);
});

test("a complex plan: the plan and each step as data parts, updated in place", async () => {
  const c = chat();
  await c.sendMessage({ text: "Plan Priya's first week" });
  assertReady(c);
  const message = assistant(c);
  const plan = message.parts.filter((p) => p.type === "data-plan");
  assert.equal(plan.length, 1);
  assert.deepEqual(plan[0].data.steps.map((s) => s.id), ["s1", "s2", "s3"]);
  const steps = message.parts.filter((p) => p.type === "data-step");
  assert.deepEqual(steps.map((p) => p.id).sort(), ["step-s1", "step-s2", "step-s3"]);
  for (const step of steps) assert.equal(step.data.status, "completed", JSON.stringify(step.data));
  assert.equal(steps.find((p) => p.id === "step-s3").data.goal, "Draft Priya's first-week welcome");
  assert.equal(toolPart(message, "members.search").state, "output-available");
  assert.equal(toolPart(message, "programs.list").state, "output-available");
  const reasoning = message.parts.filter((p) => p.type === "reasoning").map((p) => p.text);
  assert.ok(reasoning.includes("Priya Natarajan is an active member."), reasoning.join(" | "));
  assert.equal(
    textOf(message),
    "Priya is ready for her first week: Foundations on Monday, then Morning HIIT.",
  );
  assert.equal(message.metadata.status, "completed");
});

test("approve with addToolApprovalResponse: the tool runs once", async () => {
  const c = chat({ sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await c.sendMessage({ text: "Delete the Engine builder workout" });
  assertReady(c);
  const asked = toolPart(assistant(c), "workouts.delete");
  assert.equal(asked.state, "approval-requested");
  assert.deepEqual(asked.input, { workout_id: ENGINE_BUILDER });
  assert.equal(assistant(c).metadata.status, "suspended");

  await c.addToolApprovalResponse({ id: asked.approval.id, approved: true });
  await until(() => c.status === "ready" && assistant(c).metadata.status === "completed", "the resumed turn");
  assertReady(c);
  assert.equal(c.messages.length, 2, "the answer continues the same assistant message");
  const message = assistant(c);
  const done = toolPart(message, "workouts.delete");
  assert.equal(done.state, "output-available");
  assert.deepEqual(done.output, { id: ENGINE_BUILDER, title: "Engine builder", deleted: true });
  assert.equal(textOf(message), "Deleted the Engine builder workout.");
  await new Promise((resolve) => setTimeout(resolve, 300)); // no automatic third request
  assert.deepEqual(c.transport.calls, ["POST /v1/ai-sdk/chat", "POST /v1/ai-sdk/chat"]);

  const events = await sessionEvents(message.metadata.sessionId);
  const ran = events.filter((e) => e.type === "tool_completed" && e.data.tool_use_id === asked.toolCallId);
  assert.equal(ran.length, 1);
  assert.equal(ran[0].data.ok, true);
  assert.equal(ran[0].data.output.deleted, true);
});

test("deny with addToolApprovalResponse: the tool never runs", async () => {
  const c = chat({ sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  await c.sendMessage({ text: "Remove the tempo run workout" });
  assertReady(c);
  const asked = toolPart(assistant(c), "workouts.delete");
  assert.deepEqual(asked.input, { workout_id: TEMPO_RUN });
  await c.addToolApprovalResponse({ id: asked.approval.id, approved: false, reason: "keep it" });
  await until(() => c.status === "ready" && assistant(c).metadata.status === "completed", "the resumed turn");
  assertReady(c);
  const message = assistant(c);
  assert.equal(toolPart(message, "workouts.delete").state, "output-denied");
  assert.equal(textOf(message), "Understood: you declined, so the Tempo run + core workout stays.");
  const events = await sessionEvents(message.metadata.sessionId);
  const mine = events.filter((e) => e.data.tool_use_id === asked.toolCallId);
  assert.ok(mine.some((e) => e.type === "tool_resolved" && e.data.decision === "rejected"));
  assert.ok(!mine.some((e) => e.type === "tool_completed" && e.data.ok), "it did not run");
});

test("a pick: the client-side tool choose_entity, answered with addToolOutput", async () => {
  const c = chat({ sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls });
  await c.sendMessage({ text: "Book Sam into Morning HIIT" });
  assertReady(c);
  const asked = assistant(c).parts.find((p) => p.type === "tool-choose_entity");
  assert.equal(asked.state, "input-available");
  assert.equal(asked.input.prompt, "Which Sam?");
  assert.deepEqual(asked.input.candidates.map((o) => o.label), ["Sam Rivera", "Sam Okafor"]);

  await c.addToolOutput({ tool: "choose_entity", toolCallId: asked.toolCallId, output: { id: SAM_OKAFOR } });
  await until(() => c.status === "ready" && assistant(c).metadata.status === "completed", "the resumed turn");
  assertReady(c);
  const message = assistant(c);
  const lookup = toolPart(message, "members.get");
  assert.deepEqual(lookup.input, { member_id: SAM_OKAFOR }, "the turn went on with the pick");
  assert.equal(lookup.output.last_name, "Okafor");
  const picked = message.parts.find((p) => p.type === "tool-choose_entity");
  assert.deepEqual(picked.output, { id: SAM_OKAFOR, label: "Sam Okafor", kind: "member" });
  assert.equal(textOf(message), "Booked the Sam you picked into Morning HIIT.");
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(c.transport.calls.length, 2, c.transport.calls.join(", "));
});

test("a provider error: an error part, and the chat's error state", async () => {
  const c = chat();
  await c.sendMessage({ text: "Break the model please" });
  assert.equal(c.status, "error");
  assert.equal(c.error.message, "Overloaded, try again");
  const message = assistant(c);
  assert.equal(message.role, "assistant");
  assert.equal(message.metadata.error.code, "provider_overloaded");
  assert.match(textOf(message), /^This answer starts/);
});

test("resume after a dropped connection, and 204 when nothing runs", async () => {
  // The POST's body breaks after its first few chunks, as a network drop would.
  const dropping = async (url, init) => {
    const response = await fetch(url, init);
    if (init?.method !== "POST") return response;
    const reader = response.body.getReader();
    let chunks = 0;
    const body = new ReadableStream({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) return controller.close();
        controller.enqueue(value);
        if (++chunks === 6) {
          await reader.cancel();
          controller.error(new TypeError("fetch failed: network error"));
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const c = chat({ fetch: dropping });
  await c.sendMessage({ text: "Tell me the long story" });
  assert.equal(c.status, "error", "the connection dropped");
  const partial = textOf(assistant(c));
  assert.ok(!partial.endsWith("plan for the day."), partial);

  await c.resumeStream();
  assertReady(c);
  assert.equal(c.messages.length, 2, "the resumed stream replaced the partial message");
  const message = assistant(c);
  assert.match(textOf(message), /^Once upon a time a studio opened at six, .* plan for the day\.$/);
  assert.equal(message.metadata.status, "completed");
  assert.deepEqual(c.transport.calls, ["POST /v1/ai-sdk/chat", `GET /v1/ai-sdk/chat/${c.id}/stream`]);

  // Nothing runs in that chat now, nor in one that never started: 204, no stream.
  assert.equal(await c.transport.reconnectToStream({ chatId: c.id }), null);
  assert.equal(await c.transport.reconnectToStream({ chatId: `chat-${randomUUID()}` }), null);
});

test("another org's (or another member's) chat id is a chat of their own", async () => {
  const c = chat();
  await c.sendMessage({ text: "Say hello to the AI SDK" });
  assertReady(c);
  const sessionId = assistant(c).metadata.sessionId;

  // The chat id, and even the session id: neither reaches Alice's chat, both work.
  for (const token of [OTHER_ORG_TOKEN, MEMBER_TOKEN]) {
    const other = new NodeChat({ id: sessionId, transport: transport({ token }) });
    await other.sendMessage({ text: "Say hello from elsewhere" });
    assertReady(other);
    assert.notEqual(assistant(other).metadata.sessionId, sessionId);
    assert.equal(await other.transport.reconnectToStream({ chatId: sessionId }), null);
  }
  const events = await sessionEvents(sessionId);
  assert.equal(events.filter((e) => e.type === "user_message").length, 1, "no one else's turn");
});

test("every part the tests read carries only fields every ai 6 client knows", async () => {
  await new Promise((resolve) => setTimeout(resolve, 100)); // the last recordings settle
  assert.ok(seen.length > 100, `only ${seen.length} parts were seen`);
  const types = new Set();
  for (const part of seen) {
    const { type, ...fields } = part;
    types.add(type.startsWith("data-") ? "data-*" : type);
    const allowed = type.startsWith("data-") ? ["id", "data", "transient"] : STRICT_FIELDS[type];
    assert.ok(allowed, `unknown part type ${type}`);
    for (const name of Object.keys(fields)) {
      assert.ok(allowed.includes(name), `${type} has a field ai 6.0.0 refuses: ${name}`);
    }
  }
  for (const type of ["tool-approval-request", "tool-output-denied", "reasoning-delta", "error"]) {
    assert.ok(types.has(type), `no ${type} part was checked`);
  }
});
