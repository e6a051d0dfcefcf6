"""Agents' subscriptions to the host app's content: a resource type, optionally one resource,
optionally some event types. A content event that matches starts a run of the agent
(``fleet._triggers``). Deleting an agent deletes its subscriptions in the same transaction
(``store._agents``), so a handle created again watches nothing.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Index, String, delete, func, insert, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import Base, JSONData, utcnow

MAX_SUBSCRIPTIONS = 50
"""Subscriptions per agent."""


class AgentSubscriptionRow(Base):
    __tablename__ = "agent_subscriptions"
    __table_args__ = (
        Index("ix_agent_subscriptions_agent", "org_id", "agent"),
        Index("ix_agent_subscriptions_resource", "org_id", "resource_type", "resource_id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    agent: Mapped[str] = mapped_column(String(64))
    resource_type: Mapped[str] = mapped_column(String(40))
    resource_id: Mapped[str | None] = mapped_column(String(200), default=None)
    event_types: Mapped[list[str]] = mapped_column(JSONData)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionRecord:
    """A subscription as stored; ``event_types`` empty: every type of event."""

    id: str
    org_id: str
    agent: str
    resource_type: str
    resource_id: str | None
    event_types: list[str]
    created_by: str
    created_at: datetime

    def matches(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types

    def describe(self) -> str:
        """One line for the agent's self block: ``commented on note 42``, ``any event on
        every note``."""
        events = ", ".join(self.event_types) or "any event"
        what = (
            f"{self.resource_type} {self.resource_id}"
            if self.resource_id
            else (f"every {self.resource_type}")
        )
        return f"{events} on {what}"


class SubscriptionLimitError(Exception):
    """The agent already has ``MAX_SUBSCRIPTIONS`` subscriptions."""


_COLUMNS = tuple(AgentSubscriptionRow.__table__.columns)
_KEPT = 10_000  # agents' lists remembered at most (then all are read afresh)


class Subscriptions:
    """Repository of the ``agent_subscriptions`` table.

    It remembers each agent's list as last read (``for_agent``'s ``max_age_s``), so a
    busy agent's self block does not cost a read per run; what this process changes
    (``add``, ``delete``, ``forget``) it reads afresh."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._read: dict[tuple[str, str], tuple[float, list[SubscriptionRecord]]] = {}

    async def add(
        self,
        org_id: str,
        agent: str,
        *,
        resource_type: str,
        resource_id: str | None,
        event_types: list[str],
        created_by: str,
    ) -> SubscriptionRecord:
        """Subscribe ``agent``; ``SubscriptionLimitError`` past ``MAX_SUBSCRIPTIONS``. The
        count and the insert are one transaction (on PostgreSQL under a lock per agent, so
        two concurrent adds cannot both take the last place)."""
        record = SubscriptionRecord(
            id=f"sub_{uuid.uuid4().hex}", org_id=org_id, agent=agent,
            resource_type=resource_type, resource_id=resource_id,
            event_types=event_types, created_by=created_by, created_at=utcnow(),
        )  # fmt: skip
        async with self._db.write() as conn:
            if self._db.dialect == "postgresql":
                lock = text("SELECT pg_advisory_xact_lock(hashtext(:key))")
                await conn.execute(lock, {"key": f"subscriptions:{org_id}:{agent}"})
            count = await conn.scalar(
                select(func.count()).where(
                    AgentSubscriptionRow.org_id == org_id, AgentSubscriptionRow.agent == agent
                )
            )
            if int(count or 0) >= MAX_SUBSCRIPTIONS:
                raise SubscriptionLimitError(
                    f"The agent {agent!r} has {MAX_SUBSCRIPTIONS} subscriptions, the most "
                    "it may have; delete one first"
                )
            await conn.execute(insert(AgentSubscriptionRow).values(**_values(record)))
        self.forget(org_id, agent)
        return record

    async def for_agent(
        self, org_id: str, agent: str, *, max_age_s: float = 0.0
    ) -> list[SubscriptionRecord]:
        """The agent's subscriptions, oldest first; with ``max_age_s``, as this process
        read them at most that long ago (another process's change shows after it)."""
        key = (org_id, agent)
        now = time.monotonic()
        if max_age_s > 0 and (kept := self._read.get(key)) and now - kept[0] <= max_age_s:
            return list(kept[1])
        query = (
            select(*_COLUMNS)
            .where(AgentSubscriptionRow.org_id == org_id, AgentSubscriptionRow.agent == agent)
            .order_by(AgentSubscriptionRow.created_at, AgentSubscriptionRow.id)
        )
        async with self._db.read() as conn:
            found = [SubscriptionRecord(**row._asdict()) for row in await conn.execute(query)]
        if len(self._read) >= _KEPT:
            self._read.clear()
        self._read[key] = (now, found)
        return list(found)

    def forget(self, org_id: str, agent: str) -> None:
        """Read ``agent``'s list afresh next time (it changed here)."""
        self._read.pop((org_id, agent), None)

    async def delete(self, org_id: str, agent: str, subscription_id: str) -> bool:
        """Delete one of the agent's subscriptions; whether it had it."""
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(AgentSubscriptionRow)
                .where(
                    AgentSubscriptionRow.org_id == org_id,
                    AgentSubscriptionRow.agent == agent,
                    AgentSubscriptionRow.id == subscription_id,
                )
                .returning(AgentSubscriptionRow.id)
            )
            deleted = result.first() is not None
        self.forget(org_id, agent)
        return deleted

    async def matching(
        self, org_id: str, *, resource_type: str, resource_id: str, event_type: str
    ) -> list[SubscriptionRecord]:
        """The subscriptions an event of ``event_type`` on the resource matches: those of
        its type with no id or its id, whose event types name it (or are empty)."""
        query = select(*_COLUMNS).where(
            AgentSubscriptionRow.org_id == org_id,
            AgentSubscriptionRow.resource_type == resource_type,
            or_(
                AgentSubscriptionRow.resource_id.is_(None),
                AgentSubscriptionRow.resource_id == resource_id,
            ),
        )
        async with self._db.read() as conn:
            found = [SubscriptionRecord(**row._asdict()) for row in await conn.execute(query)]
        return [sub for sub in found if sub.matches(event_type)]


def _values(record: SubscriptionRecord) -> dict[str, object]:
    return {column.name: getattr(record, column.name) for column in _COLUMNS}


async def drop_subscriptions(conn: AsyncConnection, org_id: str, agent: str) -> None:
    """Delete the agent's subscriptions in the caller's transaction (its deletion's)."""
    await conn.execute(
        delete(AgentSubscriptionRow).where(
            AgentSubscriptionRow.org_id == org_id, AgentSubscriptionRow.agent == agent
        )
    )
