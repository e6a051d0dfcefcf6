"""The append-only session log and the wake-ups that let readers tail it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from asyncpg import UniqueViolationError  # type: ignore[import-untyped]
from sqlalchemy import CompoundSelect, Select, func, select, union_all, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from events import Done, Event, TurnStatus, Unanswered
from store import _hot_pg as hot_pg
from store._appends import (
    LogNotifier,
    SessionNotFoundError,
    StoredEvent,
    _insert,
    _notify_others,
    _refusal,
    insert_opening,
)
from store._approvals import ApprovalRow
from store._db import Database
from store._models import ANCHOR_TYPES, EventRow, ToolExecutionRow, TurnRow, utcnow


class TurnInProgressError(RuntimeError):
    """A turn runs in the session already: the database holds one running turn per
    session (``uq_turns_one_running``), so a second one is refused, on any worker."""

    def __init__(self, session_id: str, turn_id: str | None) -> None:
        super().__init__(f"Turn {turn_id!r} is still running in session {session_id!r}")
        self.session_id = session_id
        self.turn_id = turn_id


class EventLog:
    """Appends events with gap-free per-session sequence numbers and reads them back."""

    def __init__(self, db: Database, notifier: LogNotifier) -> None:
        self._db = db
        self.notifier = notifier

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        turn_id: str | None = None,
        finish: TurnStatus | None = None,
        epoch: int | None = None,
    ) -> list[StoredEvent]:
        """Append ``events`` in one transaction; with ``finish``, also close the turn.

        The sequence numbers come from the session's counter row, bumped in the same
        transaction as the insert, so concurrent appends never collide or leave gaps. With
        ``epoch`` (a turn's owner writing) the same transaction checks the turn's ownership
        epoch: a stale owner gets ``StaleOwnerError`` and nothing is written.
        """
        assert finish is None or turn_id is not None, "finishing needs the turn id"

        def write(conn: Connection) -> list[StoredEvent]:  # SQLite's writer thread
            stored = _insert(conn, session_id, events, turn_id, epoch)
            if finish is not None:
                conn.execute(
                    update(TurnRow)
                    .where(TurnRow.id == turn_id)
                    .values(
                        status=finish,
                        finished_at=stored[-1].created_at,
                        worker_id=None,
                        lease_until=None,
                    )
                )
            return stored

        async def write_pg(pg: Any) -> list[StoredEvent]:  # PostgreSQL's: one statement
            rows = await hot_pg.append(
                pg, session_id, events, turn_id=turn_id, epoch=epoch, finish=finish, now=utcnow()
            )
            if rows is None:
                why = (
                    await hot_pg.session_exists(pg, session_id),
                    await hot_pg.turn_epoch(pg, turn_id),
                )
                raise _refusal(session_id, turn_id, epoch, *why)
            return [StoredEvent(**row) for row in rows]

        stored = await self._db.run_write(write, pg=write_pg)
        self.notifier.notify(session_id, stored)
        return stored

    async def close_unanswered(
        self, session_id: str, turn_id: str, status: Unanswered
    ) -> list[StoredEvent] | None:
        """End a ``suspended`` turn as ``expired`` or ``superseded``, in one transaction: the
        turn row (a conditional update, so a racing answer or a second worker cannot both
        win), its still-pending tool calls (settled with the same status) and ``done``.
        Returns the logged events, or ``None`` when the turn was not suspended any more."""
        async with self._db.write() as conn:
            won = await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == turn_id, TurnRow.status == "suspended")
                .values(status=status, finished_at=utcnow())
                .returning(TurnRow.id)
            )
            if won.first() is None:
                return None
            await conn.execute(
                update(ToolExecutionRow)
                .where(ToolExecutionRow.turn_id == turn_id, ToolExecutionRow.status == "pending")
                .values(status=status, completed_at=utcnow())
            )
            await conn.execute(
                update(ApprovalRow)
                .where(ApprovalRow.turn_id == turn_id, ApprovalRow.status == "pending")
                .values(status=status, resolved_at=utcnow())
            )
            done = Done(session_id=session_id, status=status)
            stored = await conn.run_sync(_insert, session_id, [done], turn_id)
            await conn.run_sync(self._notify_others, session_id)
        self.notifier.notify(session_id, stored)
        return stored

    async def open_turn(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        turn_id: str,
        trace_id: str,
        worker_id: str | None = None,
        lease_until: datetime | None = None,
        job: dict[str, Any] | None = None,
    ) -> tuple[list[StoredEvent], int]:
        """Record a running turn (held by ``worker_id`` until ``lease_until``) and append its
        opening events, in one transaction; returns them and the turn's epoch (0: new).
        ``TurnInProgressError`` (nothing written) when another turn runs in the session."""
        opening = hot_pg.TurnOpening(
            session_id=session_id, events=events, turn_id=turn_id, trace_id=trace_id,
            worker_id=worker_id, lease_until=lease_until, job=job,
        )  # fmt: skip
        try:
            if self._db.dialect == "postgresql":
                stored = await self._open_pg(opening)
            else:  # SQLite: one job of the writer thread (no async-engine transaction)
                stored = await self._db.run_write(partial(insert_opening, opening=opening))
        except (IntegrityError, UniqueViolationError):
            async with self._db.read() as conn:
                taken = await conn.scalar(select(TurnRow.id).where(TurnRow.id == turn_id))
            if taken is not None:
                raise  # not the one-running-turn index: a reused turn id
            # The running turn may have ended since (then ``turn_id`` is None).
            raise TurnInProgressError(session_id, await self.running_turn(session_id)) from None
        self.notifier.notify(session_id, stored)
        return stored, 0

    async def _open_pg(self, opening: hot_pg.TurnOpening) -> list[StoredEvent]:
        """``open_turn`` on PostgreSQL: one statement on the writer's connection."""
        assert opening.events, "a turn opens with at least one event"

        async def write(pg: Any) -> list[StoredEvent]:
            rows = await hot_pg.open_turn(pg, opening, now=utcnow())
            if rows is None:
                raise SessionNotFoundError(f"No session {opening.session_id!r} to append to")
            return [StoredEvent(**row) for row in rows]

        return await self._db.run_pg(write)

    async def running_turn(self, session_id: str) -> str | None:
        """The id of the session's running turn (at most one: ``uq_turns_one_running``)."""
        query = select(TurnRow.id).where(TurnRow.session_id == session_id)
        async with self._db.read() as conn:
            found = await conn.scalar(query.where(TurnRow.status == "running").limit(1))
        return None if found is None else str(found)

    def _notify_others(self, conn: Connection, session_id: str) -> None:
        if self._db.dialect == "postgresql":
            _notify_others(conn, session_id)

    async def read(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
        turn_id: str | None = None,
    ) -> list[StoredEvent]:
        """Events with ``seq > after`` in order, optionally of one turn only (read from the
        turn's first event on: a turn's read does not grow with its session's age)."""

        def fetch(conn: Connection) -> list[StoredEvent]:
            start = after
            if turn_id is not None:
                first = conn.scalar(select(TurnRow.first_seq).where(TurnRow.id == turn_id))
                start = max(after, (first or 1) - 1)
            query = _columns().where(EventRow.session_id == session_id, EventRow.seq > start)
            if turn_id is not None:
                query = query.where(EventRow.turn_id == turn_id)
            return _events(conn, query if limit is None else query.limit(limit))

        return await self._db.run_read(fetch)

    async def read_context(self, session_id: str) -> list[StoredEvent]:
        """What a turn reads of its session, in seq order: the latest ``history_summarised``
        event (the compaction anchor) and every event after its ``up_to_seq``, plus the
        ``context_loaded`` events before it (knowledge is append-only, so the anchor keeps
        them). Indexed queries, one snapshot: with compaction bounding the tail, a turn's
        read does not grow with the session's age."""

        def fetch(conn: Connection) -> list[StoredEvent]:
            if conn.dialect.name == "postgresql":  # one statement: one round trip
                rows = conn.execute(_context_query(session_id))
                return [StoredEvent(**row._asdict()) for row in rows]
            anchor = conn.execute(
                select(EventRow.data)
                .where(EventRow.session_id == session_id, ANCHOR_TYPES)
                .where(EventRow.type == SUMMARY_EVENT)
                .order_by(EventRow.seq.desc())
                .limit(1)
            ).scalar()
            up_to = int(anchor.get("up_to_seq") or 0) if isinstance(anchor, dict) else 0
            tail = _events(
                conn, _columns().where(EventRow.session_id == session_id, EventRow.seq > up_to)
            )
            if not up_to:
                return tail
            kept = _events(
                conn,
                _columns().where(
                    EventRow.session_id == session_id,
                    ANCHOR_TYPES,
                    EventRow.type == KNOWLEDGE_EVENT,
                    EventRow.seq <= up_to,
                ),
            )
            return [*kept, *tail]

        return await self._db.run_read(fetch)

    async def last_seq(self, session_id: str) -> int:
        async with self._db.read() as conn:
            value = await conn.scalar(
                select(func.coalesce(func.max(EventRow.seq), 0)).where(
                    EventRow.session_id == session_id
                )
            )
        return int(value or 0)


SUMMARY_EVENT = "history_summarised"  # the compaction anchor
KNOWLEDGE_EVENT = "context_loaded"  # read from before the anchor too (append-only)


def _columns() -> Select[tuple[str, int, str, dict[str, Any], str | None, datetime]]:
    return select(
        EventRow.session_id,
        EventRow.seq,
        EventRow.type,
        EventRow.data,
        EventRow.turn_id,
        EventRow.created_at,
    )


def _context_query(session_id: str) -> CompoundSelect[Any]:
    """``read_context`` as one statement (one snapshot): the anchor's ``up_to_seq`` as a
    subquery of both indexed halves, the knowledge before it and the tail after it."""
    up_to = func.coalesce(
        select(EventRow.data["up_to_seq"].as_integer())
        .where(EventRow.session_id == session_id, ANCHOR_TYPES, EventRow.type == SUMMARY_EVENT)
        .order_by(EventRow.seq.desc())
        .limit(1)
        .scalar_subquery(),
        0,
    )
    kept = _columns().where(
        EventRow.session_id == session_id,
        ANCHOR_TYPES,
        EventRow.type == KNOWLEDGE_EVENT,
        EventRow.seq <= up_to,
    )
    tail = _columns().where(EventRow.session_id == session_id, EventRow.seq > up_to)
    return union_all(kept, tail).order_by("seq")


def _events(conn: Connection, query: Select[Any]) -> list[StoredEvent]:
    return [StoredEvent(**row._asdict()) for row in conn.execute(query.order_by(EventRow.seq))]
