// The Agents view: the org's agents, each agent's background runs with live statuses,
// a run's detail (steps, tool calls, resources it created, answer) and a live tail of
// its events while it runs. It talks to the same API as everyone else.

import { readFrames } from "./sse.js";
import { h } from "./render.js";
import { AgentEditor } from "./editor.js";

const POLL_MS = 1000;
const COST_DAYS = 14;
const PAUSE_TEXT = { cost_limit: "it reached its cost limit for the period" };
const LIVE = new Set(["queued", "running"]);
const TOOLSET_TEXT = {
  connected: "connected",
  down: "down, its tools withheld",
  disabled: "disabled",
  not_connected: "not connected yet",
};
const TRIGGER_TEXT = {
  api: "started by a person",
  schedule: "on its schedule",
  webhook: "by its webhook",
  mention: "mentioned",
  reply: "a reply to its work",
  subscription: "a subscribed event",
};
const STATUS_TEXT = {
  queued: "Queued",
  running: "Running",
  suspended: "Waiting for approval",
  completed: "Completed",
  failed: "Failed",
  cancelled: "Cancelled",
  expired: "Expired",
};

/** A list of `items` (each shown by `text`), or "none". */
function listOf(spec, items, text) {
  if (!items?.length) return h("p.run-none", { textContent: "none" });
  return h(spec, {}, ...items.map((item) => h("li", { textContent: text(item) })));
}

function when(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : "";
}

function dollars(usd) {
  return `$${usd.toFixed(4)}`;
}

/** "1 step", "2 steps": a count with its noun, singular for one. */
export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

/** A run's step as the chat says it: one done over failed tool calls is not a plain ok. */
function stepStatus(step) {
  if (!step.ok) return "failed";
  const failed = step.failed_tool_calls ?? 0;
  return failed ? `done, ${plural(failed, "tool call")} failed` : "ok";
}

const DAY = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });

/** "Nov 27" for a UTC day "2026-11-27". */
function dayName(day) {
  return DAY.format(new Date(`${day}T00:00:00Z`));
}

/** Daily cost bars (oldest first), each as tall as its share of the dearest day, with the
 * scale's top and the days under them; "No spend yet" when there is none to draw. */
function costBars(days) {
  const total = days.reduce((sum, d) => sum + d.cost_usd_micros, 0);
  if (!total) {
    return h("p.cost-empty", { textContent: `No spend yet in the last ${days.length} days.` });
  }
  const top = Math.max(...days.map((d) => d.cost_usd_micros));
  const bars = h(
    "ol.cost-bars",
    { "aria-label": `Cost per day (UTC), last ${days.length} days` },
    ...days.map((d, i) => {
      const cost = dollars(d.cost_usd_micros / 1e6);
      const bar = h("span.cost-bar", { dataset: { day: d.day, micros: String(d.cost_usd_micros) } });
      bar.style.height = `${Math.round((100 * d.cost_usd_micros) / top)}%`; // CSSOM: CSP-safe
      // Every other day is named (the first and the last always): 14 fit on a phone.
      const named = i === 0 || i === days.length - 1 || (days.length - 1 - i) % 2 === 0;
      return h(
        "li",
        { title: `${dayName(d.day)}: ${cost}`, "aria-label": `${dayName(d.day)}: ${cost}` },
        h("span.cost-well", {}, bar),
        h("span.cost-day", { textContent: named ? d.day.slice(8).replace(/^0/, "") : "" }),
      );
    }),
  );
  return h(
    "figure.cost-chart",
    {},
    h("figcaption", {
      textContent: `Cost per day (UTC), ${dayName(days[0].day)} – ${dayName(days.at(-1).day)}: ${dollars(total / 1e6)} in all`,
    }),
    h(
      "div.cost-plot",
      {},
      h("div.cost-axis", { "aria-hidden": "true" },
        h("span", { textContent: dollars(top / 1e6) }), h("span", { textContent: "$0" })),
      bars,
    ),
  );
}

export class AgentsView {
  /** `api(method, path, body)` gives `{data}` or `{error}`; `headers()` the auth header;
   * `manager()` whether the signed-in user is an owner or staff (who read costs and edit
   * every agent); `owner()` whether an owner (who changes the org's settings); `user()`
   * their user id (a member edits the agents they parent). */
  constructor(root, { api, headers, manager = () => true, owner = () => false, user = () => null }) {
    this.root = root;
    this.api = api;
    this.headers = headers;
    this.manager = manager;
    this.owner = owner;
    this.user = user;
    this.parents = new Map(); // handle -> its parent (a user id), from the list
    this.agent = null; // the handle whose runs are shown
    this.runId = null; // the run whose detail is shown
    this.timer = null;
    this.tail = null; // the AbortController of the live tail
    this.editor = null; // the open agent's editor (owner and staff)
  }

  async show() {
    this.root.hidden = false;
    await this.renderAgents();
  }

  hide() {
    this.root.hidden = true;
    this.stop();
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    this.tail?.abort();
    this.tail = null;
  }

  async renderAgents() {
    const { data, error } = await this.api("GET", "/v1/agents");
    const list = h("ul.agent-list", { role: "list" });
    this.parents = new Map((data ?? []).map((agent) => [agent.handle, agent.parent ?? null]));
    for (const agent of data ?? []) {
      const paused = agent.paused || agent.paused_at;
      const button = h(
        "button.agent",
        { type: "button", dataset: { handle: agent.handle } },
        h("strong", { textContent: agent.name }),
        h("span.agent-meta", {
          textContent: ` @${agent.handle} · v${agent.version}${paused ? " · paused" : ""}`,
        }),
      );
      if (agent.handle === this.agent) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => this.openAgent(agent.handle));
      list.append(h("li", {}, button));
    }
    const panel = h("div.agent-detail", { id: "agent-detail" });
    const { data: settings } = await this.api("GET", "/v1/org/settings");
    const creates = this.manager() || Boolean(settings?.members_create_agents);
    this.root.replaceChildren(
      h("h2", { textContent: "Agents" }),
      error ? h("p.error-detail", { textContent: error.message }) : list,
      creates ? this.createForm() : null,
      this.owner() && settings ? this.orgSettings(settings) : null,
      panel,
    );
    if (this.agent) await this.openAgent(this.agent);
  }

  /** A new agent by handle and name (owners and staff; members where the org lets them,
   * the server making them its parent): created, it opens, ready to edit. */
  createForm() {
    const handle = h("input", {
      name: "handle", type: "text", required: true, placeholder: "handle",
      "aria-label": "Handle", autocomplete: "off",
    });
    const name = h("input", { name: "name", type: "text", required: true, placeholder: "name", "aria-label": "Name" });
    const note = h("p.create-note", { role: "status" });
    const form = h("form.agent-create", { "aria-label": "New agent" },
      h("strong.create-label", { textContent: "New agent" }), handle, name,
      h("button", { type: "submit", textContent: "Create agent" }), note);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      note.textContent = "Creating…";
      const { data, error } = await this.api("POST", "/v1/agents", {
        handle: handle.value.trim(), name: name.value.trim(),
      });
      if (error) {
        note.textContent = `${error.code}: ${error.message}`;
        return;
      }
      this.agent = data.handle;
      await this.renderAgents();
    });
    return form;
  }

  /** The org's settings an owner changes here: whether members create agents. */
  orgSettings(settings) {
    const box = h("input", { type: "checkbox", name: "members_create_agents", checked: settings.members_create_agents });
    const note = h("span.settings-note", { role: "status" });
    box.addEventListener("change", async () => {
      const { error } = await this.api("PUT", "/v1/org/settings", { members_create_agents: box.checked });
      if (error) box.checked = !box.checked;
      note.textContent = error ? `${error.code}: ${error.message}` : "Saved.";
    });
    return h("fieldset.org-settings", {}, h("legend", { textContent: "Organisation" }),
      h("label", {}, box, " Members may create their own agents"), note);
  }

  /** Mark the agent on screen in the list (and only it). */
  markSelected() {
    for (const button of this.root.querySelectorAll("button.agent")) {
      if (button.dataset.handle === this.agent) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    }
  }

  async openAgent(handle) {
    this.stop();
    this.agent = handle;
    this.runId = null;
    this.markSelected();
    const panel = this.root.querySelector("#agent-detail");
    const task = h("input", {
      id: "run-task", type: "text", placeholder: "What should it do?", "aria-label": "Task",
    });
    const form = h(
      "form.run-form",
      {},
      task,
      h("button", { type: "submit", textContent: "Run in background" }),
    );
    const note = h("p.run-note", { role: "status" });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!task.value.trim()) return;
      note.textContent = "Queuing…"; // each submit's answer replaces it, never a stale one
      const { error } = await this.api("POST", `/v1/agents/${handle}/runs`, {
        task: task.value.trim(),
      });
      note.textContent = error ? `${error.code}: ${error.message}` : "Queued.";
      if (!error) task.value = "";
      await this.refreshRuns();
    });
    const editorRoot = h("section.agent-edit", { id: "agent-edit", "aria-label": "Edit agent" });
    this.editor = new AgentEditor(editorRoot, {
      api: this.api,
      onSaved: (agent) => this.saved(agent),
      manager: this.manager,
    });
    const mine = this.user() !== null && this.parents.get(handle) === this.user();
    const edit = this.manager() || mine
      ? h("button.edit-agent", { type: "button", textContent: "Edit agent" })
      : null;
    edit?.addEventListener("click", async () => {
      await this.editor.open(handle);
      editorRoot.scrollIntoView({ block: "start" });
    });
    const head = h(
      "tr",
      {},
      ...["Task", "Trigger", "Status", "Work and cost", "Started"].map((text) => h("th", { scope: "col", textContent: text })),
    );
    panel.replaceChildren(
      h("div.agent-head", {}, h("h3", { textContent: `@${handle}` }), edit),
      editorRoot,
      h("section.agent-costs", { id: "agent-costs", "aria-label": "Costs" }),
      h("section.agent-toolsets", { id: "agent-toolsets", "aria-label": "MCP toolsets" }),
      h("section.agent-subs", { id: "agent-subs", "aria-label": "Subscriptions" }),
      h("h4.runs-title", { textContent: "Runs" }),
      form,
      note,
      h("table.runs", {}, h("thead", {}, head), h("tbody", { id: "runs" })),
      h("section.run-detail", { id: "run-detail", "aria-label": "Run" }),
    );
    await this.renderCosts(handle);
    await this.renderToolsets(handle);
    await this.renderSubscriptions(handle);
    await this.refreshRuns();
  }

  /** A version saved in the editor: the list says it (the editor shows what changed). */
  saved(agent) {
    const meta = this.root.querySelector(`button.agent[data-handle="${agent.handle}"] .agent-meta`);
    const paused = agent.paused || agent.paused_at;
    if (meta) meta.textContent = ` @${agent.handle} · v${agent.version}${paused ? " · paused" : ""}`;
    const name = this.root.querySelector(`button.agent[data-handle="${agent.handle}"] strong`);
    if (name) name.textContent = agent.name;
  }

  /** The MCP toolsets the agent's profile names and whether each is connected: a down
   * server's tools are withheld from its turns until it is back, so say why. */
  async renderToolsets(handle) {
    const section = this.root.querySelector("#agent-toolsets");
    if (!section) return;
    const { data: agent } = await this.api("GET", `/v1/agents/${handle}`);
    const toolsets = agent?.toolsets ?? [];
    if (!toolsets.length) {
      section.replaceChildren();
      return;
    }
    section.replaceChildren(
      h("h5", { textContent: "Tools from MCP servers" }),
      h(
        "ul.toolsets",
        {},
        ...toolsets.map((t) =>
          h(
            "li.toolset",
            { dataset: { toolset: t.name, state: t.state } },
            h("strong", { textContent: t.name }),
            h("span", {
              textContent: ` · ${TOOLSET_TEXT[t.state] ?? t.state}${t.error ? `: ${t.error}` : ""}`,
            }),
          )),
      ),
    );
  }

  /** What the agent watches in the host app: each subscription (resource, events) with a
   * Remove button, and a form to add one, for those who may edit the agent (the server
   * says 403 to anyone else, and the note shows it). */
  async renderSubscriptions(handle) {
    const section = this.root.querySelector("#agent-subs");
    if (!section) return;
    const { data, error } = await this.api("GET", `/v1/agents/${handle}/subscriptions`);
    if (error) {
      section.replaceChildren();
      return;
    }
    const note = h("p.sub-note", { role: "status" });
    const items = (data ?? []).map((sub) => {
      const remove = h("button.sub-remove", { type: "button", textContent: "Remove" });
      remove.addEventListener("click", async () => {
        const { error: failed } = await this.api("DELETE", `/v1/agents/${handle}/subscriptions/${sub.id}`);
        if (failed) note.textContent = `${failed.code}: ${failed.message}`;
        else await this.renderSubscriptions(handle);
      });
      const what = sub.resource_id ? `${sub.resource_type} ${sub.resource_id}` : `every ${sub.resource_type}`;
      const events = sub.event_types.length ? sub.event_types.join(", ") : "any event";
      return h("li.sub", { dataset: { subId: sub.id } },
        h("span", { textContent: `${what} · ${events} ` }), remove);
    });
    const type = h("input", { id: "sub-type", type: "text", placeholder: "note", "aria-label": "Resource type" });
    const id = h("input", { id: "sub-id", type: "text", placeholder: "any", "aria-label": "Resource id (optional)" });
    const events = h("input", {
      id: "sub-events", type: "text", placeholder: "commented, updated", "aria-label": "Event types (optional)",
    });
    const form = h("form.sub-form", {}, type, id, events,
      h("button", { type: "submit", textContent: "Subscribe" }));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = {
        resource_type: type.value.trim(),
        event_types: events.value.split(",").map((e) => e.trim()).filter(Boolean),
      };
      if (id.value.trim()) body.resource_id = id.value.trim();
      const { error: failed } = await this.api("POST", `/v1/agents/${handle}/subscriptions`, body);
      if (failed) note.textContent = `${failed.code}: ${failed.message}`;
      else await this.renderSubscriptions(handle);
    });
    section.replaceChildren(
      h("h5", { textContent: "Subscriptions: what starts it in your app" }),
      items.length ? h("ul.subs", {}, ...items) : h("p.subs-none", { textContent: "No subscriptions: only mentions, replies to its work and its other triggers start it." }),
      form,
      note,
    );
  }

  /** The agent's costs (owner and staff only: members see nothing here): the pause with
   * a Resume button, the period's spend, daily bars and the alerts fired. */
  async renderCosts(handle) {
    const section = this.root.querySelector("#agent-costs");
    if (!section) return;
    if (!this.manager()) {
      section.replaceChildren(); // the server says 403 to a member: do not ask
      return;
    }
    const { data: usage } = await this.api("GET", `/v1/agents/${handle}/usage?days=${COST_DAYS}`);
    if (!usage) {
      section.replaceChildren();
      return;
    }
    const limit = usage.limit_usd === null ? "no limit" : `limit ${dollars(usage.limit_usd)}`;
    section.replaceChildren(
      ...(usage.paused ? [this.pausedBanner(handle, usage)] : []),
      h("p.cost-period", {
        textContent: `This ${usage.period}: ${dollars(usage.period_spent_usd)} (${limit}) · today ${dollars(usage.today.cost_usd_micros / 1e6)}`,
      }),
      costBars(usage.days),
      h("h5", { textContent: "Cost alerts this period" }),
      listOf("ul.cost-alerts", usage.alerts, (a) =>
        `${dollars(a.threshold_usd)} crossed at ${dollars(a.spent_usd)} · ${when(a.fired_at)}`),
    );
  }

  pausedBanner(handle, usage) {
    const why = PAUSE_TEXT[usage.paused_reason] ?? usage.paused_reason ?? "its profile says paused";
    const resume = h("button.resume", { type: "button", textContent: "Resume" });
    resume.addEventListener("click", async () => {
      resume.disabled = true;
      const { error } = await this.api("POST", `/v1/agents/${handle}/resume`);
      const note = this.root.querySelector(".run-note");
      if (note) note.textContent = error ? `${error.code}: ${error.message}` : "Resumed.";
      await this.renderAgents();
    });
    return h(
      "div.agent-paused",
      { role: "status", dataset: { reason: usage.paused_reason ?? "profile" } },
      h("strong", { textContent: "Paused" }),
      h("span", { textContent: `: ${why}${usage.paused_at ? ` (since ${when(usage.paused_at)})` : ""}. ` }),
      resume,
    );
  }

  /** The agent's runs, refreshed every second while any of them is queued or running. */
  async refreshRuns() {
    clearTimeout(this.timer);
    const body = this.root.querySelector("#runs");
    if (!body || !this.agent) return;
    const { data } = await this.api("GET", `/v1/agents/${this.agent}/runs?limit=20`);
    const runs = data?.runs ?? [];
    body.replaceChildren(
      ...runs.map((run) => {
        const row = h(
          "tr.run",
          { dataset: { runId: run.run_id, status: run.status } },
          h("td.run-task", { textContent: run.task }),
          h("td.run-trigger", { textContent: TRIGGER_TEXT[run.trigger] ?? run.trigger }),
          h("td.run-status", { textContent: STATUS_TEXT[run.status] ?? run.status }),
          h("td.run-figures", {
            textContent: `${plural(run.steps, "step")} · ${plural(run.tool_calls, "tool call")} · $${(run.cost_usd_micros / 1e6).toFixed(4)}`,
          }),
          h("td.run-time", { textContent: when(run.created_at) }),
        );
        if (run.run_id === this.runId) row.setAttribute("aria-current", "true");
        row.addEventListener("click", () => this.openRun(run.run_id, { reveal: true }));
        return row;
      }),
    );
    if (this.runId) await this.renderRun(this.runId);
    if (runs.some((run) => LIVE.has(run.status))) {
      this.timer = setTimeout(() => this.refreshRuns(), POLL_MS);
    }
  }

  /** Show a run's detail; `reveal`: scroll it into view (a click on a phone would
   * otherwise open it below the fold). */
  async openRun(runId, { reveal = false } = {}) {
    this.tail?.abort();
    this.runId = runId;
    for (const row of this.root.querySelectorAll("tr.run")) {
      if (row.dataset.runId === runId) row.setAttribute("aria-current", "true");
      else row.removeAttribute("aria-current");
    }
    await this.renderRun(runId);
    if (reveal) this.root.querySelector("#run-detail")?.scrollIntoView({ block: "nearest" });
    const { data } = await this.api("GET", `/v1/runs/${runId}`);
    if (data && LIVE.has(data.status)) this.follow(runId);
  }

  async renderRun(runId) {
    const { data: run } = await this.api("GET", `/v1/runs/${runId}`);
    const panel = this.root.querySelector("#run-detail");
    if (!run || !panel) return;
    const live = panel.querySelector(".run-live")?.textContent ?? "";
    panel.replaceChildren(
      h("h4", { textContent: `Run ${run.run_id.slice(4, 12)} · ${STATUS_TEXT[run.status] ?? run.status}` }),
      h("p.run-trigger-detail", {
        textContent: `Trigger: ${TRIGGER_TEXT[run.trigger] ?? run.trigger}${run.trigger_event_id ? ` (event ${run.trigger_event_id}${run.hops ? `, hop ${run.hops}` : ""})` : ""}`,
      }),
      h("p.run-answer", { textContent: run.answer ?? "" }),
      h("h5", { textContent: "Steps" }),
      listOf("ul.run-steps", run.steps, (s) =>
        `${s.step_id}: ${stepStatus(s)} · ${plural(s.tool_calls, "tool call")}`),
      h("h5", { textContent: "Tool calls" }),
      listOf("ul.run-calls", run.tool_calls, (c) => `${c.tool} · ${c.status}`),
      h("h5", { textContent: "Resources" }),
      listOf("ul.run-resources", run.resources, (r) => `${r.action} ${r.target}`),
      h("pre.run-live", { textContent: live }),
    );
  }

  /** Tail the run's events while it runs; its text appears as it is written. */
  async follow(runId) {
    const controller = new AbortController();
    this.tail = controller;
    try {
      const response = await fetch(`/v1/runs/${runId}/stream`, {
        headers: this.headers(), signal: controller.signal,
      });
      let said = []; // [seq, step_id, text]: a message_reset drops a taken-over tail of it
      for await (const frame of readFrames(response.body)) {
        const out = this.root.querySelector("#run-detail .run-live");
        if (!out || this.runId !== runId) break;
        if (frame.event === "text_delta") {
          const data = JSON.parse(frame.data);
          said.push([Number(frame.id), data.step_id ?? null, data.delta]);
        } else if (frame.event === "message_reset") {
          const data = JSON.parse(frame.data);
          const step = data.step_id ?? null;
          said = said.filter(([seq, of]) => of !== step || seq < data.from_seq);
        }
        out.textContent = said.map(([, , text]) => text).join("");
        if (frame.event === "done") break;
      }
    } catch {
      // aborted, or the connection dropped: the status poll still shows the outcome
    }
    if (this.runId === runId) await this.refreshRuns();
  }
}
