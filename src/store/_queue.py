"""Queued messages: what a session's next turns will be while one runs (double texting).

A message sent while a turn runs in its session may wait (``enqueue``, ``interrupt``): it is
a ``turns`` row with status ``queued`` and its text in the job, so a crash loses nothing.
Starting the oldest one is one transaction that flips it to ``running`` and logs its
opening events; the partial unique index ``uq_turns_one_running`` refuses the flip while
another turn runs, so of the workers that try (the one whose turn ended, the request that
queued it, any worker's keeper) at most one starts it, and never beside a running turn.
A running turn is asked to stop by its ``stop`` column, which its holder reads when it
renews its lease.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, exists, insert, literal_column, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnElement

from events import Event, SessionStarted, UserMessage
from store._appends import _insert, _notify_others
from store._db import Database
from store._log import EventLog
from store._models import TurnRow, utcnow

# Literal in the SQL (not bound), so SQLite plans the partial indexes on them.
_QUEUED: ColumnElement[str] = literal_column("'queued'")
_RUNNING: ColumnElement[str] = literal_column("'running'")
_WAITING = (
    select(TurnRow.id)
    .where(TurnRow.session_id == bindparam("session_id"), TurnRow.status == _QUEUED)
    .order_by(TurnRow.started_at, TurnRow.id)
)  # built once: its cache key is memoised on the statement
QUEUED_KEY = "queued"
"""The job key that holds a queued turn's message until it starts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedTurn:
    """A queued message whose turn has just started on this worker: its opening events
    are logged and its row is ``running`` under this worker's lease."""

    session_id: str
    turn_id: str
    trace_id: str
    job: dict[str, Any]
    opening: UserMessage


class TurnQueue:
    """Repository of queued turns and of stop requests to running ones."""

    def __init__(self, db: Database, log: EventLog) -> None:
        self._db = db
        self._log = log

    async def add(
        self, session_id: str, *, turn_id: str, trace_id: str, job: dict[str, Any], text: str
    ) -> UserMessage:
        """Queue ``text`` as the session's next turn (after those queued before it); its
        user message, whose id the turn's answer will keep."""
        message = UserMessage(message_id=f"msg_{turn_id.replace('-', '')}", text=text)
        held = {"message_id": message.message_id, "text": text}
        row: dict[str, Any] = {"id": turn_id, "session_id": session_id, "trace_id": trace_id}
        row |= {"status": "queued", "started_at": utcnow(), "job": {**job, QUEUED_KEY: held}}
        async with self._db.write() as conn:
            await conn.execute(insert(TurnRow).values(**row))
        return message

    async def waiting(self, session_id: str) -> list[str]:
        """The ids of the session's queued turns, oldest first (every turn's end asks: a
        hot read, on SQLite's reader thread)."""
        found = await self._db.run_read(
            lambda conn: conn.execute(_WAITING, {"session_id": session_id}).scalars().all()
        )
        return [str(turn_id) for turn_id in found]

    async def busy(self, session_id: str) -> bool:
        """Whether a turn runs in the session or waits to (one query, so a queued turn
        starting between two reads is not missed)."""
        query = select(TurnRow.id).where(
            TurnRow.session_id == session_id, TurnRow.status.in_(("running", "queued"))
        )
        async with self._db.read() as conn:
            return await conn.scalar(query.limit(1)) is not None

    async def start_next(
        self, session_id: str, *, worker_id: str, lease_until: datetime
    ) -> QueuedTurn | None:
        """Start the session's oldest queued turn under ``worker_id``'s lease and log its
        opening events, in one transaction; ``None`` when nothing waits or a turn runs
        there (the unique index refuses the start: another worker won, or the running
        turn's end will start it)."""
        try:
            return await self._start_next(session_id, worker_id, lease_until)
        except IntegrityError:
            return None

    async def _start_next(
        self, session_id: str, worker_id: str, lease_until: datetime
    ) -> QueuedTurn | None:
        async with self._db.write() as conn:
            row = (
                await conn.execute(
                    select(TurnRow.id, TurnRow.trace_id, TurnRow.job)
                    .where(TurnRow.session_id == session_id, TurnRow.status == _QUEUED)
                    .order_by(TurnRow.started_at, TurnRow.id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                )
            ).first()
            if row is None:
                return None
            job = dict(row.job or {})
            held = job.pop(QUEUED_KEY)
            opening = UserMessage(message_id=str(held["message_id"]), text=str(held["text"]))
            started = await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == row.id, TurnRow.status == _QUEUED)
                .values(status="running", started_at=utcnow(), worker_id=worker_id,
                        lease_until=lease_until, job=job)
                .returning(TurnRow.id)
            )  # fmt: skip
            if started.first() is None:
                return None
            events: list[Event] = [SessionStarted(session_id=session_id, turn_id=row.id), opening]
            stored = await conn.run_sync(_insert, session_id, events, row.id)
            await conn.execute(
                update(TurnRow).where(TurnRow.id == row.id).values(first_seq=stored[0].seq)
            )
            if self._db.dialect == "postgresql":
                await conn.run_sync(_notify_others, session_id)
        self._log.notifier.notify(session_id, stored)
        return QueuedTurn(
            session_id=session_id, turn_id=row.id, trace_id=row.trace_id, job=job, opening=opening
        )

    async def orphaned(self, *, limit: int = 10) -> list[str]:
        """Sessions with queued turns and none running (the worker that should have
        started the next one died, or its start failed): the keeper starts them."""
        running = aliased(TurnRow)
        busy = exists().where(
            and_(running.session_id == TurnRow.session_id, running.status == _RUNNING)
        )
        query = (
            select(TurnRow.session_id)
            .where(TurnRow.status == _QUEUED, ~busy)
            .group_by(TurnRow.session_id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [str(s) for s in (await conn.execute(query)).scalars()]

    async def stop(self, turn_id: str, reason: str) -> bool:
        """Ask the running ``turn_id`` to stop (``reason``: ``interrupted``); whether it
        was still running. Its holder sees the request at its next lease renewal."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == turn_id, TurnRow.status == "running")
                .values(stop=reason)
                .returning(TurnRow.id)
            )
            return result.first() is not None

    async def stops(self, turn_ids: Collection[str]) -> dict[str, str]:
        """The stop requests among the running ``turn_ids``: turn id to reason."""
        if not turn_ids:
            return {}
        query = select(TurnRow.id, TurnRow.stop).where(
            TurnRow.id.in_(list(turn_ids)), TurnRow.status == "running", TurnRow.stop.is_not(None)
        )
        async with self._db.read() as conn:
            return {str(row.id): str(row.stop) for row in await conn.execute(query)}
