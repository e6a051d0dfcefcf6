"""The hottest writes on PostgreSQL, as fixed SQL on the writer's asyncpg connection.

Through SQLAlchemy an append was four to five statements (the epoch check, the counter,
the events, the ``pg_notify``, the turn's close), each a round trip and ~150 µs of Python.
Here each write is one statement: data-modifying CTEs chain them, the events go in as
arrays (``unnest``), and asyncpg prepares each text once per connection. Each runs in the
PostgreSQL writer's batch (``store._pg_writer``) or, alone, as its own transaction: every
write of a function is in its one statement, and a refused append writes nothing.

Values are stored as the ORM stores them: JSON as ``jsonb`` (the text is ``compact_json``;
the driver's codec, set up by SQLAlchemy, reads it back parsed), times as ``timestamptz``.
``tests/store/test_hot_pg.py`` reads them back through the ORM.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from events import Event, event_data
from store._hot import EXECUTION_COLUMNS, Ended, compact_json, json_text

NOTIFY_CHANNEL = "bosun_events"

_EVENTS = (
    "inserted AS (INSERT INTO events (session_id, seq, turn_id, type, data, created_at) "
    "SELECT $1::varchar, b.last_seq - $2::int + e.n, $4::varchar, e.type, e.data::jsonb, "
    "$3::timestamptz FROM bumped b, unnest($5::text[], $6::text[]) WITH ORDINALITY "
    "AS e(type, data, n))"
)
_BUMP = (
    "bumped AS (UPDATE sessions SET last_seq = last_seq + $2::int, updated_at = $3 "
    "WHERE id = $1{fence} RETURNING last_seq)"
)
_NOTIFY = f"SELECT last_seq, pg_notify('{NOTIFY_CHANNEL}', $1::varchar)::text FROM bumped"  # noqa: S608


def _with(*ctes: str, main: str) -> str:
    return "WITH " + ", ".join(ctes) + " " + main


def _append_sql(*, fenced: bool, finish: bool) -> str:
    """The append statement: the counter, the events and the NOTIFY (one per statement:
    PostgreSQL also folds a transaction's equal notifications into one); ``fenced``, only
    while the turn is at epoch $7 (``FOR SHARE``: a claim's epoch bump waits for this
    commit, or this waits for the claim and sees its epoch); ``finish``, the turn closed
    as $8 too."""
    parts = []
    if fenced:
        parts.append("owner AS (SELECT 1 FROM turns WHERE id = $4 AND epoch = $7 FOR SHARE)")
    parts.append(_BUMP.format(fence=" AND EXISTS (SELECT 1 FROM owner)" if fenced else ""))
    parts.append(_EVENTS)
    if finish:
        status = "$8" if fenced else "$7"
        parts.append(
            f"closed AS (UPDATE turns SET status = {status}::varchar, finished_at = $3, "  # noqa: S608
            "worker_id = NULL, lease_until = NULL WHERE id = $4 "
            "AND EXISTS (SELECT 1 FROM bumped))"
        )
    return _with(*parts, main=_NOTIFY)


_APPENDS = {
    (fenced, finish): _append_sql(fenced=fenced, finish=finish)
    for fenced in (False, True)
    for finish in (False, True)
}


def event_rows(
    session_id: str, events: Sequence[Event], turn_id: str | None, first: int, now: datetime
) -> list[dict[str, Any]]:
    """The stored rows of ``events`` numbered from ``first`` (``text``: the JSON as
    stored, which a live stream frames as is)."""
    rows = []
    for i, event in enumerate(events):
        data = event_data(event)
        rows.append({
            "session_id": session_id, "seq": first + i, "turn_id": turn_id,
            "type": event.type, "data": data, "created_at": now, "text": compact_json(data),
        })  # fmt: skip
    return rows


async def append(
    pg: Any,
    session_id: str,
    events: Sequence[Event],
    *,
    turn_id: str | None,
    epoch: int | None,
    finish: str | None,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """Number ``events`` from the session's counter, insert them and NOTIFY, in one
    statement (with ``finish``, the turn closed too); their rows, or ``None`` when nothing
    was written (no such session, or the turn moved past ``epoch``)."""
    rows = event_rows(session_id, events, turn_id, 0, now)
    args: list[Any] = [
        session_id, len(events), now, turn_id,
        [r["type"] for r in rows], [r["text"] for r in rows],
    ]  # fmt: skip
    if epoch is not None:
        args.append(epoch)
    if finish is not None:
        args.append(finish)
    return _numbered(
        rows, await pg.fetchrow(_APPENDS[epoch is not None, finish is not None], *args)
    )


def _numbered(rows: list[dict[str, Any]], found: Any) -> list[dict[str, Any]] | None:
    """``rows`` numbered up to the session's new ``last_seq`` (``found``'s first column);
    ``None`` when the statement wrote nothing (it returned no row)."""
    if found is None:
        return None
    first = int(found[0]) - len(rows) + 1
    for i, row in enumerate(rows):
        row["seq"] = first + i
    return rows


_OPENED = (
    "opened AS (INSERT INTO turns (id, session_id, trace_id, status, started_at, worker_id, "
    "lease_until, job, first_seq, epoch) SELECT $4, $1, $7::varchar, 'running', $3, "
    "$8::varchar, $9::timestamptz, $10::jsonb, b.last_seq - $2::int + 1, 0 FROM bumped b)"
)


_OPEN = _with(_BUMP.format(fence=""), _EVENTS, _OPENED, main=_NOTIFY)


_CLAIMED = (
    "claimed AS (UPDATE runs SET turn_id = $4, claimed_at = $3 WHERE id = $11::varchar "
    "AND turn_id IS NULL AND cancelled_at IS NULL RETURNING id)"
)
_OPEN_CLAIMED = _with(
    _CLAIMED, _BUMP.format(fence=" AND EXISTS (SELECT 1 FROM claimed)"), _EVENTS, _OPENED,
    main=_NOTIFY,
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOpening:
    """A turn as it opens: its row's columns and its opening events (a run's turn is
    opened by the claim: ``Runs.open_claimed``)."""

    session_id: str
    turn_id: str
    trace_id: str
    events: Sequence[Event]
    worker_id: str | None
    lease_until: datetime | None
    job: dict[str, Any] | None


async def open_turn(
    pg: Any, opening: TurnOpening, *, now: datetime, run_id: str | None = None
) -> list[dict[str, Any]] | None:
    """Record a running turn and append its opening events, in one statement; their rows,
    or ``None`` when there is no such session. With ``run_id``, that queued run is claimed
    for the turn in the same statement, and ``None`` (nothing written) means it was
    claimed or cancelled first. A second running turn in the session breaks
    ``uq_turns_one_running`` (``asyncpg.UniqueViolationError``)."""
    rows = event_rows(opening.session_id, opening.events, opening.turn_id, 0, now)
    args = [
        opening.session_id, len(rows), now, opening.turn_id,
        [r["type"] for r in rows], [r["text"] for r in rows],
        opening.trace_id, opening.worker_id, opening.lease_until, json_text(opening.job),
    ]  # fmt: skip
    if run_id is None:
        return _numbered(rows, await pg.fetchrow(_OPEN, *args))
    return _numbered(rows, await pg.fetchrow(_OPEN_CLAIMED, *args, run_id))


async def session_exists(pg: Any, session_id: str) -> bool:
    return await pg.fetchval("SELECT 1 FROM sessions WHERE id = $1", session_id) is not None


async def turn_epoch(pg: Any, turn_id: str | None) -> int | None:
    found = await pg.fetchval("SELECT epoch FROM turns WHERE id = $1", turn_id)
    return None if found is None else int(found)


_INSERT_EXECUTION = (
    "INSERT INTO tool_executions (tool_use_id, session_id, turn_id, tool, status, "
    "idempotency_key, input, output, error, created_at, completed_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb, $10, $11) "
    "ON CONFLICT DO NOTHING RETURNING tool_use_id"
)
_SELECT_EXECUTION = (
    f"SELECT {', '.join(EXECUTION_COLUMNS)} FROM tool_executions "  # noqa: S608
    "WHERE idempotency_key = $1 OR (turn_id = $2 AND tool_use_id = $3) LIMIT 1"
)
_FINISH_EXECUTION = (
    "UPDATE tool_executions SET status = $1, output = $2::jsonb, error = $3::jsonb, "  # noqa: S608
    "inverse = $4::jsonb, completed_at = $5 WHERE turn_id = $6 AND tool_use_id = $7 "
    f"AND status IN ('pending', 'approved') RETURNING {', '.join(EXECUTION_COLUMNS)}"
)


async def start_execution(
    pg: Any,
    *,
    tool_use_id: str,
    session_id: str,
    turn_id: str,
    tool: str,
    input: dict[str, Any],
    key: str,
    now: datetime,
    ended: Ended | None = None,
) -> dict[str, Any] | None:
    """Record a pending execution (or, with ``ended``, a finished one) unless the call is
    recorded already: ``None`` when this inserted it, else the row recorded before."""
    status, output, error = ended or ("pending", None, None)
    inserted = await pg.fetchval(
        _INSERT_EXECUTION, tool_use_id, session_id, turn_id, tool, status, key,
        json.dumps(input), json_text(output), json_text(error), now,
        None if ended is None else now,
    )  # fmt: skip
    if inserted is not None:
        return None
    row = await pg.fetchrow(_SELECT_EXECUTION, key, turn_id, tool_use_id)
    assert row is not None, "an insert that did nothing must have met an existing row"
    return dict(zip(EXECUTION_COLUMNS, row, strict=True))


async def finish_execution(
    pg: Any,
    *,
    tool_use_id: str,
    turn_id: str,
    status: str,
    output: Any,
    error: Any,
    inverse: Any,
    now: datetime,
) -> dict[str, Any] | None:
    """Settle a runnable (``pending``/``approved``) execution; its row, or ``None`` when it
    was not runnable (settled elsewhere)."""
    row = await pg.fetchrow(
        _FINISH_EXECUTION, status, json_text(output), json_text(error), json_text(inverse),
        now, turn_id, tool_use_id,
    )  # fmt: skip
    return None if row is None else dict(zip(EXECUTION_COLUMNS, row, strict=True))


_COUNTS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd_micros",
)  # fmt: skip
_USAGE_ROW = (
    "per_call AS (INSERT INTO usage (session_id, turn_id, org_id, user_id, role, model, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd_micros, "
    "created_at) VALUES ($11, $12, $1, $2, $13, $14, $4, $5, $6, $7, $8, $9))"
)
_DAILY_USAGE = (
    "daily AS (INSERT INTO daily_usage AS d (org_id, user_id, day, calls, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd_micros) "
    "VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8) ON CONFLICT (org_id, user_id, day) DO UPDATE "
    "SET calls = d.calls + 1, " + ", ".join(f"{c} = d.{c} + excluded.{c}" for c in _COUNTS) + ")"
)
_DAILY_SPEND = (
    "INSERT INTO daily_spend AS s (org_id, day, spent_usd_micros, reserved_usd_micros, "
    "alerted_pct, updated_at) VALUES ($1, $3, $8, 0, 0, $9) ON CONFLICT (org_id, day) "
    "DO UPDATE SET spent_usd_micros = s.spent_usd_micros + $8, "
    "reserved_usd_micros = s.reserved_usd_micros - $10::bigint, updated_at = $9 "
    "RETURNING spent_usd_micros, reserved_usd_micros"
)
_FREE = "SELECT NULL::bigint, NULL::bigint WHERE $9::timestamptz IS NULL AND $10::bigint < 0"


def _settle_sql(*, per_call: bool, free: bool) -> str:
    ctes = [_USAGE_ROW] if per_call else []
    return _with(*ctes, _DAILY_USAGE, main=_FREE if free else _DAILY_SPEND)


_SETTLES = {
    (per_call, free): _settle_sql(per_call=per_call, free=free)
    for per_call in (False, True)
    for free in (False, True)
}


async def settle_usage(
    pg: Any,
    usage: dict[str, Any],
    *,
    day: date,
    reserved: int,
    per_call: bool,
    now: datetime,
) -> tuple[int, int] | None:
    """``spend.settle`` in one statement: the call's usage row (``per_call``), the user's
    day and the org's day; the org's spent and reserved after, or ``None`` for a free
    call (its day is unchanged)."""
    free = usage["cost_usd_micros"] == 0 and reserved == 0
    args: list[Any] = [usage["org_id"], usage["user_id"], day, *(usage[c] for c in _COUNTS)]
    args += [now, reserved]
    if per_call:
        args += [usage["session_id"], usage["turn_id"], usage["role"], usage["model"]]
    row = await pg.fetchrow(_SETTLES[per_call, free], *args)
    return None if row is None else (int(row[0]), int(row[1]))


_CREATE_SESSION = _with(
    "org AS (INSERT INTO orgs (id, tier, created_at) VALUES ($2, 'lite', $6) "
    "ON CONFLICT (id) DO NOTHING)",
    main="INSERT INTO sessions (id, org_id, user_id, title, agent, last_seq, created_at, "
    "updated_at) VALUES ($1, $2, $3, $4, $5, 0, $6, $6) ON CONFLICT (id) DO NOTHING "
    "RETURNING id",
)


async def create_session(
    pg: Any,
    *,
    session_id: str,
    org_id: str,
    user_id: str,
    title: str | None,
    agent: str | None,
    now: datetime,
) -> tuple[str, str, str | None] | None:
    """Create the session (and its org on first sight) in one statement: ``None`` when
    this made it, else the owner (org, user, agent) of the session already there."""
    made = await pg.fetchval(_CREATE_SESSION, session_id, org_id, user_id, title, agent, now)
    if made is not None:
        return None
    held = await pg.fetchrow(
        "SELECT org_id, user_id, agent FROM sessions WHERE id = $1", session_id
    )
    return held["org_id"], held["user_id"], held["agent"]


_PUBLISH = _with(
    # An org's notice ids commit in order (the lock), so no reader's cursor skips one.
    "locked AS (SELECT pg_advisory_xact_lock(hashtext($1::text)))",
    "notice AS (INSERT INTO notices (org_id, type, data, created_at, agent) "
    "SELECT $2::varchar, $3::varchar, $4::jsonb, $5::timestamptz, $7::varchar FROM locked "
    "RETURNING id)",
    # store._webhook_rows.enqueue_deliveries in SQL: every enabled webhook of the org that
    # wants the type (an empty list wants all), due now or when its open circuit closes;
    # a member's webhook (user_id) only if the notice's agent is one they parent.
    "queued AS (INSERT INTO webhook_deliveries (id, webhook_id, org_id, notice_id, "
    "notice_type, status, attempts, next_attempt_at, created_at, updated_at) "
    "SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), h.id, $2, n.id, $3, "
    "'pending', 0, GREATEST($5, h.circuit_open_until), $5, $5 FROM notice n, webhooks h "
    "WHERE h.org_id = $2 AND h.enabled "
    "AND (jsonb_array_length(h.event_types) = 0 OR h.event_types ? $3) "
    "AND (h.user_id IS NULL OR h.user_id = (SELECT a.parent FROM agents a "
    "WHERE a.org_id = $2 AND a.handle = $7 AND a.deleted_at IS NULL)) RETURNING 1)",
    "counted AS (SELECT count(*) AS n FROM queued)",
    main=f"SELECT n.id, c.n, pg_notify('{NOTIFY_CHANNEL}', $1)::text, "  # noqa: S608
    f"CASE WHEN c.n > 0 THEN pg_notify('{NOTIFY_CHANNEL}', $6)::text END "
    "FROM notice n, counted c",
)


async def publish_notice(
    pg: Any,
    *,
    key: str,
    org_id: str,
    type: str,
    data: dict[str, Any],
    deliveries_key: str,
    now: datetime,
    agent: str | None = None,
) -> tuple[int, int]:
    """``notices.publish`` in one statement: the notice, its webhook deliveries and the
    NOTIFYs of the org's readers (``key``) and, when some were queued, of the delivery
    workers (``deliveries_key``); the notice's id and how many deliveries were queued.
    ``agent``: the agent the notice is about (its parent's webhooks get it too)."""
    row = await pg.fetchrow(
        _PUBLISH, key, org_id, type, json.dumps(data), now, deliveries_key, agent
    )
    return int(row[0]), int(row[1])
