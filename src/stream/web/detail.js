// A past session drawn from `GET /v1/sessions/{id}` (its messages with their tool calls)
// rather than by replaying its raw log: each user message, then what the agent did (every
// tool call collapsed to a line: tool, step, status; expandable to its input, output or
// error and artifacts), then the answer. Every server string goes in through textContent.

import { agentMessageCard } from "./artifacts.js";

const MAX_JSON_CHARS = 4_000;
const NOTIFY_TOOL = "message.notify_user";
const STATUS_TEXT = {
  ok: "ok",
  error: "error",
  running: "running",
  pending_confirmation: "waiting for confirmation",
  pending_pick: "waiting for a pick",
  pending_answer: "waiting for an answer",
  rejected: "rejected",
  queued_for_approval: "queued for approval",
  undone: "undone",
  expired: "expired",
  cancelled: "cancelled",
};
/** What the page says of a turn's final status (live and past). */
export const DONE_TEXT = {
  completed: "Done",
  suspended: "Waiting for your answer",
  failed: "Failed",
  cancelled: "Cancelled",
  expired: "Expired: the question went unanswered",
  superseded: "Superseded by a newer message",
};

function json(value) {
  const text = JSON.stringify(value, null, 2) ?? String(value);
  return text.length > MAX_JSON_CHARS ? `${text.slice(0, MAX_JSON_CHARS)}\n…` : text;
}

/** A call's output: whole, or the start of a long one (the raw log keeps all of it). */
function outputOf(h, call) {
  if (call.output_truncated) {
    const label = `Output (the first part of ${call.output_chars} characters)`;
    return [
      h("p.call-label", { textContent: label }),
      h("pre.io.output", {
        textContent: call.output_summary ?? "",
        dataset: { truncated: "true" },
      }),
    ];
  }
  if (call.output === null || call.output === undefined) return [];
  return [
    h("p.call-label", { textContent: "Output" }),
    h("pre.io.output", { textContent: json(call.output) }),
  ];
}

function errorOf(h, error) {
  if (!error) return null;
  const hint = error.hint ? ` (${error.hint})` : "";
  return h(
    "p.result.tool-error",
    {},
    h("code", { textContent: error.code }),
    ` ${error.message ?? ""}${hint}`,
  );
}

/** One tool call, collapsed: a `<details>` whose summary is tool, step and status, and
 * whose body is its step's goal, input, output or error, artifacts and undo. */
export function callCard(h, call) {
  const status = STATUS_TEXT[call.status] ?? call.status;
  const decided = call.decision && call.decision !== call.status;
  const artifacts = (call.artifacts ?? []).map((a) =>
    h("li", {
      textContent: `${a.type} “${a.title}”${a.version > 1 ? ` v${a.version}` : ""}`,
      dataset: { artifactId: a.id, version: a.version },
    }),
  );
  const step = call.step_goal ? `Step ${call.step_id}: ${call.step_goal}` : null;
  return h(
    "details.card.tool.call",
    { dataset: { toolUseId: call.tool_use_id, status: call.status, stepId: call.step_id } },
    h(
      "summary.card-head",
      {},
      h("span.tool-name", { textContent: call.tool }),
      call.step_id ? h("span.call-step", { textContent: call.step_id }) : null,
      h("span.badge", { textContent: decided ? `${call.decision} · ${status}` : status }),
    ),
    h(
      "div.call-body",
      {},
      step ? h("p.call-label.call-goal", { textContent: step }) : null,
      h("p.call-label", { textContent: "Input" }),
      h("pre.io.input", { textContent: json(call.input) }),
      ...outputOf(h, call),
      errorOf(h, call.error),
      artifacts.length ? h("ul.call-artifacts", {}, ...artifacts) : null,
      call.undone_by ? h("p.call-label", { textContent: `Undone by ${call.undone_by}` }) : null,
    ),
  );
}

/** Draw `detail`'s messages into `root` as turn blocks (as `TurnBlock` lays them out);
 * `artifact(id, version)` resolves to an artifact with its payload (or null), for the
 * cards the agent delivered with `message.notify_user`. The last block is returned. */
export async function drawDetail(h, root, detail, artifact) {
  const statuses = new Map((detail.turns ?? []).map((t) => [t.id, t.status]));
  const versions = new Map(); // artifact id -> the latest version made so far
  const last = new Map(); // turn id -> its last assistant message: the one with its status
  for (const message of detail.messages ?? []) {
    if (message.role === "assistant") last.set(message.turn_id, message);
  }
  let block = null;
  const newBlock = (turnId) => {
    block = {
      userSlot: h("div.user-slot"),
      plan: h("section.plan", { hidden: true, "aria-label": "Plan" }),
      calls: h("div.activity.calls"),
      answer: h("div.answer", { "aria-live": "polite" }),
      notes: h("div.notes"),
      meta: h("p.turn-meta"),
      turnId,
    };
    const node = h(
      "article.turn.past",
      { dataset: { turnId } },
      block.userSlot,
      h("div.assistant", {}, block.plan, block.calls, block.answer, block.notes, block.meta),
    );
    block.node = node;
    root.append(node);
    return block;
  };
  for (const message of detail.messages ?? []) {
    if (message.role === "user") {
      newBlock(message.turn_id).userSlot.append(
        h("p.bubble.user", { textContent: message.text, dataset: { seq: message.seq } }),
      );
      continue;
    }
    if (!block || block.turnId !== message.turn_id) newBlock(message.turn_id);
    if (message.steps?.length) block.steps = planSection(h, block, message.steps, message.text);
    for (const call of message.tool_calls ?? []) {
      for (const made of call.artifacts ?? []) versions.set(made.id, made.version);
      const step = call.step_id ? block.steps?.get(call.step_id) : null;
      (step?.tools ?? block.calls).append(callCard(h, call));
      const delivered = await delivery(call, message, versions, artifact);
      if (delivered) block.answer.append(agentMessageCard(h, delivered, null));
    }
    if (message.text) {
      block.answer.append(h("span", { textContent: message.text, dataset: { seq: message.seq } }));
    }
    const status = last.get(message.turn_id) === message ? statuses.get(message.turn_id) : null;
    if (status) {
      block.meta.replaceChildren(
        h("span.turn-status", { textContent: DONE_TEXT[status] ?? status, dataset: { status } }),
      );
    }
  }
  return block;
}

/** The plan's steps as the live page lays them out (goal, status, streamed text, and
 * below, their calls); a map of step id to its `{tools}` box. */
function planSection(h, block, steps, answer) {
  const byId = new Map();
  const list = h("ol.steps");
  for (const step of steps) {
    const tools = h("div.step-tools");
    const text = step.text?.trim();
    const summary = step.summary?.trim();
    list.append(
      h(
        "li.step",
        { dataset: { stepId: step.step_id, status: step.status } },
        h(
          "div.step-head",
          {},
          h("span.step-id", { textContent: step.step_id }),
          h("span.step-goal", { textContent: step.goal }),
          h("span.badge", { textContent: step.status }),
        ),
        step.depends_on?.length
          ? h("p.step-deps", { textContent: `after ${step.depends_on.join(", ")}` })
          : null,
        h("p.step-text", { textContent: step.text ?? "" }),
        // The summary is often the text the step streamed, or the answer: say it once.
        summary && ![text, answer.trim()].includes(summary)
          ? h("p.step-summary", { textContent: summary })
          : null,
        step.error_code ? h("p.step-facts", { textContent: step.error_code }) : null,
        tools,
      ),
    );
    byId.set(step.step_id, { tools });
  }
  const count = `${steps.length} step${steps.length === 1 ? "" : "s"}`;
  block.plan.replaceChildren(h("p.plan-head", { textContent: `Plan · ${count}` }), list);
  block.plan.hidden = false;
  return byId;
}

/** What a `message.notify_user` call delivered, as its `agent_message` event had it. */
async function delivery(call, message, versions, artifact) {
  if (call.tool !== NOTIFY_TOOL || call.status !== "ok") return null;
  const text = String(call.input?.message ?? "");
  const id = call.input?.artifact_id;
  const payload = id ? await artifact(id, versions.get(id) ?? null) : null;
  return {
    text,
    tool_use_id: call.tool_use_id,
    in_answer: Boolean(text) && message.text.includes(text), // said once
    artifact: payload,
  };
}
