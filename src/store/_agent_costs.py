"""What each agent spends, the cost alerts it fired, and its pause outside the profile.

An agent's spend is derived, never counted twice: the ``usage`` rows of the turns in its
sessions (``sessions.agent``; the default agent's sessions may hold NULL). Alerts are
rows keyed by (org, agent, period, threshold) and inserted only if absent, so however
many workers see a turn end, each threshold fires once per period. The pause
(``agents.paused_at``) is set with a conditional update for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, String, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from store._agents import AgentRow
from store._db import Database
from store._models import Base, SessionRow, UsageRow, utcnow

DEFAULT_AGENT = "default"
"""The handle whose sessions may say NULL (chats from before agents, or the default)."""


class AgentCostAlertRow(Base):
    """A cost threshold an agent crossed in a period: fired once, by whichever worker
    inserted the row."""

    __tablename__ = "agent_cost_alerts"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    period_key: Mapped[str] = mapped_column(String(16), primary_key=True)
    threshold_usd_micros: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    spent_usd_micros: Mapped[int] = mapped_column(BigInteger)
    fired_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True)
class DayUsage:
    """One UTC day of an agent's model calls."""

    day: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd_micros: int = 0


@dataclass(frozen=True, slots=True)
class FiredAlert:
    period_key: str
    threshold_usd_micros: int
    spent_usd_micros: int
    fired_at: datetime


class AgentCosts:
    """Repository of ``agent_cost_alerts`` and the pause columns of ``agents``, and the
    aggregate reads of an agent's usage."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _of_agent(self, org_id: str, agent: str) -> Any:
        """The agent's sessions (the default agent's include those saying NULL)."""
        mine = SessionRow.agent == agent
        if agent == DEFAULT_AGENT:
            mine = mine | SessionRow.agent.is_(None)
        return (SessionRow.org_id == org_id) & mine

    def _day(self) -> Any:
        """A usage row's UTC day as ``YYYY-MM-DD`` (SQLite keeps UTC text)."""
        if self._db.dialect == "postgresql":
            utc = func.timezone("UTC", UsageRow.created_at)
            return func.to_char(utc, "YYYY-MM-DD", type_=String())
        return func.substr(UsageRow.created_at, 1, 10, type_=String())

    async def spent(self, org_id: str, agent: str, since: datetime) -> int:
        """What the agent's model calls cost since ``since``, in micro-dollars."""
        query = (
            select(func.coalesce(func.sum(UsageRow.cost_usd_micros), 0))
            .join(SessionRow, SessionRow.id == UsageRow.session_id)
            .where(self._of_agent(org_id, agent), UsageRow.created_at >= since)
        )
        return await self._db.run_read(lambda conn: int(conn.scalar(query) or 0))

    async def days(self, org_id: str, agent: str, since: datetime) -> list[DayUsage]:
        """The agent's usage per UTC day since ``since`` (days without calls left out)."""
        day = self._day().label("day")
        query = (
            select(
                day,
                func.count(),
                func.coalesce(func.sum(UsageRow.input_tokens), 0),
                func.coalesce(func.sum(UsageRow.output_tokens), 0),
                func.coalesce(func.sum(UsageRow.cost_usd_micros), 0),
            )
            .join(SessionRow, SessionRow.id == UsageRow.session_id)
            .where(self._of_agent(org_id, agent), UsageRow.created_at >= since)
            .group_by(day)
            .order_by(day)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [DayUsage(str(d), int(n), int(i), int(o), int(c)) for d, n, i, o, c in rows]

    async def fire(
        self, org_id: str, agent: str, period_key: str, threshold: int, spent: int
    ) -> bool:
        """Record that ``agent`` crossed ``threshold`` in ``period_key``; whether this call
        was the first (only the first may notify)."""
        statement = (
            self._db.insert(AgentCostAlertRow)
            .values(
                org_id=org_id,
                agent=agent,
                period_key=period_key,
                threshold_usd_micros=threshold,
                spent_usd_micros=spent,
                fired_at=utcnow(),
            )
            .on_conflict_do_nothing()
            .returning(AgentCostAlertRow.agent)
        )
        async with self._db.write() as conn:
            return (await conn.execute(statement)).first() is not None

    async def fired(self, org_id: str, agent: str, period_key: str) -> list[FiredAlert]:
        """The alerts ``agent`` fired in ``period_key``, lowest threshold first."""
        row = AgentCostAlertRow
        query = (
            select(row.period_key, row.threshold_usd_micros, row.spent_usd_micros, row.fired_at)
            .where(row.org_id == org_id, row.agent == agent, row.period_key == period_key)
            .order_by(row.threshold_usd_micros)
        )
        async with self._db.read() as conn:
            return [FiredAlert(*r) for r in await conn.execute(query)]

    async def pause(self, org_id: str, agent: str, reason: str) -> bool:
        """Pause a saved agent unless it already is; whether this call paused it."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(AgentRow)
                .where(
                    AgentRow.org_id == org_id,
                    AgentRow.handle == agent,
                    AgentRow.deleted_at.is_(None),
                    AgentRow.paused_at.is_(None),
                )
                .values(paused_at=utcnow(), paused_reason=reason)
                .returning(AgentRow.handle)
            )
            return result.first() is not None

    async def unpause(self, org_id: str, agent: str) -> bool:
        """Clear the agent's pause; whether it was paused."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(AgentRow)
                .where(
                    AgentRow.org_id == org_id,
                    AgentRow.handle == agent,
                    AgentRow.paused_at.is_not(None),
                )
                .values(paused_at=None, paused_reason=None)
                .returning(AgentRow.handle)
            )
            return result.first() is not None
