// The Approvals view: the org's tool calls waiting for a person (owner or staff), with
// what each would do and why, how long it may still wait, and Approve / Reject. It talks
// to the same API as everyone else (GET /v1/approvals, POST .../approve and .../reject).

import { ERROR_TEXT, h } from "./render.js";

const TICK_MS = 5000;
const OUTCOME_POLL_MS = 500;
const OUTCOME_TRIES = 30;
const MAX_INPUT_CHARS = 600;
const STATUS_TEXT = {
  pending: "pending",
  approved: "approved",
  rejected: "rejected",
  expired: "expired",
  superseded: "superseded",
  interrupted: "interrupted",
};
const MODE_TEXT = {
  suspend: "Suspended chat: its turn waits for this answer",
  defer: "Queued from a run: the run went on without it",
};
/** Clear words for the answers' failures; others fall back to the page's error texts. */
const ANSWER_ERROR_TEXT = {
  already_answered: "Someone answered this already: the first answer stands.",
  expired: "Too late: this approval expired, so the call will never run.",
  not_found: "This approval is gone, or not yours to see.",
  forbidden: "Only owners and staff may answer approvals.",
};

/** "expires in 23 h 59 min" (or "expired") for an ISO `expiresAt`, from `now`. */
export function timeLeft(expiresAt, now = Date.now()) {
  const ms = Date.parse(expiresAt) - now;
  if (!(ms > 0)) return "expired";
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 1) return `expires in ${Math.ceil(ms / 1000)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 1) return `expires in ${minutes} min`;
  if (hours < 48) return `expires in ${hours} h ${minutes % 60} min`;
  return `expires in ${Math.floor(hours / 24)} d ${hours % 24} h`;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function compact(value) {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > MAX_INPUT_CHARS ? `${text.slice(0, MAX_INPUT_CHARS)}…` : text;
}

/** What happened to an answered approval, in a line. */
function decisionText(approval) {
  const by = approval.resolved_by ? ` by ${approval.resolved_by}` : "";
  const at = approval.resolved_at ? ` at ${when(approval.resolved_at)}` : "";
  const reason = approval.reason ? `: ${approval.reason}` : "";
  switch (approval.status) {
    case "approved":
      return `Approved${by}${at}${reason}`;
    case "rejected":
      return `Rejected${by}${at}${reason}; it never ran`;
    case "expired":
      return "Expired: nobody answered in time, so it never ran";
    case "superseded":
      return "Superseded: the conversation moved on, so it never ran";
    case "interrupted":
      return (
        `Approved${by}${at}${reason}; interrupted: its worker stopped while running it, ` +
        "so whether it took effect is unknown (check the audit log); it will not run again"
      );
    default:
      return "";
  }
}

/** How an approved deferred call ran (null before it ran, or for a suspended one). */
function outcomeText(approval) {
  const outcome = approval.outcome;
  if (!outcome) {
    return approval.status === "approved" && approval.mode === "defer" ? "Running…" : "";
  }
  if (outcome.ok) return `${approval.tool} ran: ok`;
  const error = outcome.error ?? {};
  const why = `${error.code ?? "error"}${error.message ? `: ${error.message}` : ""}`;
  return `${approval.tool} ran: failed (${why})`;
}

export class ApprovalsView {
  /** `api(method, path, body)` gives `{data}` or `{error}`; `onCount(pending)` is told the
   * org's pending count whenever it is read; `openSession(id)` and `openRun(agent, runId)`
   * show where a call was made. */
  constructor(root, { api, onCount, openSession, openRun }) {
    this.root = root;
    this.api = api;
    this.onCount = onCount;
    this.openSession = openSession;
    this.openRun = openRun;
    this.filter = "pending"; // or "interrupted", "all"
    this.next = null; // the next page's `after`
    this.timer = null;
    this.shown = 0; // bumped on every render, so late pages for an old one are dropped
  }

  async show() {
    this.root.hidden = false;
    clearInterval(this.timer);
    this.timer = setInterval(() => this.tick(), TICK_MS);
    await this.render();
  }

  hide() {
    this.root.hidden = true;
    clearInterval(this.timer);
    this.timer = null;
  }

  /** The pending count alone (the top bar's badge); null when it could not be read. */
  async refreshCount() {
    const asked = (this.countAsked = (this.countAsked ?? 0) + 1);
    const { data } = await this.api("GET", "/v1/approvals?status=pending&limit=1");
    if (!data) return null;
    if (asked !== this.countAsked) return null; // a later read answers (reads may cross)
    const pending = data.counts.pending ?? 0;
    this.onCount(pending);
    return pending;
  }

  /** Each item's time left (the list is re-read only on request: a reason being typed is
   * never wiped; the top bar polls the count). */
  tick() {
    for (const left of this.root.querySelectorAll(".approval-left[data-expires]")) {
      left.textContent = timeLeft(left.dataset.expires);
    }
  }

  async render() {
    const shown = ++this.shown;
    const filter = h(
      "select",
      { id: "approvals-filter" },
      h("option", { value: "pending", textContent: "Pending" }),
      h("option", { value: "interrupted", textContent: "Interrupted" }),
      h("option", { value: "all", textContent: "All" }),
    );
    filter.value = this.filter;
    filter.addEventListener("change", () => {
      this.filter = filter.value;
      this.render();
    });
    const refresh = h("button", { type: "button", textContent: "Refresh" });
    refresh.addEventListener("click", () => this.render());
    const list = h("ul.approval-list", { id: "approval-list", role: "list" });
    const counts = h("p.approval-counts", { id: "approval-counts", role: "status" });
    this.root.replaceChildren(
      h("h2", { textContent: "Approvals" }),
      h(
        "div.approval-tools",
        {},
        h("label", { htmlFor: "approvals-filter", textContent: "Show" }),
        filter,
        refresh,
      ),
      counts,
      list,
    );
    this.next = null;
    await this.loadPage(shown, list, counts);
  }

  async loadPage(shown, list, counts) {
    const params = new URLSearchParams({ limit: "50" });
    if (this.filter !== "all") params.set("status", this.filter);
    if (this.next) params.set("after", this.next);
    const { data, error } = await this.api("GET", `/v1/approvals?${params}`);
    if (shown !== this.shown) return;
    this.root.querySelector(".approval-more")?.remove();
    if (error) {
      const text = ERROR_TEXT[error.code] ?? error.message;
      list.after(h("p.error-detail", { role: "alert", textContent: text }));
      return;
    }
    this.onCount(data.counts.pending ?? 0);
    counts.textContent = Object.entries(data.counts)
      .map(([status, n]) => `${n} ${STATUS_TEXT[status] ?? status}`)
      .join(" · ") || "Nothing has asked for approval yet.";
    // Pending first (each group newest first, as the server sends them).
    const ordered = [
      ...data.approvals.filter((a) => a.status === "pending"),
      ...data.approvals.filter((a) => a.status !== "pending"),
    ];
    list.append(...ordered.map((approval) => this.item(approval)));
    if (!list.children.length) {
      const none = {
        pending: "Nothing waits for approval.",
        interrupted: "No approved call was cut off while it ran.",
      }[this.filter] ?? "No approvals.";
      list.append(h("li.approval-none", { textContent: none }));
    }
    this.next = data.next_after;
    if (this.next) {
      const more = h("button.approval-more", { type: "button", textContent: "Load more" });
      more.addEventListener("click", () => this.loadPage(shown, list, counts));
      list.after(more);
    }
  }

  /** One approval: what would run and why, where it was asked, and its answer. */
  item(approval) {
    const node = h("li.card.approval", {
      dataset: { approvalId: approval.id, status: approval.status, mode: approval.mode },
    });
    this.fill(node, approval);
    return node;
  }

  fill(node, approval) {
    node.dataset.status = approval.status;
    const left = h("span.approval-left", {
      textContent: approval.status === "pending" ? timeLeft(approval.expires_at) : "",
      dataset: approval.status === "pending" ? { expires: approval.expires_at } : {},
    });
    const where = [];
    const session = h("button.link.approval-session", {
      type: "button", textContent: "Open session",
    });
    session.addEventListener("click", () => this.openSession(approval.session_id));
    where.push(session);
    if (approval.run_id) {
      const run = h("button.link.approval-run", { type: "button", textContent: "Open run" });
      run.addEventListener("click", () => this.openRun(approval.agent, approval.run_id));
      where.push(" · ", run);
    }
    const parts = [
      h(
        "div.card-head",
        {},
        h("span.tool-name", { textContent: approval.tool }),
        h("span.approval-agent", { textContent: `@${approval.agent}` }),
        h("span.badge", { textContent: STATUS_TEXT[approval.status] ?? approval.status }),
      ),
      h("p.approval-summary", { textContent: approval.summary }),
      h("code.io.input", {
        textContent: compact(approval.input), title: "Exactly what runs if it is approved",
      }),
      h(
        "p.approval-meta",
        {},
        h("span.approval-requested", { textContent: `Requested ${when(approval.requested_at)}` }),
        approval.status === "pending" ? " · " : "",
        left,
        " · ",
        h("span.approval-mode", { textContent: MODE_TEXT[approval.mode] ?? approval.mode }),
      ),
      h("p.approval-where", {}, ...where),
      approval.status === "pending" ? this.answerForm(node, approval) : null,
      approval.status !== "pending"
        ? h("p.approval-decision", { textContent: decisionText(approval) })
        : null,
      h("p.approval-outcome", {
        textContent: outcomeText(approval),
        dataset: { ok: approval.outcome ? String(Boolean(approval.outcome.ok)) : undefined },
      }),
      h("p.approval-error", { role: "alert" }),
    ];
    node.replaceChildren(...parts.filter(Boolean));
  }

  answerForm(node, approval) {
    const reasonId = `reason-${approval.id}`;
    const reason = h("input.approval-reason", {
      id: reasonId, type: "text", maxLength: 2000, placeholder: "Reason (optional)",
    });
    const approve = h("button.approve", { type: "submit", textContent: "Approve" });
    const reject = h("button.reject", { type: "button", textContent: "Reject" });
    const form = h(
      "form.approval-answer",
      { "aria-label": `Answer ${approval.tool}` },
      h("label.visually-hidden", { htmlFor: reasonId, textContent: "Reason (optional)" }),
      reason,
      approve,
      reject,
    );
    const send = async (verb) => {
      for (const control of form.elements) control.disabled = true;
      const text = reason.value.trim();
      const body = text ? { reason: text } : undefined;
      const path = `/v1/approvals/${encodeURIComponent(approval.id)}/${verb}`;
      const { data, error } = await this.api("POST", path, body);
      if (error) {
        await this.failed(node, approval, error);
        return;
      }
      this.fill(node, data);
      this.refreshCount();
      if (data.status === "approved" && data.mode === "defer" && !data.outcome) {
        this.awaitOutcome(node, data.id);
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      send("approve");
    });
    reject.addEventListener("click", () => send("reject"));
    return form;
  }

  /** An answer was refused: say why in clear words, then show the approval as it is now
   * (a 409's first answer, a 410's expiry) when it can still be read. */
  async failed(node, approval, error) {
    const text = ANSWER_ERROR_TEXT[error.code] ?? ERROR_TEXT[error.code] ?? error.message;
    const { data } = ["already_answered", "expired"].includes(error.code)
      ? await this.api("GET", `/v1/approvals/${encodeURIComponent(approval.id)}`)
      : {};
    if (data) this.fill(node, data);
    else for (const control of node.querySelector("form.approval-answer")?.elements ?? []) {
      control.disabled = false;
    }
    node.dataset.error = error.code;
    node.querySelector(".approval-error").textContent = text;
    this.refreshCount();
  }

  /** An approved deferred call runs in the background: show how it went once it ran. */
  async awaitOutcome(node, approvalId) {
    for (let i = 0; i < OUTCOME_TRIES && node.isConnected; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, OUTCOME_POLL_MS));
      const { data } = await this.api("GET", `/v1/approvals/${encodeURIComponent(approvalId)}`);
      if (!node.isConnected) return;
      if (data?.outcome) {
        this.fill(node, data);
        return;
      }
    }
  }
}
