// Artifact cards: what a tool made (an `artifact` event: title, summary, version) and what
// the agent delivered with a message (`agent_message`: the text, and the artifact with its
// payload). A workout gets its own renderer; a list payload a table; anything else JSON.
// Every server string goes in through textContent (via `h`), never as HTML.

const MAX_JSON_CHARS = 4_000;
const MAX_ROWS = 50;

/** The per-type fields of a workout exercise, as "3 × 10, 10, 8 · rest 60 s". */
function exerciseFacts(ex) {
  const list = (values, unit = "") => (values ?? []).map((v) => `${v}${unit}`).join(", ");
  switch (ex.exercise_type) {
    case "reps": {
      const load = ex.load_each ? ` @ ${list(ex.load_each)} ${ex.load_unit ?? ""}`.trimEnd() : "";
      return `${ex.sets} × ${list(ex.reps)}${load} · rest ${ex.rest_sec} s`;
    }
    case "hold":
      return `${ex.sets} × ${list(ex.hold_sec, " s")} hold · rest ${ex.rest_sec} s`;
    case "duration": {
      const distance = ex.distance ? ` · ${ex.distance} ${ex.distance_unit ?? ""}`.trimEnd() : "";
      const pace = ex.target_pace ? ` · ${ex.target_pace}` : "";
      return `${ex.duration_min} min${distance}${pace}`;
    }
    case "intervals":
      return `${ex.rounds} rounds · ${ex.work_sec} s on / ${ex.rest_sec} s off`;
    default:
      return "";
  }
}

function groupText(group) {
  if (!group) return null;
  const name = group.name ? ` ${group.name}` : "";
  const rounds = group.rounds ? ` · ${group.rounds} rounds` : "";
  return `${group.type.replace("_", " ")}${name} (${group.id}, #${group.position})${rounds}`;
}

function workoutBody(h, payload) {
  const list = h("ol.exercises");
  for (const ex of payload.exercises ?? []) {
    const muscles = (ex.muscles_utilized ?? []).map((m) => m.muscle).join(", ");
    list.append(
      h(
        "li.exercise",
        { dataset: { exerciseId: ex.id, exerciseType: ex.exercise_type } },
        h("span.exercise-name", { textContent: ex.exercise_name }),
        h("span.badge", { textContent: ex.exercise_type }),
        h("span.exercise-facts", { textContent: exerciseFacts(ex) }),
        groupText(ex.group) ? h("span.exercise-group", { textContent: groupText(ex.group) }) : null,
        muscles ? h("span.exercise-muscles", { textContent: muscles }) : null,
      ),
    );
  }
  const status = payload.status === "logged" ? h("p.note", { textContent: "Logged" }) : null;
  return [list, payload.notes ? h("p.artifact-notes", { textContent: payload.notes }) : null, status];
}

/** The first list of objects in a payload (or the payload itself, if a list). */
function rowsOf(payload) {
  if (Array.isArray(payload)) return payload;
  for (const value of Object.values(payload ?? {})) {
    if (Array.isArray(value) && value.every((v) => v && typeof v === "object")) return value;
  }
  return null;
}

function tableBody(h, rows) {
  const columns = [...new Set(rows.slice(0, MAX_ROWS).flatMap((row) => Object.keys(row)))];
  const cell = (value) =>
    value !== null && typeof value === "object" ? JSON.stringify(value) : String(value ?? "");
  return h(
    "table.artifact-table",
    {},
    h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { textContent: c })))),
    h(
      "tbody",
      {},
      ...rows
        .slice(0, MAX_ROWS)
        .map((row) => h("tr", {}, ...columns.map((c) => h("td", { textContent: cell(row[c]) })))),
    ),
  );
}

function jsonBody(h, payload) {
  const text = JSON.stringify(payload, null, 2) ?? "";
  const shown = text.length > MAX_JSON_CHARS ? `${text.slice(0, MAX_JSON_CHARS)}\n…` : text;
  return h("pre.json", { textContent: shown });
}

function payloadBody(h, type, payload) {
  if (type === "workout" && Array.isArray(payload?.exercises)) return workoutBody(h, payload);
  const rows = rowsOf(payload);
  return [rows?.length ? tableBody(h, rows) : jsonBody(h, payload)];
}

/** A card for an artifact: its title, type and version, its summary, and its payload
 * when there is one (`artifact`: `{id, version, type, title, summary, payload?}`). */
export function artifactCard(h, artifact, eventId) {
  const version = artifact.version > 1 ? ` · v${artifact.version}` : "";
  return h(
    "div.card.artifact",
    { dataset: { artifactId: artifact.id, artifactType: artifact.type, version: artifact.version, eventId } },
    h(
      "div.card-head",
      {},
      h("span.artifact-title", { textContent: artifact.title }),
      h("span.badge", { textContent: `${artifact.type}${version}` }),
    ),
    h("p.artifact-summary", { textContent: artifact.summary }),
    ...(artifact.payload !== undefined ? payloadBody(h, artifact.type, artifact.payload) : []),
  );
}

/** The agent's message (`agent_message`): its text, the delivered artifact, a warning. */
export function agentMessageCard(h, data, eventId) {
  return h(
    "div.agent-message",
    { dataset: { eventId, toolUseId: data.tool_use_id } },
    // A forced-tools agent's message is streamed as the answer too (`in_answer`): once.
    data.in_answer ? null : h("p.bubble.agent", { textContent: data.text }),
    data.artifact
      ? artifactCard(h, data.artifact, eventId)
      : null,
    data.warning ? h("p.note.warning", { textContent: data.warning }) : null,
  );
}

/** A short note for an `artifact` event: the artifact was made or revised. */
export function artifactSavedNote(h, data, eventId) {
  const what = data.version > 1 ? `revised (v${data.version})` : "created";
  return h("p.note.artifact-saved", {
    textContent: `${data.artifact_type} “${data.title}” ${what}: ${data.summary}`,
    dataset: { artifactId: data.artifact_id, version: data.version, eventId },
  });
}
