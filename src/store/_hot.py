"""The hottest statements on SQLite, as fixed SQL on the writer thread's own connection.

A durable tool step writes three times (its execution's start and finish, its events);
through SQLAlchemy Core each statement costs ~100 µs of Python, through ``sqlite3`` ~10.
These functions run inside the writer's transaction (``store._writer``) on its DBAPI
cursor and store values exactly as the ORM does (``tests/store/test_hot_sql.py`` checks
that the text matches SQLAlchemy's own processors), so every other query reads them back
unchanged. PostgreSQL has its own fixed SQL, one statement per write (``store._hot_pg``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from json.encoder import encode_basestring as _string
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from events import Event, TextDelta, event_data


def stamp(value: datetime) -> str:
    """A timestamp as the ORM stores it on SQLite: UTC, no offset, microseconds."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def compact_json(value: Any) -> str:
    """JSON without spaces, UTF-8 kept: what SSE frames carry, so one encoding serves the
    row and the frame (any valid JSON text reads back the same). A dict of strings (a
    ``text_delta``'s: most of a turn's events) is written directly, the same text
    ``json.dumps`` would give at a fifth of the cost."""
    if type(value) is dict and all(type(v) is str for v in value.values()):
        fields = ",".join(f"{_string(k)}:{_string(v)}" for k, v in value.items())
        return "{" + fields + "}"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_text(value: Any) -> str | None:
    """A JSON column's text as the ORM stores it (``json.dumps``); ``None`` stays NULL."""
    return None if value is None else json.dumps(value)


def runs_on(conn: Connection) -> bool:
    """Whether ``conn`` is the writer thread's own ``sqlite3`` connection (the async
    engine's aiosqlite connections take the SQLAlchemy statements)."""
    return conn.dialect.driver == "pysqlite"


def cursor_of(conn: Connection) -> Any:
    """The DBAPI cursor of ``conn``, inside its current transaction."""
    return conn.connection.driver_connection.cursor()  # type: ignore[union-attr]


def bump_sequence(
    cursor: Any, session_id: str, count: int, owner: tuple[str, int] | None, now: datetime
) -> int | None:
    """Advance the session's counter by ``count``; its new last seq, or ``None`` when there
    is no such session (or, with ``owner``, the turn moved past that epoch)."""
    sql = "UPDATE sessions SET last_seq = last_seq + ?, updated_at = ? WHERE id = ?"
    params: list[Any] = [count, stamp(now), session_id]
    if owner is not None:
        sql += " AND (SELECT epoch FROM turns WHERE id = ?) = ?"
        params.extend(owner)
    row = cursor.execute(sql + " RETURNING last_seq", params).fetchone()
    return None if row is None else int(row[0])


def event_row(event: Event) -> tuple[dict[str, Any], str]:
    """The event's ``data`` and its compact JSON text. An answer's ``text_delta`` (most of
    a turn's events) is built directly: the dict ``event_data`` gives and the text
    ``compact_json`` gives, at a fraction of their generic cost."""
    if type(event) is TextDelta and event.step_id is None:
        delta = event.delta
        return {"delta": delta, "type": "text_delta"}, f'{{"delta":{_string(delta)}{_DELTA_END}'
    data = event_data(event)
    return data, compact_json(data)


_DELTA_END = ',"type":"text_delta"}'


def insert_events(
    cursor: Any,
    session_id: str,
    events: Sequence[Event],
    turn_id: str | None,
    first: int,
    now: datetime,
) -> list[tuple[Any, ...]]:
    """Insert ``events`` numbered from ``first``; returns their rows in ``StoredEvent``'s
    field order (session id, seq, type, data as a dict, turn id, time, the JSON text)."""
    rows: list[tuple[Any, ...]] = []
    params: list[Any] = []
    created = stamp(now)
    seq = first
    for event in events:
        data, text = event_row(event)  # the text is stored as is, and framed as is
        kind = event.type
        rows.append((session_id, seq, kind, data, turn_id, now, text))
        params += (session_id, seq, turn_id, kind, text, created)
        seq += 1
    for start in range(0, len(rows), ROWS_PER_INSERT):
        count = min(ROWS_PER_INSERT, len(rows) - start)
        cursor.execute(
            _INSERT_EVENTS + ", ".join(["(?, ?, ?, ?, ?, ?)"] * count),
            params[start * 6 : (start + count) * 6],
        )
    return rows


_INSERT_EVENTS = "INSERT INTO events (session_id, seq, turn_id, type, data, created_at) VALUES "
ROWS_PER_INSERT = 500
"""Rows one INSERT statement takes (3,000 parameters: SQLite allows 32,766). Not
``executemany``: it steps once per row, and each step lets go of the GIL, which a busy
event loop then holds until the interpreter's switch interval makes it hand it back, so
a batch of a thousand deltas waited for the GIL a thousand times."""


class Ended(NamedTuple):
    """How a call that already ran ended (``insert_pending`` then records it finished)."""

    status: str
    output: Any
    error: Any


def insert_pending(
    cursor: Any,
    *,
    tool_use_id: str,
    session_id: str,
    turn_id: str,
    tool: str,
    input: dict[str, Any],
    key: str,
    now: datetime,
    ended: Ended | None = None,
) -> bool:
    """Record a pending execution (or, with ``ended``, a finished one) unless the call is
    recorded already; whether it was."""
    status, output, error = ended or ("pending", None, None)
    completed = None if ended is None else stamp(now)
    row = cursor.execute(
        "INSERT INTO tool_executions (tool_use_id, session_id, turn_id, tool, status, "
        "idempotency_key, input, output, error, created_at, completed_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING tool_use_id",
        (
            tool_use_id, session_id, turn_id, tool, status, key, json.dumps(input),
            json_text(output), json_text(error), stamp(now), completed,
        ),
    ).fetchone()  # fmt: skip
    return row is not None


EXECUTION_COLUMNS = (
    "tool_use_id", "session_id", "turn_id", "tool", "status", "idempotency_key", "input",
    "output", "error", "inverse", "created_at", "completed_at",
)  # fmt: skip
_JSON_COLUMNS = frozenset({"input", "output", "error", "inverse"})
_TIME_COLUMNS = frozenset({"created_at", "completed_at"})
_FINISH = (
    "UPDATE tool_executions SET status = ?, output = ?, error = ?, inverse = ?, "
    "completed_at = ? WHERE turn_id = ? AND tool_use_id = ? "
    "AND status IN ('pending', 'approved') RETURNING tool_use_id, session_id, turn_id, "
    "tool, status, idempotency_key, input, output, error, inverse, created_at, completed_at"
)  # the RETURNING list is EXECUTION_COLUMNS (a test holds them equal)


def finish_execution(
    cursor: Any,
    *,
    tool_use_id: str,
    turn_id: str,
    status: str,
    output: Any,
    error: Any,
    inverse: Any,
    now: datetime,
) -> dict[str, Any] | None:
    """Settle a runnable (``pending``/``approved``) execution; its row as the ORM would
    read it, or ``None`` when it was not runnable (settled elsewhere)."""
    row = cursor.execute(
        _FINISH,
        (
            status,
            json_text(output),
            json_text(error),
            json_text(inverse),
            stamp(now),
            turn_id,
            tool_use_id,
        ),
    ).fetchone()
    return (
        None
        if row is None
        else dict(zip(EXECUTION_COLUMNS, map(_read, EXECUTION_COLUMNS, row), strict=True))
    )


def _read(column: str, value: Any) -> Any:
    """A stored value as the ORM reads it back (JSON parsed, timestamps in UTC)."""
    if value is None:
        return None
    if column in _JSON_COLUMNS:
        return json.loads(value)
    if column in _TIME_COLUMNS:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value


_USAGE_COUNTS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd_micros",
)  # fmt: skip
_INSERT_USAGE = (
    "INSERT INTO usage (session_id, turn_id, org_id, user_id, role, model, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens, cost_usd_micros, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_ADD_DAILY_USAGE = (
    "INSERT INTO daily_usage (org_id, user_id, day, calls, input_tokens, output_tokens, "
    "cache_read_tokens, cache_write_tokens, cost_usd_micros) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?) "
    "ON CONFLICT (org_id, user_id, day) DO UPDATE SET calls = calls + excluded.calls, "
    "input_tokens = input_tokens + excluded.input_tokens, "
    "output_tokens = output_tokens + excluded.output_tokens, "
    "cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, "
    "cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens, "
    "cost_usd_micros = cost_usd_micros + excluded.cost_usd_micros"
)
_ADD_DAILY_SPEND = (
    "INSERT INTO daily_spend (org_id, day, spent_usd_micros, reserved_usd_micros, "
    "alerted_pct, updated_at) VALUES (?, ?, ?, 0, 0, ?) ON CONFLICT (org_id, day) DO UPDATE "
    "SET spent_usd_micros = spent_usd_micros + ?, "
    "reserved_usd_micros = reserved_usd_micros - ?, updated_at = ? "
    "RETURNING spent_usd_micros, reserved_usd_micros"
)


def settle_usage(
    cursor: Any,
    usage: dict[str, Any],
    *,
    day: date,
    reserved: int,
    per_call: bool,
    now: datetime,
) -> tuple[int, int] | None:
    """``spend.settle`` on the writer's connection: the call's usage row (``per_call``),
    the user's day and the org's day; the org's spent and reserved after, or ``None`` for
    a free call (its day is unchanged)."""
    counts = [usage[name] for name in _USAGE_COUNTS]
    if per_call:
        who = [usage[name] for name in ("session_id", "turn_id", "org_id", "user_id")]
        cursor.execute(_INSERT_USAGE, (*who, usage["role"], usage["model"], *counts, stamp(now)))
    cursor.execute(_ADD_DAILY_USAGE, (usage["org_id"], usage["user_id"], day.isoformat(), *counts))
    cost = usage["cost_usd_micros"]
    if cost == 0 and reserved == 0:
        return None
    at = stamp(now)
    row = cursor.execute(
        _ADD_DAILY_SPEND, (usage["org_id"], day.isoformat(), cost, at, cost, reserved, at)
    ).fetchone()
    return int(row[0]), int(row[1])
