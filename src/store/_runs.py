"""Background runs: an agent's task, queued, then run as a turn in its own session.

A run row says what to do (the task, its context, who asked, which agent version) and,
once a worker claims it, which turn does it. The claim opens that turn in the same
transaction, so a claimed run always has its turn; from then on the turn is the truth: its
lease, its takeover after a dead worker, its status; a run's status is its turn's. An
idempotency key per agent makes a retried trigger the same run. The dispatcher's queries
read partial indexes (unclaimed runs here, running turns in ``store._models``), so they
cost the same with a million finished runs as with none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asyncpg import UniqueViolationError  # type: ignore[import-untyped]
from sqlalchemy import (
    ColumnElement,
    Connection,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    case,
    func,
    insert,
    literal,
    null,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from store import _hot_pg as hot_pg
from store._agents import AgentRow, AgentVersionRow
from store._appends import LogNotifier, StoredEvent, _notify_others, insert_opening
from store._db import Database
from store._hot_pg import TurnOpening
from store._leases import RUNNING
from store._models import (
    Base,
    EventRow,
    JSONData,
    ToolExecutionRow,
    TurnRow,
    UsageRow,
    utcnow,
)

RUNS_CHANNEL = "bosun_runs"
"""The PostgreSQL channel notified when a run is queued: it wakes every worker's
dispatcher (``store._notify.PgListener``)."""
UNCLAIMED = text("turn_id IS NULL AND cancelled_at IS NULL")
CLAIMED = text("turn_id IS NOT NULL")
USER_TRIGGER = "api"
"""The trigger of a run a person started (the API, ``bosun run``); schedules, webhooks and
content events (``mention``, ``reply``, ``subscription``) start runs with no person behind
them."""


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("org_id", "agent", "idempotency_key", name="uq_runs_idempotency"),
        Index("ix_runs_org_agent_created", "org_id", "agent", "created_at"),
        Index("ix_runs_org_agent_user_created", "org_id", "agent", "user_id", "created_at"),
        # A turn's run. Partial, so that the queue's ``turn_id IS NULL`` cannot read it
        # (SQLite, with no statistics, would, then sort: cancelled runs grow with history).
        Index("ix_runs_turn", "turn_id", sqlite_where=CLAIMED, postgresql_where=CLAIMED),
        # The queue, oldest first: only the runs waiting, however many have finished.
        Index(
            "ix_runs_unclaimed",
            "created_at",
            "id",
            sqlite_where=UNCLAIMED,
            postgresql_where=UNCLAIMED,
        ),
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
    trace_link: Mapped[str | None] = mapped_column(String(64), default=None)
    """The ``traceparent`` of the span that queued it, when tracing is on."""
    trigger_event_id: Mapped[str | None] = mapped_column(String(200), default=None)
    """The content event that started it (``fleet._triggers``), if one did."""
    # The database's default only: an insert need not name it (nor did one before 0025).
    hops: Mapped[int] = mapped_column(Integer, server_default="0")
    """Content-triggered runs between a person's event and this run (0: none)."""


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
    trace_link: str | None
    status: str
    trigger_event_id: str | None = None
    hops: int = 0
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


def _waiting() -> Any:
    """The unclaimed, uncancelled runs (``ix_runs_unclaimed``), as records: no turn yet."""
    return select(
        *RunRow.__table__.columns,
        literal("queued").label("status"),
        null().label("started_at"),
        null().label("finished_at"),
    ).where(UNCLAIMED)


def _queued(conn: Connection, limit: int) -> list[RunRecord]:
    paused: set[tuple[str, str]] = set()
    while True:  # each pass leaves out at least one more paused agent
        query = _waiting().order_by(RunRow.created_at, RunRow.id).limit(limit)
        if paused:
            query = query.where(tuple_(RunRow.org_id, RunRow.agent).not_in(list(paused)))
        runs = [RunRecord(**row._asdict()) for row in conn.execute(query)]
        more = _paused(conn, {(run.org_id, run.agent) for run in runs})
        if not more:
            return runs
        paused |= more


def _running_counts(conn: Connection) -> dict[tuple[str, str], int]:
    """Written as ``IN``, not a join: with no statistics SQLite would drive a join from
    every run, in (org, agent) order for the grouping."""
    query = (
        select(RunRow.org_id, RunRow.agent, func.count())
        .where(RunRow.turn_id.in_(select(TurnRow.id).where(RUNNING)))
        .group_by(RunRow.org_id, RunRow.agent)
    )
    return {(org, agent): int(n) for org, agent, n in conn.execute(query)}


def _paused(conn: Connection, agents: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Those of ``agents`` (org, handle) that are paused: by the server (``paused_at``)
    or by their current profile (``paused: true``)."""
    if not agents:
        return set()
    query = (
        select(
            AgentRow.org_id,
            AgentRow.handle,
            AgentRow.paused_at,
            AgentVersionRow.profile["paused"].as_boolean().label("flag"),
        )
        .join(
            AgentVersionRow,
            (AgentVersionRow.org_id == AgentRow.org_id)
            & (AgentVersionRow.handle == AgentRow.handle)
            & (AgentVersionRow.version == AgentRow.version),
        )
        .where(tuple_(AgentRow.org_id, AgentRow.handle).in_(list(agents)))
    )
    return {
        (row.org_id, row.handle)
        for row in conn.execute(query)
        if row.paused_at is not None or row.flag
    }


def _open_claimed(conn: Connection, run_id: str, opening: TurnOpening) -> list[StoredEvent] | None:
    """The claim and its turn, in the caller's transaction; the stored opening events, or
    ``None`` when the run was not waiting any more (then nothing is written)."""
    claimed = conn.execute(
        update(RunRow)
        .where(RunRow.id == run_id, UNCLAIMED)
        .values(turn_id=opening.turn_id, claimed_at=utcnow())
        .returning(RunRow.id)
    ).first()
    if claimed is None:
        return None
    stored = insert_opening(conn, opening)
    if conn.dialect.name == "postgresql":
        _notify_others(conn, opening.session_id)
    return stored


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a run did so far: steps ended, tool calls recorded, model cost."""

    steps: int = 0
    tool_calls: int = 0
    cost_usd_micros: int = 0


class RunTakenError(Exception):
    """The run was claimed by another worker (or cancelled) before this one could."""


class RunWakes:
    """What to call when a run is queued: on this worker (``Runs.create``) or on another
    (``PgListener``, on ``RUNS_CHANNEL``). Each worker's dispatcher adds its wake."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []

    def add(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def discard(self, callback: Callable[[], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def __call__(self) -> None:
        for callback in list(self._callbacks):
            callback()


class Runs:
    """Repository of the ``runs`` table."""

    def __init__(self, db: Database, notifier: LogNotifier) -> None:
        self._db = db
        self._notifier = notifier  # a claim's opening events wake the session's readers
        self.wakes = RunWakes()

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
                if self._db.dialect == "postgresql":  # on commit, every worker's dispatcher
                    await conn.execute(select(func.pg_notify(RUNS_CHANNEL, "")))
        except IntegrityError:  # another worker queued the same key (a schedule's tick) first
            found = (
                None if key is None else await self.by_key(values["org_id"], values["agent"], key)
            )
            if found is None:
                raise
            return found, False
        self.wakes()
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
        """Runs waiting for a worker, oldest first, but for those of paused agents (they
        wait, queued, for a resume or a cancel): the partial index ``ix_runs_unclaimed``
        and the current versions of the few agents they name, in one snapshot (a hot read:
        SQLite's reader thread)."""
        return await self._db.run_read(lambda conn: _queued(conn, limit))

    async def running_counts(self) -> dict[tuple[str, str], int]:
        """Running runs per (org, agent), across workers: the running turns (a partial
        index), then their runs by ``turn_id``."""
        return await self._db.run_read(_running_counts)

    async def dispatchable(self, limit: int) -> tuple[list[RunRecord], dict[tuple[str, str], int]]:
        """``queued`` and, when a run waits, ``running_counts``: a dispatcher's round in
        one read transaction."""

        def fetch(conn: Connection) -> tuple[list[RunRecord], dict[tuple[str, str], int]]:
            waiting = _queued(conn, limit)
            return waiting, (_running_counts(conn) if waiting else {})

        return await self._db.run_read(fetch)

    async def open_claimed(self, run_id: str, opening: TurnOpening) -> None:
        """Claim run ``run_id`` for the turn ``opening`` describes and open that turn (its
        row, running under the worker's lease, and its opening events), in one
        transaction: a claim never exists without its turn. ``RunTakenError`` (nothing
        written) when another worker claimed the run first, or it was cancelled."""

        async def fixed_sql(pg: Any) -> list[StoredEvent] | None:  # PostgreSQL: one statement
            rows = await hot_pg.open_turn(pg, opening, now=utcnow(), run_id=run_id)
            return None if rows is None else [StoredEvent(**row) for row in rows]

        try:
            claimed = await self._db.run_write(
                lambda conn: _open_claimed(conn, run_id, opening), pg=fixed_sql
            )
        except UniqueViolationError as exc:  # asyncpg's, as SQLAlchemy's elsewhere
            raise IntegrityError("open_claimed", None, exc) from exc
        if claimed is None:
            raise RunTakenError(run_id)
        self._notifier.notify(opening.session_id, claimed)

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
