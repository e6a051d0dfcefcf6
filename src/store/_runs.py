"""Background runs: an agent's task, queued, then run as a turn in its own session.

A run row says what to do (the task, its context, who asked, which agent version) and,
once a worker claims it, which turn does it. From then on the turn is the truth: its
lease, its takeover after a dead worker, its status; a run's status is its turn's. A
claim that never opened its turn (the worker died in between) is given back after
``STALE_CLAIM_S``. An idempotency key per agent makes a retried trigger the same run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    and_,
    case,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import (
    Base,
    EventRow,
    JSONData,
    ToolExecutionRow,
    TurnRow,
    UsageRow,
    utcnow,
)

STALE_CLAIM_S = 60.0
"""A claim whose turn never opened is given back to the queue after this long."""
USER_TRIGGER = "api"
"""The trigger of a run a person started (the API, ``bosun run``); schedules and webhooks
start runs with no person behind them."""


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("org_id", "agent", "idempotency_key", name="uq_runs_idempotency"),
        Index("ix_runs_org_agent_created", "org_id", "agent", "created_at"),
        Index("ix_runs_org_agent_user_created", "org_id", "agent", "user_id", "created_at"),
        Index("ix_runs_queued", "turn_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    agent: Mapped[str] = mapped_column(String(64))
    agent_version: Mapped[int] = mapped_column(Integer)
    session_id: Mapped[str] = mapped_column(String(36))
    turn_id: Mapped[str | None] = mapped_column(String(36), default=None)
    user_id: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    trigger: Mapped[str] = mapped_column(String(16), default="api")
    task: Mapped[str] = mapped_column(Text)
    context: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A run as stored, with its turn's status and times (``queued`` before it has one)."""

    id: str
    org_id: str
    agent: str
    agent_version: int
    session_id: str
    turn_id: str | None
    user_id: str
    role: str
    trigger: str
    task: str
    context: dict[str, Any] | None
    idempotency_key: str | None
    created_at: datetime
    claimed_at: datetime | None
    cancelled_at: datetime | None
    status: str
    started_at: datetime | None
    finished_at: datetime | None


def _records() -> Any:
    """Runs joined to their turns: a run's status is its turn's (before one: ``queued``,
    or ``cancelled`` when cancelled while queued)."""
    waiting = case((RunRow.cancelled_at.is_not(None), "cancelled"), else_="queued")
    started = func.coalesce(TurnRow.status, waiting)
    return select(
        *RunRow.__table__.columns,
        started.label("status"),
        TurnRow.started_at,
        TurnRow.finished_at,
    ).outerjoin(TurnRow, TurnRow.id == RunRow.turn_id)


def _started_by(user_id: str) -> tuple[ColumnElement[bool], ...]:
    """Runs ``user_id`` started in person: a schedule's or a webhook's acts under a made-up
    user id (``schedule:<handle>``) that a token's user must never pass for."""
    return RunRow.user_id == user_id, RunRow.trigger == USER_TRIGGER


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a run did so far: steps ended, tool calls recorded, model cost."""

    steps: int = 0
    tool_calls: int = 0
    cost_usd_micros: int = 0


class Runs:
    """Repository of the ``runs`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, **values: Any) -> tuple[RunRecord, bool]:
        """Queue a run (``values``: the row's columns, its session created first by the
        caller); with an idempotency key used before for the agent, the earlier run
        instead. Returns the run and whether it is new."""
        key = values.get("idempotency_key")
        try:
            async with self._db.write() as conn:
                if key is not None and (earlier := await self._by_key(conn, values, key)):
                    return earlier, False
                await conn.execute(insert(RunRow).values(created_at=utcnow(), **values))
                row = (await conn.execute(_records().where(RunRow.id == values["id"]))).one()
        except IntegrityError:  # another worker queued the same key (a schedule's tick) first
            found = (
                None if key is None else await self.by_key(values["org_id"], values["agent"], key)
            )
            if found is None:
                raise
            return found, False
        return RunRecord(**row._asdict()), True

    @staticmethod
    async def _by_key(conn: AsyncConnection, values: dict[str, Any], key: str) -> RunRecord | None:
        row = (
            await conn.execute(
                _records().where(
                    RunRow.org_id == values["org_id"],
                    RunRow.agent == values["agent"],
                    RunRow.idempotency_key == key,
                )
            )
        ).first()
        return RunRecord(**row._asdict()) if row else None

    async def by_key(self, org_id: str, agent: str, key: str) -> RunRecord | None:
        """The agent's run started under idempotency ``key``, if any."""
        values = {"org_id": org_id, "agent": agent}
        async with self._db.read() as conn:
            return await self._by_key(conn, values, key)

    async def get(
        self, org_id: str, run_id: str, *, triggered_by: str | None = None
    ) -> RunRecord | None:
        """The run (``triggered_by``: only if that user started it, see ``history``)."""
        query = _records().where(RunRow.org_id == org_id, RunRow.id == run_id)
        if triggered_by is not None:
            query = query.where(*_started_by(triggered_by))
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return RunRecord(**row._asdict()) if row else None

    async def for_turn(self, turn_id: str) -> RunRecord | None:
        query = _records().where(RunRow.turn_id == turn_id)
        row = await self._db.run_read(lambda conn: conn.execute(query).first())
        return RunRecord(**row._asdict()) if row else None

    async def history(
        self,
        org_id: str,
        agent: str,
        *,
        limit: int,
        before: datetime | None = None,
        triggered_by: str | None = None,
    ) -> list[RunRecord]:
        """The agent's runs, newest first (``before``: older than that creation time;
        ``triggered_by``: only those that user started, filtered here so pages stay full)."""
        query = (
            _records()
            .where(RunRow.org_id == org_id, RunRow.agent == agent)
            .order_by(RunRow.created_at.desc(), RunRow.id)
            .limit(limit)
        )
        if before is not None:
            query = query.where(RunRow.created_at < before)
        if triggered_by is not None:
            query = query.where(*_started_by(triggered_by))
        async with self._db.read() as conn:
            return [RunRecord(**row._asdict()) for row in await conn.execute(query)]

    async def queued(self, limit: int) -> list[RunRecord]:
        """Runs waiting for a worker, oldest first; stale claims count as waiting again."""
        stale = utcnow() - timedelta(seconds=STALE_CLAIM_S)
        query = (
            _records()
            .where(
                RunRow.cancelled_at.is_(None),
                (RunRow.turn_id.is_(None)) | and_(TurnRow.id.is_(None), RunRow.claimed_at < stale),
            )
            .order_by(RunRow.created_at, RunRow.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [RunRecord(**row._asdict()) for row in await conn.execute(query)]

    async def running_counts(self) -> dict[tuple[str, str], int]:
        """Running runs per (org, agent), across workers."""
        query = (
            select(RunRow.org_id, RunRow.agent, func.count())
            .join(TurnRow, TurnRow.id == RunRow.turn_id)
            .where(TurnRow.status == "running")
            .group_by(RunRow.org_id, RunRow.agent)
        )
        async with self._db.read() as conn:
            return {(org, agent): int(n) for org, agent, n in await conn.execute(query)}

    async def claim(self, run: RunRecord, turn_id: str) -> bool:
        """Take ``run`` for a new turn ``turn_id``, unless another worker took it first."""
        stale = utcnow() - timedelta(seconds=STALE_CLAIM_S)
        unclaimed = (
            RunRow.turn_id.is_(None)
            if run.turn_id is None
            else and_(RunRow.turn_id == run.turn_id, RunRow.claimed_at < stale)
        )
        async with self._db.write() as conn:
            result = await conn.execute(
                update(RunRow)
                .where(RunRow.id == run.id, RunRow.cancelled_at.is_(None), unclaimed)
                .values(turn_id=turn_id, claimed_at=utcnow())
                .returning(RunRow.id)
            )
            return result.first() is not None

    async def cancel_queued(self, org_id: str, run_id: str) -> bool:
        """Cancel a run no worker has claimed; whether it was still waiting."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(RunRow)
                .where(
                    RunRow.org_id == org_id,
                    RunRow.id == run_id,
                    RunRow.turn_id.is_(None),
                    RunRow.cancelled_at.is_(None),
                )
                .values(cancelled_at=utcnow())
                .returning(RunRow.id)
            )
            return result.first() is not None

    async def figures(self, runs: Sequence[RunRecord]) -> dict[str, RunFigures]:
        """Each started run's figures, by run id, in three grouped queries (a page's worth)."""
        started = {run.session_id: run for run in runs if run.turn_id is not None}
        if not started:
            return {}
        sessions = list(started)
        steps = (
            select(EventRow.session_id, func.count())
            .where(EventRow.session_id.in_(sessions), EventRow.type == "step_completed")
            .group_by(EventRow.session_id)
        )
        calls = (
            select(ToolExecutionRow.session_id, func.count())
            .where(ToolExecutionRow.session_id.in_(sessions))
            .group_by(ToolExecutionRow.session_id)
        )
        cost = (
            select(UsageRow.session_id, func.sum(UsageRow.cost_usd_micros))
            .where(UsageRow.session_id.in_(sessions))
            .group_by(UsageRow.session_id)
        )
        async with self._db.read() as conn:
            counted = [
                {sid: int(n or 0) for sid, n in await conn.execute(query)}
                for query in (steps, calls, cost)
            ]
        return {
            run.id: RunFigures(*(column.get(sid, 0) for column in counted))
            for sid, run in started.items()
        }
