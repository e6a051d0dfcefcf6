"""Orgs, sessions, turns and usage rows: everything about a session but its log."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from store import _hot_pg as hot_pg
from store._db import Database
from store._log import EventLog
from store._models import OrgRow, SessionRow, TurnRow, UsageRow, utcnow


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    org_id: str
    user_id: str
    title: str | None
    last_seq: int
    created_at: datetime
    updated_at: datetime
    agent: str | None = None  # the agent profile's handle (None: the org's default)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    id: str
    session_id: str
    trace_id: str
    status: str
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    """Tokens and cost of one model call, attributed to a turn and a role."""

    session_id: str
    turn_id: str
    org_id: str
    user_id: str
    role: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd_micros: int = 0


@dataclass(frozen=True, slots=True)
class UsageTotals:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd_micros: int


_SESSION_COLUMNS = (
    SessionRow.id,
    SessionRow.org_id,
    SessionRow.user_id,
    SessionRow.title,
    SessionRow.last_seq,
    SessionRow.created_at,
    SessionRow.updated_at,
    SessionRow.agent,
)
_TURN_COLUMNS = (
    TurnRow.id,
    TurnRow.session_id,
    TurnRow.trace_id,
    TurnRow.status,
    TurnRow.started_at,
    TurnRow.finished_at,
)
_SUSPENDED_LIMIT = 100
_SUSPENDED = (
    select(*_TURN_COLUMNS)
    .where(TurnRow.status == "suspended", TurnRow.session_id == bindparam("session_id"))
    .order_by(TurnRow.finished_at, TurnRow.id)
    .limit(_SUSPENDED_LIMIT)
)
"""A session's suspended turns, the query every turn's start runs: built once, so its
cache key is computed once (building and keying it cost more than running it)."""


class Sessions:
    """Repository of orgs, sessions, turns and usage."""

    def __init__(self, db: Database, log: EventLog) -> None:
        self._db = db
        self._log = log

    async def create(
        self,
        *,
        org_id: str,
        user_id: str,
        session_id: str,
        title: str | None,
        agent: str | None = None,
    ) -> None:
        """Create a session (of ``agent``, a profile's handle; ``None``: the org's
        default), and its org on first sight (orgs come from tokens). A session already
        there for the same user and agent is kept: two first messages of one chat protocol
        thread race to open the id it reserved, and both go on in it."""
        now = utcnow()
        owner = (org_id, user_id, agent)

        def write(conn: Connection) -> None:  # on the writer thread: every new chat's first
            conn.execute(
                self._db.insert(OrgRow)
                .values(id=org_id, tier="lite", created_at=now)
                .on_conflict_do_nothing(index_elements=["id"])
            )
            opened = conn.execute(
                self._db.insert(SessionRow)
                .values(
                    id=session_id, org_id=org_id, user_id=user_id, title=title, agent=agent,
                    last_seq=0, created_at=now, updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["id"])
                .returning(SessionRow.id)
            ).first()  # fmt: skip
            if opened is None:
                held = conn.execute(
                    select(SessionRow.org_id, SessionRow.user_id, SessionRow.agent).where(
                        SessionRow.id == session_id
                    )
                ).one()
                if tuple(held) != owner:
                    raise ValueError(f"Session {session_id!r} exists for another user or agent")

        async def write_pg(pg: Any) -> None:  # PostgreSQL's writer: one statement
            held = await hot_pg.create_session(
                pg, session_id=session_id, org_id=org_id, user_id=user_id, title=title,
                agent=agent, now=now,
            )  # fmt: skip
            if held is not None and held != owner:
                raise ValueError(f"Session {session_id!r} exists for another user or agent")

        await self._db.run_write(write, pg=write_pg)

    async def get(self, session_id: str) -> SessionRecord | None:
        query = select(*_SESSION_COLUMNS).where(SessionRow.id == session_id)
        row = await self._db.run_read(lambda conn: conn.execute(query).first())
        return SessionRecord(**row._asdict()) if row else None

    async def list_for_user(
        self, *, org_id: str, user_id: str, limit: int, before: datetime | None = None
    ) -> list[SessionRecord]:
        """The user's sessions in the org, most recently active first."""
        query = (
            select(*_SESSION_COLUMNS)
            .where(SessionRow.org_id == org_id, SessionRow.user_id == user_id)
            .order_by(SessionRow.updated_at.desc(), SessionRow.id)
            .limit(limit)
        )
        if before is not None:
            query = query.where(SessionRow.updated_at < before)
        async with self._db.read() as conn:
            return [SessionRecord(**row._asdict()) for row in await conn.execute(query)]

    async def set_title(self, session_id: str, title: str) -> None:
        async with self._db.write() as conn:
            await conn.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(title=title)
            )

    async def turns(self, session_id: str) -> list[TurnRecord]:
        async with self._db.read() as conn:
            result = await conn.execute(
                select(*_TURN_COLUMNS)
                .where(TurnRow.session_id == session_id)
                .order_by(TurnRow.started_at, TurnRow.id)
            )
            return [TurnRecord(**row._asdict()) for row in result]

    async def latest_turn(self, session_id: str) -> TurnRecord | None:
        """The session's newest turn (by start), read by index: every message asks whether
        it answers a suspended turn, and that must not cost more as the session ages."""
        async with self._db.read() as conn:
            result = await conn.execute(
                select(*_TURN_COLUMNS)
                .where(TurnRow.session_id == session_id)
                .order_by(TurnRow.started_at.desc(), TurnRow.id.desc())
                .limit(1)
            )
            row = result.first()
        return None if row is None else TurnRecord(**row._asdict())

    async def resume_turn(
        self, turn_id: str, *, worker_id: str | None = None, lease_until: datetime | None = None
    ) -> bool:
        """Mark a ``suspended`` turn ``running`` again, held by ``worker_id`` until
        ``lease_until`` from the same statement (a running turn without a lease is a dead
        worker's to any keeper, which would take it over before the resume starts it);
        returns whether this call did (of two concurrent resumes exactly one wins; never
        while another turn runs in its session: the one-running-turn index refuses it)."""
        try:
            async with self._db.write() as conn:
                result = await conn.execute(
                    update(TurnRow)
                    .where(TurnRow.id == turn_id, TurnRow.status == "suspended")
                    .values(
                        status="running",
                        finished_at=None,
                        worker_id=worker_id,
                        lease_until=lease_until,
                    )
                    .returning(TurnRow.id)
                )
                return result.first() is not None
        except IntegrityError:
            return False

    async def suspended_turns(
        self,
        *,
        session_id: str | None = None,
        before: datetime | None = None,
        limit: int = _SUSPENDED_LIMIT,
    ) -> list[TurnRecord]:
        """Turns waiting for the user: a session's, or those suspended since before
        ``before`` (oldest first, for expiry)."""
        if session_id is not None and before is None and limit == _SUSPENDED_LIMIT:
            params = {"session_id": session_id}  # every turn's start asks: a prebuilt query
            return await self._db.run_read(
                lambda conn: [
                    TurnRecord(**row._asdict()) for row in conn.execute(_SUSPENDED, params)
                ]
            )
        query = select(*_TURN_COLUMNS).where(TurnRow.status == "suspended")
        if session_id is not None:
            query = query.where(TurnRow.session_id == session_id)
        if before is not None:
            query = query.where(TurnRow.finished_at < before)
        query = query.order_by(TurnRow.finished_at, TurnRow.id).limit(limit)
        return await self._db.run_read(
            lambda conn: [TurnRecord(**row._asdict()) for row in conn.execute(query)]
        )

    async def running_turns(self, session_id: str | None = None) -> list[TurnRecord]:
        query = select(*_TURN_COLUMNS).where(TurnRow.status == "running")
        if session_id is not None:
            query = query.where(TurnRow.session_id == session_id)
        return await self._db.run_read(
            lambda conn: [TurnRecord(**row._asdict()) for row in conn.execute(query)]
        )

    async def record_usage(self, usage: UsageRecord) -> None:
        async with self._db.write() as conn:
            await conn.execute(
                insert(UsageRow).values(
                    session_id=usage.session_id,
                    turn_id=usage.turn_id,
                    org_id=usage.org_id,
                    user_id=usage.user_id,
                    role=usage.role,
                    model=usage.model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_write_tokens=usage.cache_write_tokens,
                    cost_usd_micros=usage.cost_usd_micros,
                    created_at=utcnow(),
                )
            )

    async def turn_usage(self, session_id: str, turn_id: str) -> list[UsageRecord]:
        """The usage rows of one turn's model calls, in the order they were recorded."""
        columns = [getattr(UsageRow, f.name) for f in fields(UsageRecord)]
        query = (
            select(*columns)
            .where(UsageRow.session_id == session_id, UsageRow.turn_id == turn_id)
            .order_by(UsageRow.id)
        )
        return await self._db.run_read(
            lambda conn: [UsageRecord(**row._asdict()) for row in conn.execute(query)]
        )

    async def usage_totals(self, session_id: str) -> UsageTotals:
        columns = (
            UsageRow.input_tokens,
            UsageRow.output_tokens,
            UsageRow.cache_read_tokens,
            UsageRow.cache_write_tokens,
            UsageRow.cost_usd_micros,
        )
        async with self._db.read() as conn:
            row = (
                await conn.execute(
                    select(*(func.coalesce(func.sum(c), 0) for c in columns)).where(
                        UsageRow.session_id == session_id
                    )
                )
            ).one()
        return UsageTotals(*(int(v) for v in row))
