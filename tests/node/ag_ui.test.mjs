// AG-UI's own client (npm @ag-ui/client 1.0.0: HttpAgent) against `bosun serve --dev` on
// the scripted model in ag_ui.yaml. The client validates every event against its schema
// and verifies their order (RUN_STARTED first, nothing after RUN_FINISHED or RUN_ERROR,
// every step, message and tool call closed before the run ends): a violation rejects
// runAgent, and material it does not know is stripped with a console warning, which
// these tests count as a failure too.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const URL_ = process.env.BOSUN_URL;
const TOKEN = process.env.BOSUN_TOKEN;
const MEMBER_TOKEN = process.env.BOSUN_MEMBER_TOKEN;
const OTHER_ORG_TOKEN = process.env.BOSUN_OTHER_ORG_TOKEN;
const API = `${URL_}/v1/ag-ui`;
const ENGINE_BUILDER = "wo_66e434af2a31";
const TEMPO_RUN = "wo_f6ed3930eade";
const SAM_OKAFOR = "mem_e3378ad35736";

// The client reports what its enforcement stage strips as "[ag-ui]..." warnings.
const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
  warn(...args);
};

function agent({ token = TOKEN, threadId = `thread-${randomUUID()}`, fetch: wrapped } = {}) {
  return new HttpAgent({
    url: API,
    threadId,
    headers: { Authorization: `Bearer ${token}` },
    ...(wrapped ? { fetch: wrapped } : {}),
  });
}

/** Add the user's `text` (if any) and run the agent, collecting what its subscribers see. */
async function run(a, text, parameters = {}, extra = {}) {
  if (text) a.addMessage({ id: randomUUID(), role: "user", content: text });
  const events = [];
  const seen = { events, finished: undefined, errors: [] };
  const before = warnings.length;
  seen.result = await a.runAgent(parameters, {
    onEvent: ({ event }) => {
      events.push(event);
    },
    onRunFinishedEvent: (params) => {
      seen.finished = params;
    },
    onRunErrorEvent: ({ event }) => {
      seen.errors.push(event);
    },
    ...extra,
  });
  const stripped = warnings.slice(before).filter((w) => w.includes("[ag-ui]"));
  assert.deepEqual(stripped, [], "the client stripped material it does not know");
  seen.types = events.map((e) => e.type);
  seen.bosun = events[0]?.metadata?.bosun;
  return seen;
}

function assertRun(seen, a, runId) {
  assert.equal(seen.types[0], "RUN_STARTED");
  assert.equal(seen.types.at(-1), "RUN_FINISHED");
  assert.equal(seen.types.filter((t) => t === "RUN_FINISHED").length, 1);
  assert.equal(seen.events[0].threadId, a.threadId);
  assert.equal(seen.events.at(-1).threadId, a.threadId);
  if (runId) {
    assert.equal(seen.events[0].runId, runId);
    assert.equal(seen.events.at(-1).runId, runId);
  }
}

async function sessionEvents(sessionId, token = TOKEN) {
  const response = await fetch(`${URL_}/v1/sessions/${sessionId}/events`, {
    headers: { Authorization: `Bearer ${token}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()).events;
}

function lastAssistantText(a) {
  return a.messages.filter((m) => m.role === "assistant" && m.content).at(-1)?.content;
}

test("a streamed answer, its usage and the client's runId echoed", async () => {
  const a = agent();
  const runId = `run-${randomUUID()}`;
  const seen = await run(a, "Say hello over AG-UI", { runId });
  assertRun(seen, a, runId);
  assert.equal(seen.finished.outcome, "success");
  assert.ok(seen.types.filter((t) => t === "TEXT_MESSAGE_CONTENT").length > 3, "streamed in parts");
  assert.equal(lastAssistantText(a), "Hello from Bosun, streamed event by event to an AG-UI client.");
  const usage = seen.finished.event.usage;
  assert.equal(usage.reduce((n, u) => n + u.outputTokens, 0), 14);
  assert.ok(seen.bosun.sessionId && seen.bosun.turnId, "Bosun's ids ride on RUN_STARTED");

  // The same thread goes on: a second message is a second turn of the same session.
  const second = await run(a, "Say hello over AG-UI");
  assertRun(second, a);
  assert.equal(second.bosun.sessionId, seen.bosun.sessionId);
  assert.notEqual(second.bosun.turnId, seen.bosun.turnId);
});

test("a complex plan: steps, the plan as state and its step statuses", async () => {
  const a = agent();
  const seen = await run(a, "Plan Aisha's intro week");
  assertRun(seen, a);
  const started = seen.events.filter((e) => e.type === "STEP_STARTED").map((e) => e.stepName);
  const finished = seen.events.filter((e) => e.type === "STEP_FINISHED").map((e) => e.stepName);
  assert.deepEqual([...started].sort(), ["s1", "s2", "s3"]);
  assert.deepEqual([...finished].sort(), ["s1", "s2", "s3"]);
  assert.ok(seen.types.indexOf("STATE_SNAPSHOT") < seen.types.indexOf("STEP_STARTED"));
  assert.ok(seen.types.includes("STATE_DELTA"));
  const steps = a.state.plan.steps;
  assert.deepEqual(steps.map((s) => s.id), ["s1", "s2", "s3"]);
  assert.deepEqual(steps.map((s) => s.status), ["completed", "completed", "completed"]);
  assert.deepEqual(steps[2].dependsOn, ["s1", "s2"]);
  const calls = a.messages.flatMap((m) => m.toolCalls ?? []).map((c) => c.function.name);
  assert.deepEqual([...calls].sort(), ["members.search", "programs.list"]);
  const results = a.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId);
  assert.deepEqual([...results].sort(), ["toolu_find_aisha", "toolu_programs_aisha"]);
  assert.equal(lastAssistantText(a), "Aisha's intro week is planned: an intro session, then Foundations.");
});

test("a confirmation interrupt resumed resolved runs the tool once", async () => {
  const a = agent();
  const first = await run(a, "Delete the Engine builder workout");
  assertRun(first, a);
  assert.equal(first.finished.outcome, "interrupt");
  const [asked] = first.finished.interrupts;
  assert.equal(first.finished.interrupts.length, 1);
  assert.equal(asked.id, "toolu_delete_engine");
  assert.equal(asked.reason, "tool_call");
  assert.equal(asked.toolCallId, "toolu_delete_engine");
  assert.deepEqual(asked.responseSchema.required, ["approved"]);
  assert.equal(asked.responseSchema.properties.approved.type, "boolean");
  assert.ok(Date.parse(asked.expiresAt) > Date.now(), "expires later");
  assert.deepEqual(asked.metadata.input, { workout_id: ENGINE_BUILDER });
  assert.deepEqual(a.pendingInterrupts.map((i) => i.id), ["toolu_delete_engine"]);
  const call = a.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.id === asked.toolCallId);
  assert.equal(call.function.name, "workouts.delete");
  assert.deepEqual(JSON.parse(call.function.arguments), { workout_id: ENGINE_BUILDER });

  // The client refuses a run that leaves the interrupt unanswered.
  await assert.rejects(a.runAgent({}), /pending interrupt/);

  const resume = buildResumeArray(a.pendingInterrupts, {
    [asked.id]: { status: "resolved", payload: { approved: true } },
  });
  const second = await run(a, undefined, { resume });
  assertRun(second, a);
  assert.equal(second.finished.outcome, "success");
  assert.equal(second.bosun.turnId, first.bosun.turnId, "the same turn goes on");
  assert.deepEqual(a.pendingInterrupts, []);
  assert.equal(second.types.filter((t) => t === "TOOL_CALL_START").length, 0, "shown once");
  const result = a.messages.find((m) => m.role === "tool" && m.toolCallId === asked.id);
  assert.equal(JSON.parse(result.content).deleted, true);
  assert.equal(lastAssistantText(a), "Deleted the Engine builder workout.");

  const log = await sessionEvents(first.bosun.sessionId);
  const ran = log.filter((e) => e.type === "tool_completed" && e.data.tool_use_id === asked.id);
  assert.equal(ran.length, 1);
  assert.equal(ran[0].data.ok, true);

  // The interrupt is answered: resuming it again is a clear 409.
  const again = agent({ threadId: a.threadId });
  await assert.rejects(
    again.runAgent({ resume: [{ interruptId: asked.id, status: "resolved", payload: { approved: true } }] }),
    (error) => error.status === 409 && error.payload.error.code === "tool_already_resolved",
  );
});

test("a confirmation interrupt resumed cancelled never runs the tool", async () => {
  const a = agent();
  const first = await run(a, "Remove the tempo run workout");
  assert.equal(first.finished.outcome, "interrupt");
  const [asked] = first.finished.interrupts;
  assert.equal(asked.toolCallId, "toolu_delete_tempo");
  const resume = buildResumeArray(a.pendingInterrupts, { [asked.id]: { status: "cancelled" } });
  const second = await run(a, undefined, { resume });
  assertRun(second, a);
  assert.equal(second.finished.outcome, "success");
  assert.equal(lastAssistantText(a), "Understood: you declined, so the Tempo run + core workout stays.");
  const log = await sessionEvents(first.bosun.sessionId);
  const decided = log.filter((e) => e.type === "tool_resolved" && e.data.tool_use_id === asked.id);
  assert.deepEqual(decided.map((e) => e.data.decision), ["rejected"]);
  // The declined call's one result is the rejection the model reads: the delete never ran.
  const results = log.filter((e) => e.type === "tool_completed" && e.data.tool_use_id === asked.id);
  assert.deepEqual(
    results.map((e) => [e.data.ok, e.data.error?.code]),
    [[false, "rejected_by_user"]],
  );
  assert.deepEqual(asked.metadata.input, { workout_id: TEMPO_RUN });
  const shown = a.messages.find((m) => m.role === "tool" && m.toolCallId === asked.id);
  assert.equal(JSON.parse(shown.content).error.code, "rejected_by_user");
});

test("a pick interrupt resumed with an id goes on with that entity", async () => {
  const a = agent();
  const first = await run(a, "Book Sam into Morning HIIT");
  assertRun(first, a);
  assert.equal(first.finished.outcome, "interrupt");
  const [asked] = first.finished.interrupts;
  assert.equal(asked.id, "toolu_which_sam");
  assert.equal(asked.reason, "input_required");
  assert.equal(asked.message, "Which Sam?");
  assert.deepEqual(asked.responseSchema.properties.id.enum, ["mem_dd741670e802", SAM_OKAFOR]);
  assert.deepEqual(asked.metadata.candidates.map((c) => c.label), ["Sam Rivera", "Sam Okafor"]);

  const resume = buildResumeArray(a.pendingInterrupts, {
    [asked.id]: { status: "resolved", payload: { id: SAM_OKAFOR } },
  });
  const second = await run(a, undefined, { resume });
  assertRun(second, a);
  assert.equal(second.finished.outcome, "success");
  const get = a.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.id === "toolu_get_sam");
  assert.deepEqual(JSON.parse(get.function.arguments), { member_id: SAM_OKAFOR });
  const read = a.messages.find((m) => m.role === "tool" && m.toolCallId === "toolu_get_sam");
  assert.equal(JSON.parse(read.content).id, SAM_OKAFOR);
  assert.equal(lastAssistantText(a), "Booked the Sam you picked into Morning HIIT.");
});

test("a provider error ends the run with RUN_ERROR and nothing after", async () => {
  const a = agent();
  const seen = await run(a, "Break the model please");
  assert.equal(seen.types[0], "RUN_STARTED");
  assert.equal(seen.types.at(-1), "RUN_ERROR");
  assert.ok(!seen.types.includes("RUN_FINISHED"));
  assert.equal(seen.errors.length, 1);
  assert.equal(seen.errors[0].code, "provider_overloaded");
  assert.equal(seen.errors[0].message, "Overloaded, try again");
});

test("after a dropped connection, re-running the thread re-attaches to its turn", async () => {
  const a = agent();
  a.addMessage({ id: randomUUID(), role: "user", content: "Tell me the long story" });
  let contents = 0;
  const dropped = await a.runAgent(
    {},
    {
      onTextMessageContentEvent: () => {
        contents += 1;
        if (contents === 3) a.abortRun(); // the connection drops mid-answer
      },
    },
  );
  assert.ok(dropped);
  const partial = lastAssistantText(a);
  assert.ok(partial && !partial.endsWith("day."), `dropped mid-answer: ${partial}`);

  // No new message and no resume: the run re-attaches to the thread's running turn and
  // sends the rest of the answer, not what the client already has.
  const seen = await run(a);
  assertRun(seen, a);
  assert.equal(seen.finished.outcome, "success");
  const story =
    "Once upon a time a studio opened at six, the coffee was on at quarter past, and every " +
    "member who came in early found a warm room, a kind coach and a plan for the day.";
  assert.equal(lastAssistantText(a), story);
  assert.equal(a.messages.filter((m) => m.role === "assistant" && m.content).length, 1);

  // With nothing running and no new message, there is nothing to run: a clear 409.
  await assert.rejects(
    agent({ threadId: a.threadId }).runAgent({}),
    (error) => error.status === 409 && error.payload.error.code === "nothing_to_answer",
  );
});

test("another org's (or another member's) thread id is a thread of their own", async () => {
  const a = agent();
  const seen = await run(a, "Say hello over AG-UI");
  const sessionId = seen.bosun.sessionId;
  for (const token of [OTHER_ORG_TOKEN, MEMBER_TOKEN]) {
    // Alice's session id as a thread id: a thread of their own, which works.
    const other = agent({ token, threadId: sessionId });
    const theirs = await run(other, "Say hello from elsewhere");
    assertRun(theirs, other);
    assert.notEqual(theirs.bosun.sessionId, sessionId);
    const resumer = agent({ token, threadId: sessionId });
    await assert.rejects(
      resumer.runAgent({ resume: [{ interruptId: "toolu_x", status: "cancelled" }] }),
      (error) => error.status === 404,
    );
  }
  // Its owner continues it by that id (a UUID thread id naming the user's own session).
  const owner = agent({ threadId: sessionId });
  const again = await run(owner, "Say hello over AG-UI");
  assertRun(again, owner);
  assert.equal(again.bosun.sessionId, sessionId);
});
