// Bosun's web chat: sign in with a bearer token, send turns, follow their SSE streams
// (re-attaching after a drop), answer confirmations and pickers, undo writes, browse
// past sessions and watch the day's spend. No framework, no build step.

import { readFrames } from "./sse.js";
import { ERROR_TEXT, Transcript, h } from "./render.js";
import { AgentsView } from "./agents.js";
import { ApprovalsView } from "./approvals.js";

const TOKEN_KEY = "bosun.token";
const WARN_PERCENT = 80;
const RETRY_DELAYS_MS = [300, 600, 1200, 2500, 5000];
const MAX_RETRIES = 20;
const APPROVALS_POLL_MS = 5000;
const MANAGERS = new Set(["owner", "staff"]);
const LIVE_STATUSES = new Set(["running", "suspended", "queued"]); // replayed from the log, not the detail
/** Events that change the org's pending approvals: the badge is read again at once. */
const APPROVAL_EVENTS = new Set(["confirmation_pending", "tool_resolved", "approval_resolved", "done"]);
const QUEUED_TEXT = "Queued: your message runs when the reply being written ends.";

const $ = (id) => document.getElementById(id);
const ui = {
  login: $("login"),
  tokenInput: $("token-input"),
  identity: $("identity"),
  identityName: $("identity-name"),
  signOut: $("sign-out"),
  sidebar: $("sidebar"),
  sessionsToggle: $("sessions-toggle"),
  newChat: $("new-chat"),
  sessions: $("sessions"),
  transcript: $("transcript"),
  empty: $("empty"),
  connection: $("connection"),
  blocked: $("blocked"),
  composer: $("composer"),
  message: $("message"),
  send: $("send"),
  usage: $("usage"),
  chat: $("chat"),
  agents: $("agents"),
  agentsToggle: $("agents-toggle"),
  approvals: $("approvals"),
  approvalsToggle: $("approvals-toggle"),
  approvalsCount: $("approvals-count"),
};

const state = {
  token: null,
  sessionId: null, // the session on screen; a new chat has none until its first event
  run: null, // the stream being followed: {controller, stopped, done}
  blocked: null, // the budget_exceeded error while the org is over its cap
  view: 0, // bumped on every session switch, so late answers for an old view are dropped
  reconnects: 0,
  loading: false, // a session's log is being read: a message now would land out of order
  approvalsTimer: null, // the pending-approvals count's poll (owner and staff only)
  page: "chat", // the view on screen (chat, agents, approvals): sent as context.page
};

const agentsView = new AgentsView(ui.agents, {
  api: (...args) => api(...args),
  headers: () => authHeaders(),
  manager: () => MANAGERS.has(claimsOf(state.token ?? "")?.role), // costs: owner and staff
  owner: () => claimsOf(state.token ?? "")?.role === "owner", // the org's settings
  user: () => claimsOf(state.token ?? "")?.sub ?? null, // a member edits the agents they parent
});

const approvalsView = new ApprovalsView(ui.approvals, {
  api: (...args) => api(...args),
  onCount: showApprovalCount,
  openSession: (sessionId) => {
    showView("chat");
    openSession(sessionId);
  },
  openRun: async (agent, runId) => {
    agentsView.agent = agent;
    await showView("agents");
    await agentsView.openRun(runId, { reveal: true });
  },
});

/** Show one view: the chat, Agents (its runs and their live statuses) or Approvals (the
 * calls waiting for a person). Their toggles go back to the chat. */
function showView(name) {
  state.page = name;
  ui.chat.hidden = name !== "chat";
  const views = [
    ["agents", agentsView, ui.agentsToggle],
    ["approvals", approvalsView, ui.approvalsToggle],
  ];
  let shown = null;
  for (const [key, view, toggle] of views) {
    toggle.setAttribute("aria-pressed", String(key === name));
    if (key === name) shown = view.show();
    else view.hide();
  }
  return shown;
}

function toggleView(name, toggle) {
  return showView(toggle.getAttribute("aria-pressed") === "true" ? "chat" : name);
}

function showApprovalCount(pending) {
  ui.approvalsCount.textContent = String(pending);
  ui.approvalsCount.dataset.count = String(pending);
}

/** Keep the top bar's pending-approvals count fresh while an owner or staff is signed in. */
function watchApprovals(on) {
  clearInterval(state.approvalsTimer);
  state.approvalsTimer = null;
  ui.approvalsToggle.hidden = !on;
  if (!on) return;
  approvalsView.refreshCount();
  state.approvalsTimer = setInterval(() => approvalsView.refreshCount(), APPROVALS_POLL_MS);
}

const transcript = new Transcript(ui.transcript, {
  confirm: (toolUseId, approved) =>
    answer(`confirm/${encodeURIComponent(toolUseId)}`, { approved }),
  pick: (toolUseId, id) => answer(`pick/${encodeURIComponent(toolUseId)}`, { id }),
  say: (text) => sendMessage(text), // a question's option: the next message answers it
  undo: undo,
});

// --- the API ---------------------------------------------------------------------------

function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${state.token}`, ...extra };
}

/** The error envelope of a failed response (or one made up for a non-JSON failure). */
async function errorOf(response) {
  try {
    const body = await response.json();
    if (body?.error?.code) return body.error;
  } catch {
    // not JSON: a proxy's page, say
  }
  const message = `HTTP ${response.status} ${response.statusText}`.trim();
  return { code: `http_${response.status}`, message };
}

/** A JSON call: `{data}` or `{error}`. A 401 signs the user out. */
async function api(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: authHeaders(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    return { error: { code: "network", message: "The server could not be reached." } };
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401) signOut(error);
    return { error };
  }
  if (response.status === 204) return { data: null }; // a delete: no body
  return { data: await response.json() };
}

function randomKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// --- following a stream ------------------------------------------------------------------

/** The request that re-attaches to the open session after the last event on screen. */
function reattach() {
  return {
    method: "GET",
    url: `/v1/sessions/${encodeURIComponent(state.sessionId)}/stream`,
    headers: { "Last-Event-ID": String(transcript.lastId) },
    reattach: true,
  };
}

/** Follow one SSE request to its end. When the connection drops (a network error, or a
 * turn's stream that ends before its `done`), re-attach to the session after the last
 * event on screen; the transcript drops any event id it has already rendered. A request
 * marked `idempotent` (a new turn, sent with an Idempotency-Key) is sent again as is until
 * its response begins: the server then returns the same turn, never a second one.
 * Resolves to `null`, or to the error when the server refused the request. */
async function follow(request) {
  const run = { controller: null, stopped: false };
  run.done = new Promise((resolve) => (run.finish = resolve));
  state.run = run;
  const view = state.view;
  setBusy(true);
  let refused = null;
  try {
    for (let attempt = 0; ; attempt += 1) {
      const outcome = await streamOnce(run, request);
      if (run.stopped || view !== state.view) break;
      if (outcome.error || outcome.finished) {
        refused = outcome.error ?? null;
        break;
      }
      const resend = request.idempotent && !outcome.started;
      if ((!resend && !state.sessionId) || attempt >= MAX_RETRIES) {
        refused = { code: "network", message: "The connection was lost; try again." };
        break;
      }
      state.reconnects += 1;
      ui.connection.dataset.reconnects = String(state.reconnects);
      setConnection("Reconnecting...");
      await sleep(RETRY_DELAYS_MS[Math.min(attempt, RETRY_DELAYS_MS.length - 1)]);
      if (run.stopped || view !== state.view) break;
      if (!resend) request = reattach();
    }
  } finally {
    setConnection("");
    run.finish();
    if (state.run === run) {
      state.run = null;
      setBusy(false);
    }
  }
  return refused;
}

/** One request: `{error}` when the server refused it; else `started` once its response
 * began and `finished` when its stream ended as it should (a turn's at its `done`, a
 * re-attached one when nothing runs any more). Anything else is a dropped connection. */
async function streamOnce(run, request) {
  run.controller = new AbortController();
  let response;
  try {
    response = await fetch(request.url, {
      method: request.method,
      headers: authHeaders({ Accept: "text/event-stream", ...request.headers }),
      body: request.body,
      signal: run.controller.signal,
    });
  } catch {
    return { started: false };
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401) signOut(error);
    return { error };
  }
  const sessionId = response.headers.get("X-Session-Id");
  if (sessionId) openedSession(sessionId);
  // A message sent while a reply is being written waits for it (an agent that queues).
  let queued = response.headers.get("X-Turn-Status") === "queued";
  setConnection(queued ? QUEUED_TEXT : "");
  let finished = false;
  try {
    for await (const frame of readFrames(response.body)) {
      const event = toEvent(frame);
      if (!event) continue;
      if (queued) setConnection("");
      queued = false;
      transcript.apply(event);
      onLiveEvent(event);
      finished ||= event.type === "done";
    }
  } catch {
    return { started: true }; // the connection broke mid-stream
  }
  return { started: true, finished: finished || Boolean(request.reattach) };
}

function toEvent(frame) {
  try {
    const id = frame.id == null || frame.id === "" ? null : Number(frame.id);
    return { id, type: frame.event, data: JSON.parse(frame.data) };
  } catch {
    console.warn("Skipped an SSE frame that is not JSON", frame);
    return null;
  }
}

function onLiveEvent(event) {
  ui.empty.hidden = true;
  if (APPROVAL_EVENTS.has(event.type) && !ui.approvalsToggle.hidden) approvalsView.refreshCount();
  if (event.type === "session_started") openedSession(event.data.session_id);
  if (event.type === "error" && event.data.code === "budget_exceeded") block(event.data);
}

function stopFollowing() {
  if (!state.run) return;
  state.run.stopped = true;
  state.run.controller?.abort();
  state.run = null;
  setBusy(false);
}

/** Wait for the stream being followed (if any) to end. */
async function idle() {
  while (state.run) await state.run.done;
}

// --- turns and answers -------------------------------------------------------------------

/** A BCP 47-like tag, as Bosun checks `context.locale` (docs/api.md). */
const LOCALE = /^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,4}$/;

/** Where the user is, for the agent (Bosun's client context): the view on screen and
 * the session open in it, and the browser's language to reply in. */
function clientContext() {
  const context = { page: `/${state.page}${state.sessionId ? `/${state.sessionId}` : ""}` };
  const locale = navigator.language ?? "";
  if (LOCALE.test(locale)) context.locale = locale;
  return context;
}

async function sendMessage(text) {
  const body = { message: text, context: clientContext() };
  if (state.sessionId) body.session_id = state.sessionId;
  const error = await follow({
    method: "POST",
    url: "/v1/chat/stream",
    headers: { "Content-Type": "application/json", "Idempotency-Key": randomKey() },
    body: JSON.stringify(body),
    idempotent: true,
  });
  if (error) {
    if (!ui.message.value) ui.message.value = text; // give the user their text back
    if (error.code === "budget_exceeded") block(error);
    noteError(error);
  }
  await afterTurn();
}

/** Confirm or pick: the reply is the turn's stream from the answer on. */
async function answer(route, body) {
  await idle();
  const error = await follow({
    method: "POST",
    url: `/v1/sessions/${encodeURIComponent(state.sessionId)}/${route}`,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!ui.approvalsToggle.hidden) approvalsView.refreshCount(); // answered here: not pending now
  await afterTurn();
  return error;
}

async function undo(toolUseId) {
  const session = encodeURIComponent(state.sessionId);
  const path = `/v1/sessions/${session}/undo/${encodeURIComponent(toolUseId)}`;
  const { data, error } = await api("POST", path);
  return error ? { error } : { result: data };
}

async function afterTurn() {
  await Promise.all([refreshUsage(), refreshSessions()]);
  if (!state.run) ui.message.focus();
}

// --- sessions ----------------------------------------------------------------------------

function openedSession(sessionId) {
  if (state.sessionId === sessionId) return;
  state.sessionId = sessionId;
  markCurrentSession();
  rememberSession();
}

/** Show a past session: one whose turns have all ended from its detail (messages with
 * their tool calls, collapsed); one with a turn running or waiting for the user as it was
 * streamed (its log through the live renderer, so its questions keep their buttons), then
 * follow it if a turn of it is still running. */
async function openSession(sessionId) {
  stopFollowing();
  const view = ++state.view;
  transcript.reset();
  state.sessionId = sessionId;
  markCurrentSession();
  rememberSession();
  collapseSessions();
  ui.empty.hidden = true;
  setLoading(true);
  let running = false;
  try {
    running = await readSession(sessionId, view);
  } finally {
    if (view === state.view) setLoading(false);
  }
  if (view !== state.view) return;
  if (running) await follow(reattach());
  ui.message.focus();
}

/** Draw the session; whether a turn of it is still running. The detail is read first: a
 * turn that ends while the log is read is then still re-attached to, which replays its
 * tail (read after the log, its last events would be lost). */
async function readSession(sessionId, view) {
  const base = `/v1/sessions/${encodeURIComponent(sessionId)}`;
  const { data: detail } = await api("GET", base);
  if (view !== state.view) return false;
  if (detail && !LIVE_STATUSES.has(detail.status)) {
    const artifact = (id, version) => loadArtifact(base, id, version);
    await transcript.showPast(detail, artifact, () => view === state.view);
    return false;
  }
  return readLog(base, view, detail);
}

/** A delivered artifact with its payload (null if it cannot be read). */
async function loadArtifact(base, id, version) {
  const query = version ? `?version=${encodeURIComponent(version)}` : "";
  const { data } = await api("GET", `${base}/artifacts/${encodeURIComponent(id)}${query}`);
  return data ?? null;
}

/** Render the session's whole log through the live renderer. */
async function readLog(base, view, detail) {
  for (;;) {
    const { data, error } = await api("GET", `${base}/events?after=${transcript.lastId}`);
    if (view !== state.view) return false;
    if (error) {
      noteError(error);
      return false;
    }
    for (const { seq, type, data: body, created_at: createdAt } of data.events) {
      transcript.apply({ id: seq, type, data: body }, { createdAt });
    }
    if (!data.events.length || transcript.lastId >= data.last_seq) break;
  }
  return detail?.status === "running";
}

function setLoading(loading) {
  state.loading = loading;
  syncComposer();
}

function newChat() {
  stopFollowing();
  state.view += 1;
  setLoading(false);
  state.sessionId = null;
  transcript.reset();
  ui.empty.hidden = false;
  markCurrentSession();
  rememberSession();
  collapseSessions();
  ui.message.focus();
}

async function refreshSessions() {
  if (!state.token) return;
  const { data } = await api("GET", "/v1/sessions");
  if (!data) return;
  ui.sessions.replaceChildren(
    ...data.sessions.map((session) =>
      h(
        "li",
        {},
        h(
          "button.session",
          { type: "button", dataset: { sessionId: session.id }, title: session.title ?? "" },
          h("span.session-title", { textContent: session.title || "Untitled" }),
          h("span.session-time", { textContent: new Date(session.updated_at).toLocaleString() }),
        ),
      ),
    ),
  );
  ui.sessionsToggle.textContent = `Sessions (${data.sessions.length})`;
  markCurrentSession();
}

function markCurrentSession() {
  for (const button of ui.sessions.querySelectorAll("button.session")) {
    if (button.dataset.sessionId === state.sessionId) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
}

function collapseSessions() {
  ui.sessionsToggle.setAttribute("aria-expanded", "false");
  ui.sidebar.dataset.open = "false";
}

// --- usage and the daily cap -------------------------------------------------------------

function usd(micros) {
  return `$${(micros / 1e6).toFixed(micros > 0 && micros < 10_000 ? 4 : 2)}`;
}

async function refreshUsage() {
  if (!state.token) return;
  const { data } = await api("GET", "/v1/usage");
  if (!data) return;
  const cap = data.cap_usd_micros;
  const spent = data.spent_usd_micros;
  const unmetered = cap < 0;
  const percent = unmetered ? null : cap > 0 ? (100 * spent) / cap : 100;
  const shown = unmetered ? "" : `${percent.toFixed(percent < 10 ? 1 : 0)} %`;
  const text = unmetered
    ? `Today: ${usd(spent)} spent (tier ${data.tier}, unmetered)`
    : `Today: ${usd(spent)} of ${usd(cap)} (${shown}), tier ${data.tier}`;
  ui.usage.replaceChildren(h("span.usage-text", { textContent: text }));
  if (!unmetered) {
    const value = Math.min(percent, 100);
    ui.usage.append(h("meter", { min: 0, max: 100, high: WARN_PERCENT, optimum: 0, value }));
  }
  ui.usage.classList.toggle("warning", percent !== null && percent >= WARN_PERCENT);
  if (state.blocked && (unmetered || spent < cap)) unblock();
}

function block(error) {
  state.blocked = error;
  ui.blocked.replaceChildren(
    h("strong", { textContent: ERROR_TEXT.budget_exceeded }),
    " ",
    h("span", { textContent: error.message ?? "" }),
    " ",
    h("code", { textContent: error.code }),
  );
  ui.blocked.hidden = false;
  syncComposer();
}

function unblock() {
  state.blocked = null;
  ui.blocked.hidden = true;
  syncComposer();
}

// --- composer, connection, sign-in -------------------------------------------------------

function setBusy(busy) {
  document.body.dataset.busy = busy ? "true" : "false";
  syncComposer();
}

function syncComposer() {
  const off = !state.token || Boolean(state.blocked);
  ui.message.disabled = off;
  ui.send.disabled = off || Boolean(state.run) || state.loading;
  ui.composer.dataset.state = off ? "disabled" : state.run ? "busy" : "ready";
}

function setConnection(text) {
  ui.connection.textContent = text;
}

function submit() {
  const text = ui.message.value.trim();
  if (!text || ui.send.disabled) return;
  ui.message.value = "";
  sendMessage(text);
}

/** The token's claims, read for display only: the server checks the signature. */
function claimsOf(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(payload), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

function signIn(token) {
  const claims = claimsOf(token);
  const problem = !claims
    ? "That is not a bearer token (a JWT)."
    : claims.exp && claims.exp * 1000 < Date.now()
      ? "That token has expired: mint a new one."
      : "";
  if (problem) {
    ui.login.hidden = false;
    ui.tokenInput.setCustomValidity(problem);
    ui.tokenInput.reportValidity();
    return false;
  }
  state.token = token;
  localStorage.setItem(TOKEN_KEY, token);
  ui.login.hidden = true;
  ui.identity.hidden = false;
  ui.identityName.textContent = `${claims.sub} · ${claims.org} (${claims.role})`;
  watchApprovals(MANAGERS.has(claims.role)); // the server says 403 to anyone else
  syncComposer();
  refreshSessions();
  refreshUsage();
  ui.message.focus();
  return true;
}

/** Forget the token and everything shown with it; `error` says why (a refused token). */
function signOut(error = null) {
  showView("chat");
  watchApprovals(false);
  newChat();
  state.token = null;
  state.blocked = null;
  localStorage.removeItem(TOKEN_KEY);
  ui.login.hidden = false;
  ui.identity.hidden = true;
  ui.blocked.hidden = true;
  ui.sessions.replaceChildren();
  ui.usage.replaceChildren();
  if (error) transcript.note(error);
  syncComposer();
  ui.tokenInput.focus();
}

/** Show a failure in the transcript; a refused token was shown by `signOut` already. */
function noteError(error) {
  if (error.code !== "unauthorized") transcript.note(error);
}

/** The address bar's fragment as parameters: `token` (a link's) and `session`. */
function linkParams() {
  return new URLSearchParams(location.hash.slice(1));
}

/** Replace the fragment in the address bar and the history (no new entry, no event). */
function setLinkParams(params) {
  const hash = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (hash ? `#${hash}` : ""));
}

/** A `#token=...` link (printed by `bosun serve --dev`): keep the token, drop it from the
 * address bar and the history. */
function tokenFromLink() {
  const params = linkParams();
  const token = params.get("token");
  if (!token) return null;
  params.delete("token");
  setLinkParams(params);
  return token;
}

/** Keep the open session's id in the address bar (`#session=<id>`; the token never goes
 * there), so a reload reopens it and re-attaches to a turn of it still running. */
function rememberSession() {
  const params = linkParams();
  if (state.sessionId) params.set("session", state.sessionId);
  else params.delete("session");
  setLinkParams(params);
}

/** A link pasted into the open tab changes only the fragment, so the page does not load
 * again: sign in with its token (in place of the one in use, and what it showed) and open
 * the session it names. */
function followLink() {
  const token = tokenFromLink();
  const session = linkParams().get("session"); // read first: signing out forgets it
  if (token && token !== state.token) {
    signOut();
    if (!signIn(token)) return;
  }
  if (state.token && session && session !== state.sessionId) openSession(session);
  else rememberSession();
}

function wire() {
  ui.login.addEventListener("submit", (event) => {
    event.preventDefault();
    ui.tokenInput.setCustomValidity("");
    if (signIn(ui.tokenInput.value.trim())) ui.tokenInput.value = "";
  });
  ui.tokenInput.addEventListener("input", () => ui.tokenInput.setCustomValidity(""));
  window.addEventListener("hashchange", followLink);
  ui.signOut.addEventListener("click", () => signOut());
  ui.agentsToggle.addEventListener("click", () => toggleView("agents", ui.agentsToggle));
  ui.approvalsToggle.addEventListener("click", () =>
    toggleView("approvals", ui.approvalsToggle),
  );
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  ui.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  ui.newChat.addEventListener("click", newChat);
  ui.sessions.addEventListener("click", (event) => {
    const button = event.target.closest("button.session");
    if (button) openSession(button.dataset.sessionId);
  });
  ui.sessionsToggle.addEventListener("click", () => {
    const open = ui.sessionsToggle.getAttribute("aria-expanded") !== "true";
    ui.sessionsToggle.setAttribute("aria-expanded", String(open));
    ui.sidebar.dataset.open = String(open);
  });
}

function start() {
  wire();
  const token = tokenFromLink() ?? localStorage.getItem(TOKEN_KEY);
  const session = linkParams().get("session"); // the one open before a reload
  if (!token || !signIn(token)) signOut();
  else if (session) openSession(session);
}

/** A test hook: drop the current stream's connection as the network would. */
window.bosunDebug = {
  dropConnection() {
    state.run?.controller?.abort();
  },
};

start();
