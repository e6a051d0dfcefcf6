"""The append-only session log and the wake-ups that let readers tail it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import partial
from typing import Any, NoReturn

from asyncpg import UniqueViolationError  # type: ignore[import-untyped]
from sqlalchemy import CompoundSelect, Select, func, insert, select, union_all, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from events import Done, Event, TurnStatus, Unanswered, event_data, parse_event
from store import _hot as hot
from store import _hot_pg as hot_pg
from store._approvals import ApprovalRow
from store._db import Database
from store._models import ANCHOR_TYPES, EventRow, SessionRow, ToolExecutionRow, TurnRow, utcnow

NOTIFY_CHANNEL = "bosun_events"


class SessionNotFoundError(LookupError):
    """Raised when appending to a session that does not exist."""


class StaleOwnerError(RuntimeError):
    """An append under an ownership epoch the turn has moved past: another worker took the
    turn over, so this writer's events are refused (nothing of the batch is written)."""


class TurnInProgressError(RuntimeError):
    """A turn runs in the session already: the database holds one running turn per
    session (``uq_turns_one_running``), so a second one is refused, on any worker."""

    def __init__(self, session_id: str, turn_id: str | None) -> None:
        super().__init__(f"Turn {turn_id!r} is still running in session {session_id!r}")
        self.session_id = session_id
        self.turn_id = turn_id


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as committed to the log, with its sequence number."""

    session_id: str
    seq: int
    type: str
    data: dict[str, Any]
    turn_id: str | None
    created_at: datetime
    text: str | None = field(default=None, compare=False, repr=False)
    """``data`` as compact JSON when the writer already made it (SQLite's hot path): a
    live stream frames it as is instead of encoding the event a second time."""

    @property
    def event(self) -> Event:
        return parse_event(self.data)


_SLOTS = tuple(StoredEvent.__dict__[f.name].__set__ for f in fields(StoredEvent))


def _built(rows: list[tuple[Any, ...]]) -> list[StoredEvent]:
    """``StoredEvent(*row)`` for each row (in field order), at a third of the cost: the
    writer thread makes one per event, and a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``; here each slot is set directly, once."""
    built = []
    new = object.__new__
    s0, s1, s2, s3, s4, s5, s6 = _SLOTS  # unrolled: a loop over the slots costs as much
    for session_id, seq, kind, data, turn_id, created_at, text in rows:
        event = new(StoredEvent)
        s0(event, session_id)
        s1(event, seq)
        s2(event, kind)
        s3(event, data)
        s4(event, turn_id)
        s5(event, created_at)
        s6(event, text)
        built.append(event)
    return built


class Wake(asyncio.Event):
    """A reader's wake-up, carrying the events this process committed since the reader
    last took them: a live tail reads them from memory, not back from the database."""

    MAX_HELD = 4096  # past this, the reader re-reads the log instead

    def __init__(self) -> None:
        super().__init__()
        self._held: list[StoredEvent] | None = []

    def hold(self, events: Sequence[StoredEvent] | None) -> None:
        if events is None:  # committed elsewhere (another worker): only the log knows
            self._held = None
        elif self._held is not None:
            self._held.extend(events)
            if len(self._held) > self.MAX_HELD:
                self._held = None
        self.set()

    def take_after(self, cursor: int) -> list[StoredEvent] | None:
        """The held events after ``cursor`` if they continue it without a gap (``[]`` for
        none), else ``None``: the reader must read the log. Clears what it held."""
        held, self._held = self._held, []
        if held is None:
            return None
        held.sort(key=lambda e: e.seq)
        fresh = [e for e in held if e.seq > cursor]
        if fresh and any(e.seq != cursor + 1 + i for i, e in enumerate(fresh)):
            return None
        return fresh


class LogNotifier:
    """In-process wake-ups for log readers, keyed by session.

    A reader registers before it reads, so an append that commits between its read and
    its wait still wakes it. Appends of this process hand their committed events to the
    readers (``Wake.take_after``); on PostgreSQL other workers' appends arrive by
    ``NOTIFY`` (``store._notify``) with no events, so those readers read the log, and
    ``poll_s`` re-reads are the fallback.
    """

    def __init__(self, *, poll_s: float | None = None) -> None:
        self._waiters: dict[str, set[Wake]] = {}
        self.poll_s = poll_s  # readers also re-read this often (other workers' appends)

    @contextmanager
    def listen(self, session_id: str) -> Iterator[Wake]:
        wake = Wake()
        self._waiters.setdefault(session_id, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[session_id]

    def notify(self, session_id: str, events: Sequence[StoredEvent] | None = None) -> None:
        """Wake the session's readers; ``events`` are what this process just committed
        (``None``: something changed that only the log can tell)."""
        for wake in self._waiters.get(session_id, ()):
            wake.hold(events)


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
        try:
            if self._db.dialect == "postgresql":
                stored = await self._open_pg(
                    session_id, events, turn_id=turn_id, trace_id=trace_id,
                    worker_id=worker_id, lease_until=lease_until, job=job,
                )  # fmt: skip
            else:  # SQLite: one job of the writer thread (no async-engine transaction)
                row = {
                    "id": turn_id, "session_id": session_id, "trace_id": trace_id,
                    "status": "running", "started_at": utcnow(), "worker_id": worker_id,
                    "lease_until": lease_until, "job": job,
                }  # fmt: skip
                stored = await self._db.run_write(partial(_open, session_id, events, row))
        except (IntegrityError, UniqueViolationError):
            async with self._db.read() as conn:
                taken = await conn.scalar(select(TurnRow.id).where(TurnRow.id == turn_id))
            if taken is not None:
                raise  # not the one-running-turn index: a reused turn id
            # The running turn may have ended since (then ``turn_id`` is None).
            raise TurnInProgressError(session_id, await self.running_turn(session_id)) from None
        self.notifier.notify(session_id, stored)
        return stored, 0

    async def _open_pg(
        self, session_id: str, events: Sequence[Event], *, turn_id: str, **turn: Any
    ) -> list[StoredEvent]:
        """``open_turn`` on PostgreSQL: one statement on the writer's connection."""
        assert events, "a turn opens with at least one event"

        async def write(pg: Any) -> list[StoredEvent]:
            opening = hot_pg.TurnOpening(
                session_id=session_id, events=events, turn_id=turn_id, **turn
            )
            rows = await hot_pg.open_turn(pg, opening, now=utcnow())
            if rows is None:
                raise SessionNotFoundError(f"No session {session_id!r} to append to")
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


def _open(
    session_id: str, events: Sequence[Event], turn: dict[str, Any], conn: Connection
) -> list[StoredEvent]:
    """``open_turn``'s transaction on SQLite's writer thread: the opening events, then the
    running turn's row (the one-running-turn index may refuse it: nothing is written)."""
    stored = _insert(conn, session_id, events, turn["id"])
    conn.execute(insert(TurnRow).values(**turn, first_seq=stored[0].seq))
    return stored


def _notify_others(conn: Connection, session_id: str) -> None:
    """Wake other workers' readers when this transaction commits (PostgreSQL)."""
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, session_id)))


def _insert(
    conn: Connection,
    session_id: str,
    events: Sequence[Event],
    turn_id: str | None,
    epoch: int | None = None,
) -> list[StoredEvent]:
    """Number ``events`` from the session's counter row and insert them; with ``epoch``,
    only while the turn is still at it (``StaleOwnerError`` otherwise)."""
    assert events, "append needs at least one event"
    assert epoch is None or turn_id is not None, "an owner's epoch is its turn's"
    now = utcnow()
    if hot.runs_on(conn):  # the writer thread: fixed SQL (store._hot)
        cursor = hot.cursor_of(conn)
        owner = None if epoch is None or turn_id is None else (turn_id, epoch)
        last = hot.bump_sequence(cursor, session_id, len(events), owner, now)
        if last is None:
            _refuse(conn, session_id, turn_id, epoch)
        first = last - len(events) + 1
        inserted = hot.insert_events(cursor, session_id, events, turn_id, first, now)
        return _built(inserted)
    if epoch is not None:
        # FOR SHARE (PostgreSQL): a claim's epoch bump waits for this append to commit, or
        # this read waits for the claim and sees its epoch. SQLite has one writer.
        held = conn.scalar(
            select(TurnRow.epoch).where(TurnRow.id == turn_id).with_for_update(read=True)
        )
        if held != epoch:
            _refuse(conn, session_id, turn_id, epoch)
    bump = (
        update(SessionRow)
        .where(SessionRow.id == session_id)
        .values(last_seq=SessionRow.last_seq + len(events), updated_at=now)
        .returning(SessionRow.last_seq)
    )
    last = conn.scalar(bump)
    if last is None:
        _refuse(conn, session_id, turn_id, epoch)
    first = int(last) - len(events) + 1
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
    conn.execute(insert(EventRow), rows)
    return [StoredEvent(**row) for row in rows]


def _refuse(conn: Connection, session_id: str, turn_id: str | None, epoch: int | None) -> NoReturn:
    """Why an append matched nothing: no session, or a stale owner of its turn."""
    found = conn.scalar(select(SessionRow.id).where(SessionRow.id == session_id)) is not None
    current = conn.scalar(select(TurnRow.epoch).where(TurnRow.id == turn_id))
    raise _refusal(session_id, turn_id, epoch, found, current)


def _refusal(
    session_id: str, turn_id: str | None, epoch: int | None, found: bool, current: int | None
) -> Exception:
    if not found:
        return SessionNotFoundError(f"No session {session_id!r} to append to")
    return StaleOwnerError(
        f"Turn {turn_id!r} is at epoch {current}, not {epoch}: another worker took it over"
    )
