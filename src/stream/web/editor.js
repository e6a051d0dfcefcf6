// The agent editor (owners and staff; a member for the agents they parent): an agent's
// identity, models, tools (checkboxes by router, the server's blocked ones disabled),
// approvals, limits, schedule and cost alerts. Saving PUTs the whole profile, which the
// server keeps as the next version; the editor then shows what changed from the version
// before. It talks to the same API as everyone else (GET /v1/catalogue,
// /v1/agents/{handle}, .../versions/{n}).

import { h } from "./render.js";

const ROLES = ["planner", "executor", "merger", "summariser"];
/** AgentOut's fields that are not the profile: never sent back in a PUT. */
const NOT_PROFILE = ["handle", "version", "created_at", "updated_at", "paused_at", "paused_reason", "toolsets"];
const MAX_SHOWN = 80;

/** `profile` without the fields the server adds to it. */
export function profileOf(agent) {
  const profile = { ...agent };
  for (const key of NOT_PROFILE) delete profile[key];
  return profile;
}

function flatten(value, path = "", out = {}) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, item] of Object.entries(value)) flatten(item, path ? `${path}.${key}` : key, out);
  } else {
    out[path] = value;
  }
  return out;
}

function shown(value) {
  if (value === null || value === undefined) return "unset";
  const text = JSON.stringify(value);
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}…` : text;
}

/** What changed from `before` to `after` (two profiles): one line per field, a list's
 * additions and removals, any other value's old and new. */
export function changes(before, after) {
  const old = flatten(profileOf(before));
  const now = flatten(profileOf(after));
  const lines = [];
  for (const path of [...new Set([...Object.keys(old), ...Object.keys(now)])].sort()) {
    const [a, b] = [old[path], now[path]];
    if (JSON.stringify(a) === JSON.stringify(b)) continue;
    if (Array.isArray(a) && Array.isArray(b)) {
      const added = b.filter((x) => !a.some((y) => JSON.stringify(y) === JSON.stringify(x)));
      const removed = a.filter((x) => !b.some((y) => JSON.stringify(y) === JSON.stringify(x)));
      const parts = [...added.map((x) => `+ ${shown(x)}`), ...removed.map((x) => `− ${shown(x)}`)];
      lines.push({ path, text: parts.length ? parts.join(", ") : `${shown(a)} → ${shown(b)}` });
    } else {
      lines.push({ path, text: `${shown(a)} → ${shown(b)}` });
    }
  }
  return lines;
}

function field(label, control, hint) {
  return h("label.edit-field", {}, h("span.edit-label", { textContent: label }), control,
    hint ? h("span.edit-hint", { textContent: hint }) : null);
}

function numberInput(name, value, { step = "any", min } = {}) {
  return h("input", { type: "number", name, step, min, value: value ?? "" });
}

function numberOrNull(input) {
  const text = input.value.trim();
  return text === "" ? null : Number(text);
}

function listOfText(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean);
}

export class AgentEditor {
  /** `api(method, path, body)` gives `{data}` or `{error}`; `onSaved(agent)` is told of
   * each version saved; `manager()` whether the editor is an owner or staff (a member
   * edits an agent they parent, and stays its parent). */
  constructor(root, { api, onSaved = () => {}, manager = () => true }) {
    this.root = root;
    this.api = api;
    this.onSaved = onSaved;
    this.manager = manager;
    this.agent = null; // the version being edited (AgentOut)
    this.catalogue = null;
  }

  async open(handle) {
    const [agent, catalogue] = await Promise.all([
      this.api("GET", `/v1/agents/${encodeURIComponent(handle)}`),
      this.api("GET", "/v1/catalogue"),
    ]);
    const error = agent.error ?? catalogue.error;
    if (error) {
      this.root.replaceChildren(h("p.edit-error", { role: "alert", textContent: `${error.code}: ${error.message}` }));
      return;
    }
    this.catalogue = catalogue.data;
    this.render(agent.data);
    await this.showChanges(agent.data);
  }

  close() {
    this.root.replaceChildren();
    this.agent = null;
  }

  render(agent) {
    this.agent = agent;
    const form = h("form.agent-editor", { "aria-label": `Edit @${agent.handle}` });
    form.append(
      h("h4.edit-title", { textContent: `Edit @${agent.handle} · v${agent.version}` }),
      h("section.edit-changes", { "aria-label": "Changes" }),
      this.identitySection(agent),
      this.modelsSection(agent),
      this.toolsSection(agent),
      this.approvalsSection(agent),
      this.limitsSection(agent),
      this.scheduleSection(agent),
      this.costSection(agent),
      h("div.edit-actions", {},
        h("button.save", { type: "submit", textContent: `Save as v${agent.version + 1}` }),
        h("button.cancel", { type: "button", textContent: "Close" })),
      h("p.edit-error", { role: "alert" }),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save(form);
    });
    form.querySelector("button.cancel").addEventListener("click", () => this.close());
    this.root.replaceChildren(form);
  }

  identitySection(agent) {
    return h("fieldset.edit-group", {}, h("legend", { textContent: "Identity" }),
      field("Name", h("input", { name: "name", type: "text", value: agent.name, required: true })),
      field("Identity prompt", h("textarea", { name: "identity_prompt", rows: 4, value: agent.identity_prompt }),
        "The first system block of every role's prompt."),
      field("Parent", h("input", { name: "parent", type: "text", value: agent.parent ?? "", placeholder: "none: the org's agent", readOnly: !this.manager() }),
        "The user of the org who owns it: they edit it, answer its approvals and get its notices."));
  }

  modelsSection(agent) {
    const offered = this.catalogue.models;
    const group = h("fieldset.edit-group.edit-models", {}, h("legend", { textContent: "Models" }));
    for (const role of ROLES) {
      const current = agent.models?.[role] ?? null;
      const specs = [...new Set([...offered, ...(current ? [current] : [])])];
      const select = h("select", { name: `model-${role}` },
        h("option", { value: "", textContent: "The server's default" }),
        ...specs.map((spec) => h("option", { value: spec, textContent: spec, selected: spec === current })));
      group.append(field(role, select));
    }
    return group;
  }

  /** The tools by router: a router's `router.*` box grants all of it (its tools then show
   * checked), a blocked tool (or router) is disabled, and what the profile names that the
   * catalogue lacks (an MCP tool by name) stays listed so a save keeps it. */
  toolsSection(agent) {
    const granted = new Set(agent.tools ?? []);
    const every = agent.tools === null || agent.tools === undefined;
    const routers = new Map();
    for (const tool of this.catalogue.tools) {
      if (!routers.has(tool.router)) routers.set(tool.router, []);
      routers.get(tool.router).push(tool);
    }
    for (const set of this.catalogue.toolsets) if (!routers.has(set.name)) routers.set(set.name, []);
    const known = new Set([...routers.keys()].map((r) => `${r}.*`));
    for (const tool of this.catalogue.tools) known.add(tool.name);
    const others = [...granted].filter((name) => !known.has(name));
    const mode = h("div.edit-tools-mode", {},
      h("label", {}, h("input", { type: "radio", name: "tools-mode", value: "all", checked: every }),
        " Every tool the server allows"),
      h("label", {}, h("input", { type: "radio", name: "tools-mode", value: "some", checked: !every }),
        " Only the tools ticked below"));
    const groups = [...routers.entries()].sort(([a], [b]) => a.localeCompare(b))
      .map(([router, tools]) => this.routerGroup(router, tools, granted));
    if (others.length) {
      groups.push(h("fieldset.edit-router", { dataset: { router: "" } }, h("legend", { textContent: "Other grants" }),
        ...others.map((name) => this.toolBox(name, name, granted.has(name), { title: "Not in the catalogue" }))));
    }
    const section = h("fieldset.edit-group.edit-tools", {}, h("legend", { textContent: "Tools" }), mode,
      h("div.edit-routers", {}, ...groups));
    const sync = () => this.syncTools(section);
    section.addEventListener("change", sync);
    sync();
    return section;
  }

  routerGroup(router, tools, granted) {
    const blocked = tools.length > 0 && tools.every((t) => t.blocked);
    const whole = this.toolBox(`${router}.*`, `all of ${router}.*`, granted.has(`${router}.*`), {
      blocked, router: true,
    });
    return h("fieldset.edit-router", { dataset: { router } }, h("legend", { textContent: router }), whole,
      ...tools.map((tool) => this.toolBox(tool.name, tool.name, granted.has(tool.name), {
        blocked: tool.blocked, title: tool.summary, always: tool.always_allowed, of: router,
      })));
  }

  toolBox(value, text, checked, { blocked = false, title = "", always = false, router = false, of = "" } = {}) {
    const box = h("input", { type: "checkbox", name: "tool", value, checked: checked && !blocked, disabled: blocked });
    if (router) box.dataset.whole = "true";
    if (of) box.dataset.of = of;
    return h("label.edit-tool", { title, dataset: { tool: value, blocked: blocked ? "true" : "false" } }, box,
      h("span", { textContent: ` ${text}` }),
      blocked ? h("span.edit-tag.blocked", { textContent: "blocked" }) : null,
      always ? h("span.edit-tag", { textContent: "always allowed" }) : null);
  }

  /** "Every tool" greys the boxes; a ticked `router.*` shows its tools as covered. */
  syncTools(section) {
    const every = section.querySelector("input[name=tools-mode][value=all]").checked;
    section.querySelector(".edit-routers").dataset.off = String(every);
    for (const box of section.querySelectorAll("input[name=tool]")) {
      if (box.closest("[data-blocked=true]")) continue;
      const whole = box.dataset.of
        ? section.querySelector(`input[data-whole][value="${box.dataset.of}.*"]`)
        : null;
      const covered = Boolean(whole?.checked);
      box.disabled = every || covered;
      box.closest(".edit-tool").dataset.covered = String(covered);
    }
  }

  approvalsSection(agent) {
    return h("fieldset.edit-group", {}, h("legend", { textContent: "Approvals" }),
      field("Tools that wait for a person", h("input", { name: "approvals", type: "text", value: (agent.approvals ?? []).join(", ") }),
        "Names or router.*, comma-separated."),
      field("An approval expires after (hours)", numberInput("approval_ttl_h", agent.approval_ttl_s / 3600, { min: 0 })));
  }

  limitsSection(agent) {
    const limits = agent.limits ?? {};
    return h("fieldset.edit-group.edit-limits", {}, h("legend", { textContent: "Limits" }),
      field("Max steps", numberInput("max_steps", limits.max_steps, { step: 1, min: 1 })),
      field("Max tool calls", numberInput("max_tool_calls", limits.max_tool_calls, { step: 1, min: 0 }), "Blank: no limit."),
      field("Wall time (s)", numberInput("wall_time_s", limits.wall_time_s), "Blank: the server's."),
      field("Budget per turn (USD)", numberInput("budget_usd", limits.budget_usd), "Blank: the server's."),
      field("Runs per minute", numberInput("runs_per_minute", agent.runs_per_minute, { step: 1, min: 1 })));
  }

  scheduleSection(agent) {
    const schedule = agent.schedule ?? {};
    return h("fieldset.edit-group", {}, h("legend", { textContent: "Schedule" }),
      field("Cron (UTC)", h("input", { name: "cron", type: "text", value: schedule.cron ?? "", placeholder: "0 9 * * 1-5" }),
        "Blank: no schedule."),
      field("Scheduled task", h("input", { name: "schedule_task", type: "text", value: schedule.task ?? "" })));
  }

  costSection(agent) {
    const cost = agent.cost ?? {};
    const period = h("select", { name: "period" },
      ...["month", "day"].map((p) => h("option", { value: p, textContent: p, selected: cost.period === p })));
    return h("fieldset.edit-group", {}, h("legend", { textContent: "Cost alerts" }),
      field("Alert at (USD)", h("input", { name: "thresholds", type: "text", value: (cost.alert_thresholds_usd ?? []).join(", ") }),
        "Comma-separated; each fires once per period."),
      field("Pause at (USD)", numberInput("limit_usd", cost.limit_usd, { min: 0 }), "Blank: never."),
      field("Period", period));
  }

  /** The profile the form says: the loaded one with the edited fields over it, so what
   * the editor does not show (access, approval modes, ...) is kept. */
  profileFrom(form) {
    const value = (name) => form.elements[name].value;
    const profile = structuredClone(profileOf(this.agent));
    profile.name = value("name");
    profile.identity_prompt = value("identity_prompt");
    profile.parent = value("parent").trim() || null;
    profile.models = Object.fromEntries(ROLES.map((r) => [r, value(`model-${r}`) || null]));
    const every = form.querySelector("input[name=tools-mode][value=all]").checked;
    const ticked = [...form.querySelectorAll("input[name=tool]:checked")]
      .filter((box) => !box.dataset.of || !form.querySelector(`input[data-whole][value="${box.dataset.of}.*"]`)?.checked)
      .map((box) => box.value);
    profile.tools = every ? null : ticked;
    profile.approvals = listOfText(value("approvals"));
    const ttl = numberOrNull(form.elements.approval_ttl_h);
    if (ttl !== null) profile.approval_ttl_s = Math.round(ttl * 3600);
    profile.limits = {
      ...profile.limits,
      max_steps: numberOrNull(form.elements.max_steps) ?? profile.limits.max_steps,
      max_tool_calls: numberOrNull(form.elements.max_tool_calls),
      wall_time_s: numberOrNull(form.elements.wall_time_s),
      budget_usd: numberOrNull(form.elements.budget_usd),
    };
    profile.runs_per_minute = numberOrNull(form.elements.runs_per_minute) ?? profile.runs_per_minute;
    const cron = value("cron").trim();
    profile.schedule = cron ? { ...(profile.schedule ?? {}), cron, task: value("schedule_task") } : null;
    profile.cost = {
      alert_thresholds_usd: listOfText(value("thresholds")).map(Number),
      limit_usd: numberOrNull(form.elements.limit_usd),
      period: value("period"),
    };
    return profile;
  }

  async save(form) {
    const note = form.querySelector(".edit-error");
    note.textContent = "";
    const button = form.querySelector("button.save");
    button.disabled = true;
    const before = this.agent;
    const { data, error } = await this.api("PUT", `/v1/agents/${encodeURIComponent(before.handle)}`, this.profileFrom(form));
    button.disabled = false;
    if (error) {
      note.textContent = `${error.code}: ${error.message}`;
      note.dataset.code = error.code;
      return;
    }
    this.render(data);
    this.showChangeList(before, data);
    this.root.querySelector("form.agent-editor")?.scrollIntoView({ block: "start" });
    this.onSaved(data);
  }

  /** On opening a saved version: what it changed from the one before (if any). */
  async showChanges(agent) {
    if (agent.version < 2) return;
    const { data: before } = await this.api(
      "GET", `/v1/agents/${encodeURIComponent(agent.handle)}/versions/${agent.version - 1}`);
    if (before && this.agent === agent) this.showChangeList(before, agent);
  }

  showChangeList(before, after) {
    const section = this.root.querySelector(".edit-changes");
    if (!section) return;
    const lines = changes(before, after);
    section.replaceChildren(
      h("h5", { textContent: `Changes in v${after.version} (from v${before.version})` }),
      lines.length
        ? h("ul.change-list", {}, ...lines.map(({ path, text }) =>
          h("li", { dataset: { field: path } }, h("code", { textContent: path }), h("span", { textContent: `: ${text}` }))))
        : h("p.run-none", { textContent: "No changes." }),
    );
  }
}
