"""The append-only session log and the wake-ups that let readers tail it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from events import Done, Event, TurnStatus, Unanswered, event_data, parse_event
from store._db import Database
from store._models import EventRow, SessionRow, ToolExecutionRow, TurnRow, utcnow

NOTIFY_CHANNEL = "bosun_events"


class SessionNotFoundError(LookupError):
    """Raised when appending to a session that does not exist."""


class StaleOwnerError(RuntimeError):
    """An append under an ownership epoch the session has moved past: another worker took
    the turn over, so this writer's events are refused (nothing of the batch is written)."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as committed to the log, with its sequence number."""

    session_id: str
    seq: int
    type: str
    data: dict[str, Any]
    turn_id: str | None
    created_at: datetime

    @property
    def event(self) -> Event:
        return parse_event(self.data)


class LogNotifier:
    """In-process wake-ups for log readers, keyed by session.

    A reader registers before it reads, so an append that commits between its read and
    its wait still wakes it. On PostgreSQL other workers' appends arrive by ``NOTIFY``
    (``store._notify``), with ``poll_s`` re-reads as the fallback.
    """

    def __init__(self, *, poll_s: float | None = None) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.poll_s = poll_s  # readers also re-read this often (other workers' appends)

    @contextmanager
    def listen(self, session_id: str) -> Iterator[asyncio.Event]:
        wake = asyncio.Event()
        self._waiters.setdefault(session_id, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[session_id]

    def notify(self, session_id: str) -> None:
        for wake in self._waiters.get(session_id, ()):
            wake.set()


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
        ``epoch`` (a turn's owner writing) the same update checks the session's ownership
        epoch: a stale owner gets ``StaleOwnerError`` and nothing is written.
        """
        assert finish is None or turn_id is not None, "finishing needs the turn id"
        async with self._db.write() as conn:
            stored, _ = await self._insert(conn, session_id, events, turn_id, epoch)
            await self._notify_others(conn, session_id)
            if finish is not None:
                await conn.execute(
                    update(TurnRow)
                    .where(TurnRow.id == turn_id)
                    .values(
                        status=finish,
                        finished_at=stored[-1].created_at,
                        worker_id=None,
                        lease_until=None,
                    )
                )
        self.notifier.notify(session_id)
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
            done = Done(session_id=session_id, status=status)
            stored, _ = await self._insert(conn, session_id, [done], turn_id)
            await self._notify_others(conn, session_id)
        self.notifier.notify(session_id)
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
        opening events, in one transaction; returns them and the session's epoch."""
        async with self._db.write() as conn:
            await conn.execute(
                insert(TurnRow).values(
                    id=turn_id,
                    session_id=session_id,
                    trace_id=trace_id,
                    status="running",
                    started_at=utcnow(),
                    worker_id=worker_id,
                    lease_until=lease_until,
                    job=job,
                )
            )
            stored, epoch = await self._insert(conn, session_id, events, turn_id)
            await self._notify_others(conn, session_id)
        self.notifier.notify(session_id)
        return stored, epoch

    async def _notify_others(self, conn: AsyncConnection, session_id: str) -> None:
        """Wake other workers' readers when this transaction commits (PostgreSQL)."""
        if self._db.dialect == "postgresql":
            await conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, session_id)))

    @staticmethod
    async def _insert(
        conn: AsyncConnection,
        session_id: str,
        events: Sequence[Event],
        turn_id: str | None,
        epoch: int | None = None,
    ) -> tuple[list[StoredEvent], int]:
        assert events, "append needs at least one event"
        now = utcnow()
        bump = (
            update(SessionRow)
            .where(SessionRow.id == session_id)
            .values(last_seq=SessionRow.last_seq + len(events), updated_at=now)
            .returning(SessionRow.last_seq, SessionRow.epoch)
        )
        if epoch is not None:
            bump = bump.where(SessionRow.epoch == epoch)
        row = (await conn.execute(bump)).first()
        if row is None:
            exists = await conn.scalar(select(SessionRow.epoch).where(SessionRow.id == session_id))
            if exists is None:
                raise SessionNotFoundError(f"No session {session_id!r} to append to")
            raise StaleOwnerError(
                f"Session {session_id!r} is at epoch {exists}, not {epoch}: another worker "
                f"took turn {turn_id!r} over"
            )
        last, current = int(row[0]), int(row[1])
        first = last - len(events) + 1
        rows: list[dict[str, Any]] = [
            {
                "session_id": session_id,
                "seq": first + i,
                "turn_id": turn_id,
                "type": ev.type,
                "data": event_data(ev),
                "created_at": now,
            }
            for i, ev in enumerate(events)
        ]
        await conn.execute(insert(EventRow), rows)
        return [StoredEvent(**row) for row in rows], current

    async def read(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
        turn_id: str | None = None,
    ) -> list[StoredEvent]:
        """Events with ``seq > after`` in order, optionally of one turn only."""
        query = (
            select(
                EventRow.session_id,
                EventRow.seq,
                EventRow.type,
                EventRow.data,
                EventRow.turn_id,
                EventRow.created_at,
            )
            .where(EventRow.session_id == session_id, EventRow.seq > after)
            .order_by(EventRow.seq)
        )
        if turn_id is not None:
            query = query.where(EventRow.turn_id == turn_id)
        if limit is not None:
            query = query.limit(limit)
        async with self._db.read() as conn:
            result = await conn.execute(query)
            return [StoredEvent(**row._asdict()) for row in result]

    async def last_seq(self, session_id: str) -> int:
        async with self._db.read() as conn:
            value = await conn.scalar(
                select(func.coalesce(func.max(EventRow.seq), 0)).where(
                    EventRow.session_id == session_id
                )
            )
        return int(value or 0)
