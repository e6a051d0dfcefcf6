"""Appending to the session log, below the log itself: the stored event, the in-process
wake-ups of its readers, the statement that numbers and inserts events (SQLite's writer
thread and SQLAlchemy's), and its refusals. The log (``store._log``), the run claim
(``store._runs``) and queued turns (``store._queue``) all append through these, so none of
them needs the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection

from events import Event, event_data, parse_event
from store import _hot as hot
from store._hot_pg import TurnOpening
from store._models import EventRow, SessionRow, TurnRow, utcnow

NOTIFY_CHANNEL = "bosun_events"


class SessionNotFoundError(LookupError):
    """Raised when appending to a session that does not exist."""


class StaleOwnerError(RuntimeError):
    """An append under an ownership epoch the turn has moved past: another worker took the
    turn over, so this writer's events are refused (nothing of the batch is written)."""


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


def insert_opening(conn: Connection, opening: TurnOpening) -> list[StoredEvent]:
    """A turn's opening events, then its running row, in the caller's transaction (SQLite's
    writer thread, or an async-engine one); the one-running-turn index may refuse the row,
    and then nothing is written. ``store._hot_pg.open_turn`` is its PostgreSQL statement."""
    stored = _insert(conn, opening.session_id, opening.events, opening.turn_id)
    conn.execute(
        insert(TurnRow).values(
            id=opening.turn_id, session_id=opening.session_id, trace_id=opening.trace_id,
            status="running", started_at=utcnow(), worker_id=opening.worker_id,
            lease_until=opening.lease_until, job=opening.job, first_seq=stored[0].seq,
        )
    )  # fmt: skip
    return stored
