// The transcript: renders a session's events into the page, live or read back from its
// log. One renderer for both, so a reopened session looks as it did live. Every server
// or user string goes in through textContent, never as HTML.

import { agentMessageCard, artifactSavedNote } from "./artifacts.js";
import { DONE_TEXT, drawDetail } from "./detail.js";

/** A short human text per stable error code (docs/api.md); unknown codes show the server's. */
export const ERROR_TEXT = {
  unauthorized: "Your token is missing, invalid or expired: sign in again.",
  forbidden: "Your role may not do this.",
  forbidden_role: "This agent does not take that from your role: ask an owner or staff.",
  not_found: "Not found: it is gone, or not yours to see.",
  invalid_request: "The server could not accept that request.",
  payload_too_large: "That is too long to send.",
  rate_limited: "Too many requests: wait a moment, then try again.",
  idempotency_conflict: "This retry does not match the request it repeats.",
  budget_exceeded: "Your organisation's daily model budget is used up.",
  agent_disabled: "No model is configured on this server.",
  tool_already_resolved: "This was answered already; the first answer stands.",
  tool_superseded: "The conversation has moved on: send a new message to do this now.",
  tool_expired: "This waited too long for an answer: send a new message to do it now.",
  invalid_pick: "That is not one of the choices.",
  not_undoable: "This can no longer be undone.",
  no_inverse: "This action cannot be undone.",
  already_undone: "This was undone already.",
  replay_integrity_violation: "A tool result went missing; the conversation was repaired.",
  cancelled: "The turn was cancelled.",
  turn_in_progress: "A reply is still being written in this chat: send your message once it ends.",
  interrupted: "Your newer message interrupted this reply; what it had written is kept.",
  step_timed_out: "It ran out of time.",
  step_overran: "It kept going past its budget.",
  step_skipped: "It depended on a step that failed.",
  empty_answer: "The model wrote no answer: try again, or rephrase.",
  provider_invalid_request: "The model provider rejected the request.",
  provider_unauthorized: "The model provider refused the server's API key.",
  provider_rate_limited: "The model provider is rate limiting: try again shortly.",
  provider_overloaded: "The model provider is overloaded: try again shortly.",
  provider_unavailable: "The model provider is unavailable.",
  provider_timeout: "The model took too long to answer.",
  internal: "Something went wrong on the server.",
};

// Why an answer was cut short, by its message_done stop_reason (docs/api.md#stop-reasons).
const CUT_SHORT = {
  max_tokens: "the model's output limit",
  max_model_turns: "the agent's limit of model turns",
  time_limit: "the time limit",
  turn_budget: "the turn's budget",
  max_tool_calls: "the step's limit of tool calls",
  interrupted: "a newer message",
};

// Stop reasons of a whole answer; any other (an unknown one too) was cut short.
const WHOLE = new Set(["end_turn", "stop_sequence", "tool_use"]);

const UNDO_WINDOW_MS = 15_000;
const MAX_JSON_CHARS = 4_000;
const STRATEGY_TEXT = { simple: "Direct answer", tool: "Tool plan", complex: "Complex plan" };
const DECISION_TEXT = { approved: "Approved", rejected: "Rejected", answered: "Answered" };

/** Build an element: `h("p.note", {dataset: {x: 1}}, "text", child)`. */
export function h(spec, props = {}, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag);
  if (classes.length) node.className = classes.join(" ");
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "dataset") {
      for (const [name, item] of Object.entries(value)) {
        if (item !== undefined && item !== null) node.dataset[name] = item;
      }
    } else if (key in node) {
      node[key] = value; // a property: textContent, type, hidden, disabled...
    } else {
      node.setAttribute(key, String(value)); // aria-*, role
    }
  }
  node.append(...children.filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** An error card: the human text for `code` (else the server's message), the message as
 * a detail, the code and the trace id. */
export function errorCard({ code, message, trace_id: traceId }, eventId) {
  const human = ERROR_TEXT[code];
  return h(
    "div.card.error",
    { dataset: { code, eventId } },
    h("p.error-text", { textContent: human ?? message ?? "Something went wrong." }),
    human && message ? h("p.error-detail", { textContent: message }) : null,
    h(
      "p.error-meta",
      {},
      h("code", { textContent: code ?? "error" }),
      traceId ? ` · trace ` : "",
      traceId ? h("code.trace", { textContent: traceId }) : "",
    ),
  );
}

/** What a partial answer lacks: the steps that failed, and why. */
function partialNote(failedSteps, eventId) {
  const why = failedSteps.map(
    (step) => `${step.step_id} (${ERROR_TEXT[step.code] ?? step.message ?? step.code})`,
  );
  return h("p.note.partial", {
    textContent: `Partial answer: ${why.length ? `failed ${why.join("; ")}` : "some steps failed"}`,
    dataset: { eventId },
  });
}

function json(value, indent = 2) {
  const text = JSON.stringify(value, null, indent) ?? String(value);
  return text.length > MAX_JSON_CHARS ? `${text.slice(0, MAX_JSON_CHARS)}\n…` : text;
}

function usd(micros) {
  const dollars = micros / 1e6;
  return `$${dollars.toFixed(dollars > 0 && dollars < 0.01 ? 4 : 2)}`;
}

function badge(node, status, text = status) {
  node.dataset.status = status;
  node.querySelector(":scope > .card-head .badge, :scope > .step-head .badge").textContent = text;
}

/** One turn's block: the user's message, the plan, tool activity, the answer, notes. */
class TurnBlock {
  constructor(parent) {
    this.userSlot = h("div.user-slot");
    this.plan = h("section.plan", { hidden: true, "aria-label": "Plan" });
    this.activity = h("div.activity");
    this.answer = h("div.answer", { "aria-live": "polite" });
    this.notes = h("div.notes");
    this.meta = h("p.turn-meta");
    this.node = h(
      "article.turn",
      {},
      this.userSlot,
      h("div.assistant", {}, this.plan, this.activity, this.answer, this.notes, this.meta),
    );
    this.steps = new Map();
    parent.append(this.node);
  }

  step(stepId) {
    return stepId == null ? null : this.steps.get(stepId) ?? null;
  }
}

export class Transcript {
  /** `actions`: `confirm(toolUseId, approved)` and `pick(toolUseId, id)` resolve to `null`
   * once the turn's stream has been followed, or to the error `{code, message, trace_id}`;
   * `undo(toolUseId)` resolves to `{result}` (the undo's reply) or `{error}`. */
  constructor(root, actions) {
    this.root = root;
    this.actions = actions;
    this.reset();
  }

  reset() {
    this.root.replaceChildren();
    this.seen = new Set();
    this.lastId = 0;
    this.turn = null;
    this.tools = new Map(); // tool_use_id -> tool card
    this.asks = new Map(); // tool_use_id -> confirmation or picker card
  }

  /** Render one event (`{id, type, data}`) unless its id was rendered before. `createdAt`
   * (log entries) dates it, for the undo window; live events are "now". */
  apply(event, { createdAt = null } = {}) {
    const id = event.id;
    if (id != null) {
      if (this.seen.has(id)) return false;
      this.seen.add(id);
      this.lastId = Math.max(this.lastId, id);
    }
    const at = createdAt ? Date.parse(createdAt) : Date.now();
    const stick = this.#nearBottom();
    this.#render(event.type, event.data ?? {}, id, at);
    if (stick) this.root.scrollTop = this.root.scrollHeight;
    return true;
  }

  /** Draw a past session from its detail (`GET /v1/sessions/{id}`: messages with their
   * tool calls) instead of replaying its log; `artifact(id, version)` loads a delivered
   * artifact. Nothing is drawn once `current()` says the page moved on. Live events
   * (a new turn) then follow the detail's `last_seq`. */
  async showPast(detail, artifact, current = () => true) {
    const box = h("div");
    await drawDetail(h, box, detail, artifact);
    if (!current()) return false;
    this.root.append(...box.children);
    this.lastId = Math.max(this.lastId, detail.last_seq ?? 0);
    this.turn = null;
    this.root.scrollTop = this.root.scrollHeight;
    return true;
  }

  /** A failure that is no event of the log (an HTTP error, a lost connection). */
  note(error) {
    this.#turn().notes.append(errorCard(error));
    this.root.scrollTop = this.root.scrollHeight;
  }

  #nearBottom() {
    const { scrollHeight, scrollTop, clientHeight } = this.root;
    return scrollHeight - scrollTop - clientHeight < 120;
  }

  #turn() {
    this.turn ??= new TurnBlock(this.root);
    return this.turn;
  }

  #render(type, data, id, at) {
    switch (type) {
      case "user_message":
        this.turn = new TurnBlock(this.root);
        this.turn.userSlot.append(
          h("p.bubble.user", { textContent: data.text, dataset: { eventId: id } }),
        );
        break;
      case "plan_created":
        this.#plan(data, id);
        break;
      case "context_loaded":
        this.#source(data, id);
        break;
      case "step_started":
        this.#stepStarted(data);
        break;
      case "step_completed":
        this.#stepCompleted(data, id);
        break;
      case "text_delta":
        this.#delta(data, id);
        break;
      case "message_reset":
        this.#reset(data);
        break;
      case "tool_started":
        this.#toolStarted(data, id);
        break;
      case "tool_completed":
        this.#toolCompleted(data, id, at);
        break;
      case "artifact":
        this.#turn().activity.append(artifactSavedNote(h, data, id));
        break;
      case "agent_message":
        this.#turn().answer.append(agentMessageCard(h, data, id));
        break;
      case "confirmation_pending":
        this.#confirmation(data, id);
        break;
      case "disambiguation_pending":
        this.#picker(data, id);
        break;
      case "question_pending":
        this.#question(data, id);
        break;
      case "tool_resolved":
        this.#resolved(data, id);
        break;
      case "approval_resolved":
        this.#approvalResolved(data, id);
        break;
      case "message_done":
        this.#messageDone(data);
        break;
      case "usage":
        this.#usage(data, id);
        break;
      case "error":
        this.#turn().notes.append(errorCard(data, id));
        break;
      case "done":
        this.#done(data, id);
        break;
      default: // session_started, context_budget, history_summarised, ...: nothing to show
        break;
    }
  }

  #plan(data, id) {
    const turn = this.#turn();
    const steps = data.steps ?? [];
    const parts = [STRATEGY_TEXT[data.strategy] ?? data.strategy];
    if (steps.length) parts.push(`${steps.length} step${steps.length === 1 ? "" : "s"}`);
    if (data.executors > 1) parts.push(`up to ${data.executors} in parallel`);
    const list = h("ol.steps");
    for (const step of steps) {
      const node = h(
        "li.step",
        { dataset: { stepId: step.id, status: "waiting" } },
        h(
          "div.step-head",
          {},
          h("span.step-id", { textContent: step.id }),
          h("span.step-goal", { textContent: step.goal }),
          h("span.badge", { textContent: "waiting" }),
        ),
        step.depends_on?.length
          ? h("p.step-deps", { textContent: `after ${step.depends_on.join(", ")}` })
          : null,
      );
      node.text = h("p.step-text");
      node.tools = h("div.step-tools");
      node.append(node.text, node.tools);
      turn.steps.set(step.id, node);
      list.append(node);
    }
    turn.plan.replaceChildren(
      h("p.plan-head", { textContent: parts.join(" · "), dataset: { eventId: id } }),
      ...(data.fallback ? [h("p.plan-note", { textContent: `Fallback: ${data.fallback}` })] : []),
      ...(steps.length ? [list] : []),
      h("ul.sources"),
    );
    turn.plan.dataset.strategy = data.strategy;
    turn.plan.hidden = false;
  }

  #source(data, id) {
    const list = this.#turn().plan.querySelector(".sources");
    if (!list) return;
    const text = data.error
      ? `${data.source}: not loaded (${data.error})`
      : `${data.source}: ${data.tokens} tokens${data.truncated ? " (truncated)" : ""}`;
    list.append(h("li", { textContent: text, dataset: { eventId: id } }));
  }

  #stepStarted(data) {
    const node = this.#turn().step(data.step_id);
    if (node) badge(node, "running");
  }

  #stepCompleted(data, id) {
    const node = this.#turn().step(data.step_id);
    if (!node) return;
    // A step that did its work over failed tool calls is not shown as a plain "ok".
    const failedCalls = data.failed_tool_calls ?? 0;
    if (!data.ok) badge(node, "failed");
    else if (failedCalls) {
      badge(node, "degraded", `done, ${failedCalls} tool call${failedCalls === 1 ? "" : "s"} failed`);
    }
    else badge(node, "ok");
    const calls = `${data.tool_calls} tool call${data.tool_calls === 1 ? "" : "s"}`;
    const facts = [failedCalls ? `${calls} (${failedCalls} failed)` : calls];
    if (!data.ok && data.error?.code) facts.push(data.error.code);
    if (data.duration_ms != null) facts.push(`${(data.duration_ms / 1000).toFixed(1)} s`);
    // The summary is often the text the step streamed: say it once.
    const summary = data.summary?.trim();
    const said = [node.text.textContent.trim(), this.turn.answer.textContent.trim()];
    if (summary && !said.includes(summary)) {
      node.append(h("p.step-summary", { textContent: summary }));
    }
    node.append(h("p.step-facts", { textContent: facts.join(" · "), dataset: { eventId: id } }));
  }

  #delta(data, id) {
    const turn = this.#turn();
    const span = h("span", {
      textContent: data.delta,
      dataset: { eventId: id, stepId: data.step_id },
    });
    if (data.step_id == null) {
      turn.answer.append(span);
      turn.answer.classList.add("streaming");
    } else {
      (turn.step(data.step_id)?.text ?? turn.activity).append(span);
    }
  }

  /** A worker died mid-stream and the turn was taken over: the text it had streamed for
   * this message (the answer, or a step's) from `from_seq` on is written again next, so the
   * text shown from there goes. Live or replayed from the log, the answer reads once. */
  #reset(data) {
    const turn = this.#turn();
    const stepId = data.step_id ?? null;
    const box = stepId == null ? turn.answer : turn.step(stepId)?.text ?? turn.activity;
    for (const span of box.querySelectorAll(":scope > span[data-event-id]")) {
      const same = (span.dataset.stepId ?? null) === stepId;
      if (same && Number(span.dataset.eventId) >= data.from_seq) span.remove();
    }
  }

  #toolStarted(data, id) {
    const undone = data.tool_use_id.endsWith("-undo")
      ? this.tools.get(data.tool_use_id.slice(0, -"-undo".length))
      : null;
    if (undone) {
      // An undo logged outside any turn: show it on the write it undid, as live.
      this.tools.set(data.tool_use_id, undone);
      undone.undoId = data.tool_use_id;
      return;
    }
    const turn = this.#turn();
    const card = h(
      "div.card.tool",
      { dataset: { toolUseId: data.tool_use_id, status: "running", eventId: id } },
      h(
        "div.card-head",
        {},
        h("span.tool-name", { textContent: data.tool }),
        h("span.badge", { textContent: "running" }),
      ),
      h("code.io.input", { textContent: json(data.input, 0) }),
    );
    this.tools.set(data.tool_use_id, card);
    (turn.step(data.step_id)?.tools ?? turn.activity).append(card);
  }

  #toolCompleted(data, id, at) {
    const card = this.tools.get(data.tool_use_id);
    if (!card) return;
    if (card.undoId === data.tool_use_id) {
      this.#showUndo(card, data, id);
      return;
    }
    if (data.ok && data.output?.status === "queued_for_approval") {
      // A deferred call: recorded, not run (an `approval_resolved` says how it ended).
      badge(card, "queued", "queued for approval");
      card.append(
        h("p.result.queued", {
          textContent: "Queued for approval: it runs only once a person approves it.",
          dataset: { eventId: id },
        }),
      );
      return;
    }
    badge(card, data.ok ? "ok" : "failed");
    const result = data.ok
      ? h(
          "details.result",
          { dataset: { eventId: id } },
          h("summary", { textContent: "Output" }),
          h("pre.io", { textContent: json(data.output) }),
        )
      : h(
          "p.result.tool-error",
          { dataset: { eventId: id } },
          h("code", { textContent: data.error?.code ?? "error" }),
          ` ${data.error?.message ?? ""}${data.error?.hint ? ` (${data.error.hint})` : ""}`,
        );
    card.append(result);
    const left = UNDO_WINDOW_MS - (Date.now() - at);
    if (data.ok && data.inverse_available && left > 0) this.#offerUndo(card, left);
  }

  #offerUndo(card, leftMs) {
    const button = h("button.undo", { type: "button", textContent: "Undo" });
    const timer = h("span.undo-left");
    const row = h("div.undo-row", {}, button, timer);
    const deadline = Date.now() + leftMs;
    const tick = () => {
      const left = Math.ceil((deadline - Date.now()) / 1000);
      if (left <= 0 || !row.isConnected) {
        clearInterval(interval);
        if (!button.disabled) row.remove();
        return;
      }
      timer.textContent = `${left} s`;
    };
    card.append(row);
    const interval = setInterval(tick, 250);
    tick();
    button.addEventListener("click", async () => {
      button.disabled = true;
      clearInterval(interval);
      timer.textContent = "Undoing…";
      const outcome = await this.actions.undo(card.dataset.toolUseId);
      row.remove();
      if (outcome.error) card.append(errorCard(outcome.error));
      else this.#showUndo(card, outcome.result, null);
    });
  }

  /** Mark `card` undone (or show why its undo failed) from the undo's result. */
  #showUndo(card, result, id) {
    if (card.dataset.status === "undone") return;
    card.querySelector(":scope > .undo-row")?.remove();
    if (!result.ok) {
      card.append(errorCard({ code: result.error?.code, message: result.error?.message }, id));
      return;
    }
    badge(card, "undone");
    card.append(
      h(
        "details.undo-result",
        { dataset: { eventId: id } },
        h("summary", { textContent: "Undone" }),
        h("pre.io", { textContent: json(result.output) }),
      ),
    );
  }

  #ask(kind, data, id, title, ...body) {
    const card = h(
      `div.card.ask.${kind}`,
      { dataset: { toolUseId: data.tool_use_id, state: "pending", eventId: id } },
      h("div.card-head", {}, h("span.ask-title", { textContent: title }), h("span.badge")),
      ...body,
    );
    card.note = h("p.ask-note", { role: "status" });
    card.append(card.note);
    this.asks.set(data.tool_use_id, card);
    this.#turn().activity.append(card);
    return card;
  }

  #confirmation(data, id) {
    const approve = h("button.approve", { type: "button", textContent: "Approve" });
    const reject = h("button.reject", { type: "button", textContent: "Reject" });
    const card = this.#ask(
      "confirm",
      data,
      id,
      `Approve ${data.tool}?`,
      h("pre.io.input", { textContent: json(data.input) }),
      h("div.ask-actions", {}, approve, reject),
    );
    badge(card, "pending", data.confirm);
    const answer = (approved) => () =>
      this.#answer(card, approved ? "Approving…" : "Rejecting…", () =>
        this.actions.confirm(data.tool_use_id, approved),
      );
    approve.addEventListener("click", answer(true));
    reject.addEventListener("click", answer(false));
  }

  #picker(data, id) {
    const buttons = (data.candidates ?? []).map((candidate) => {
      const button = h(
        "button.candidate",
        { type: "button", dataset: { candidateId: candidate.id } },
        h("span.candidate-label", { textContent: candidate.label }),
        h("span.candidate-sublabel", { textContent: candidate.sublabel ?? "" }),
      );
      button.addEventListener("click", () =>
        this.#answer(card, `Picking ${candidate.label}…`, () =>
          this.actions.pick(data.tool_use_id, candidate.id),
        ),
      );
      return button;
    });
    const card = this.#ask(
      "pick",
      data,
      id,
      data.prompt,
      h("div.ask-actions.candidates", {}, ...buttons),
    );
    card.candidates = new Map((data.candidates ?? []).map((c) => [c.id, c.label]));
    badge(card, "pending", `choose a ${data.kind ?? "item"}`);
  }

  /** The agent asked the user (`message_ask_user`): the next message answers it, so an
   * option's button simply sends that option as the message. */
  #question(data, id) {
    const options = (data.options ?? []).map((option) => {
      const button = h("button.option", { type: "button", textContent: option });
      button.addEventListener("click", () =>
        this.#answer(card, `Answering ${option}…`, () => this.actions.say(option)),
      );
      return button;
    });
    const card = this.#ask(
      "question",
      data,
      id,
      data.question,
      options.length ? h("div.ask-actions.options", {}, ...options) : null,
    );
    card.note.textContent = "Answer in the message box.";
    badge(card, "pending", "question");
  }

  async #answer(card, pendingText, send) {
    if (card.dataset.state !== "pending") return;
    card.dataset.state = "sending";
    card.querySelectorAll(".ask-actions button").forEach((b) => (b.disabled = true));
    card.note.textContent = pendingText;
    const error = await send();
    if (card.dataset.state !== "sending") return; // the stream said how it was resolved
    // Refused, or the answer never reached the server: the question stands (unless moot).
    const final = ["tool_already_resolved", "tool_superseded", "not_found"].includes(error?.code);
    card.dataset.state = final ? "closed" : "pending";
    card.note.replaceChildren(...(error ? [errorCard(error)] : []));
    if (!final) card.querySelectorAll(".ask-actions button").forEach((b) => (b.disabled = false));
  }

  #resolved(data, id) {
    const card = this.asks.get(data.tool_use_id);
    if (!card) return;
    card.dataset.state = data.decision;
    card.querySelector(":scope > .ask-actions")?.remove();
    const label =
      data.decision === "picked"
        ? `Picked: ${card.candidates?.get(data.picked_id) ?? data.picked_id}`
        : DECISION_TEXT[data.decision] ?? data.decision;
    badge(card, data.decision, data.decision);
    card.note.replaceChildren();
    card.note.before(h("p.ask-decision", { textContent: label, dataset: { eventId: id } }));
  }

  /** A queued call's approval ended (logged outside any turn): say so on its card. */
  #approvalResolved(data, id) {
    const card = this.tools.get(data.tool_use_id);
    const failure = data.error?.code
      ? `${data.error.code}${data.error.message ? `: ${data.error.message}` : ""}`
      : "error";
    const [status, label, text] = {
      approved: data.ok
        ? ["ok", "approved · ok", `Approved: ${data.tool} ran: ok`]
        : ["failed", "approved · failed", `Approved: ${data.tool} ran: failed (${failure})`],
      rejected: ["rejected", "rejected", `Rejected${data.reason ? `: ${data.reason}` : ", never ran"}`],
      expired: ["expired", "expired", "Expired, never ran"],
    }[data.decision] ?? [data.decision, data.decision, `Approval ${data.decision}`];
    const note = h("p.note.approval-resolved", {
      textContent: text,
      dataset: { eventId: id, decision: data.decision },
    });
    if (!card) {
      this.#turn().notes.append(note);
      return;
    }
    badge(card, status, label);
    card.append(note);
    if (data.ok && data.output !== undefined && data.output !== null) {
      card.append(
        h(
          "details.result",
          {},
          h("summary", { textContent: "Output" }),
          h("pre.io", { textContent: json(data.output) }),
        ),
      );
    }
  }

  #messageDone(data) {
    const turn = this.#turn();
    turn.answer.classList.remove("streaming");
    if (data.stop_reason === "refusal") {
      turn.notes.append(h("p.note", { textContent: "The model declined." }));
    } else if (data.stop_reason && !WHOLE.has(data.stop_reason)) {
      const why = Object.hasOwn(CUT_SHORT, data.stop_reason) ? CUT_SHORT[data.stop_reason] : "";
      const reason = data.stop_reason;
      const text = why ? `Cut short: ${why} (${reason}).` : `Cut short (${reason}).`;
      turn.notes.append(h("p.note.cut-short", { textContent: text }));
    }
  }

  #usage(data, id) {
    // A resumed turn reports its own usage again: show the turn's total.
    const turn = this.#turn();
    turn.tokens = (turn.tokens ?? 0) + (data.input_tokens ?? 0) + (data.output_tokens ?? 0);
    turn.cost = (turn.cost ?? 0) + (data.cost_usd_micros ?? 0);
    turn.meta.querySelector(".turn-usage")?.remove();
    const text = `${turn.tokens.toLocaleString("en")} tokens · ${usd(turn.cost)}`;
    turn.meta.append(h("span.turn-usage", { textContent: text, dataset: { eventId: id } }));
  }

  #done(data, id) {
    const turn = this.#turn();
    turn.answer.classList.remove("streaming");
    if (data.partial) turn.notes.append(partialNote(data.failed_steps ?? [], id));
    turn.meta.querySelector(".turn-status")?.remove();
    turn.meta.prepend(
      h("span.turn-status", {
        textContent: DONE_TEXT[data.status] ?? data.status,
        dataset: { status: data.status, eventId: id },
      }),
    );
  }
}
