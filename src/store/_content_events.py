"""The host app's content events: what happened in it (a note created, a comment), as it
reported them, kept in the org's log with what they started (``outcome``).

An event is claimed by its primary key (org, the host's id) before it is routed, so two
deliveries of one event, however close together and on whichever worker, route it once:
the loser reads the winner's outcome. The reads routing needs live here too: which agents'
runs created a resource (their audit rows, through the tool call, its turn and its run,
and the ``created`` events agents reported) and how many hops a run is from a person.
An agent's cool-down on a resource is a row of its own (``trigger_cooldowns``), taken by
one conditional upsert, so two events on one resource at once start the agent once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Index, Integer, String, Text, delete, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import AuditLogRow, Base, JSONData, ToolExecutionRow, utcnow
from store._runs import RunRecord, RunRow, _records

ActorType = str
"""``user`` or ``agent`` (the HTTP body's literal)."""


class ContentEventRow(Base):
    __tablename__ = "content_events"
    __table_args__ = (
        Index("ix_content_events_resource", "org_id", "resource_type", "resource_id"),
    )

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    type: Mapped[str] = mapped_column(String(40))
    resource_type: Mapped[str] = mapped_column(String(40))
    resource_id: Mapped[str] = mapped_column(String(200))
    title: Mapped[str | None] = mapped_column(String(200), default=None)
    actor_type: Mapped[str] = mapped_column(String(8))
    actor_id: Mapped[str] = mapped_column(String(200))
    actor_run_id: Mapped[str | None] = mapped_column(String(40), default=None)
    text: Mapped[str | None] = mapped_column(Text, default=None)
    mentions: Mapped[list[str] | None] = mapped_column(JSONData, default=None)
    reply_to_type: Mapped[str | None] = mapped_column(String(40), default=None)
    reply_to_id: Mapped[str | None] = mapped_column(String(200), default=None)
    at: Mapped[datetime]
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    hops: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)


class TriggerCooldownRow(Base):
    """An agent's cool-down on a resource: the event that started it, and its end."""

    __tablename__ = "trigger_cooldowns"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    resource_type: Mapped[str] = mapped_column(String(40), primary_key=True)
    resource_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(200))
    until: Mapped[datetime]


@dataclass(frozen=True, slots=True)
class Cooldown:
    """Whose cool-down on what, for which event."""

    org_id: str
    agent: str
    resource_type: str
    resource_id: str
    event_id: str

    def key(self) -> tuple[ColumnElement[bool], ...]:
        row = TriggerCooldownRow
        return (
            row.org_id == self.org_id, row.agent == self.agent,
            row.resource_type == self.resource_type, row.resource_id == self.resource_id,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentEventRecord:
    """A content event as the host reported it, with the hops Bosun counted for it."""

    org_id: str
    id: str
    type: str
    resource_type: str
    resource_id: str
    title: str | None
    actor_type: ActorType
    actor_id: str
    actor_run_id: str | None
    text: str | None
    mentions: list[str] | None
    reply_to_type: str | None
    reply_to_id: str | None
    at: datetime
    hops: int = 0


class ContentEvents:
    """Repository of the ``content_events`` table, and the reads that route an event."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, event: ContentEventRecord) -> bool:
        """Store ``event`` unless its id is stored already; whether this call stored it
        (the primary key decides, so concurrent deliveries claim it once)."""
        query = (
            self._db.insert(ContentEventRow)
            .values(**asdict(event), received_at=utcnow())
            .on_conflict_do_nothing(index_elements=["org_id", "id"])
            .returning(ContentEventRow.id)
        )
        async with self._db.write() as conn:
            return (await conn.execute(query)).first() is not None

    async def release(self, org_id: str, event_id: str) -> None:
        """Forget a claimed event whose routing failed, so its retry routes it again."""
        async with self._db.write() as conn:
            await conn.execute(
                delete(ContentEventRow).where(
                    ContentEventRow.org_id == org_id, ContentEventRow.id == event_id
                )
            )

    async def settle(self, org_id: str, event_id: str, outcome: dict[str, Any]) -> None:
        """Record what the event started (and skipped): a redelivery answers with it."""
        async with self._db.write() as conn:
            await conn.execute(
                update(ContentEventRow)
                .where(ContentEventRow.org_id == org_id, ContentEventRow.id == event_id)
                .values(outcome=outcome)
            )

    async def outcome(self, org_id: str, event_id: str) -> dict[str, Any] | None:
        """The stored outcome of a routed event (``None`` while it is being routed)."""
        query = select(ContentEventRow.outcome).where(
            ContentEventRow.org_id == org_id, ContentEventRow.id == event_id
        )
        async with self._db.read() as conn:
            found: dict[str, Any] | None = await conn.scalar(query)
        return found

    async def runs_of(self, org_id: str, event_id: str) -> list[RunRecord]:
        """The runs the event started, oldest first."""
        query = (
            _records()
            .where(RunRow.org_id == org_id, RunRow.trigger_event_id == event_id)
            .order_by(RunRow.created_at, RunRow.id)
        )
        async with self._db.read() as conn:
            return [RunRecord(**row._asdict()) for row in await conn.execute(query)]

    async def creators(self, org_id: str, resource_type: str, resource_id: str) -> set[str]:
        """The agents whose runs created (or changed) the resource: an agent's audit row
        on ``type:id``, through its tool call and turn to its run (the row's user is the
        run's, as tool use ids repeat across turns), and the ``created`` events whose
        actor was an agent (hosts whose tools write no audit row)."""
        target = f"{resource_type}:{resource_id}"
        by_audit = (
            select(RunRow.agent)
            .select_from(AuditLogRow)
            .join(ToolExecutionRow, ToolExecutionRow.tool_use_id == AuditLogRow.tool_use_id)
            .join(RunRow, RunRow.turn_id == ToolExecutionRow.turn_id)
            .where(
                AuditLogRow.org_id == org_id,
                AuditLogRow.target == target,
                AuditLogRow.agent.is_(True),
                RunRow.org_id == org_id,
                RunRow.user_id == AuditLogRow.user_id,
                ToolExecutionRow.created_at <= AuditLogRow.created_at,
            )
        )
        by_event = select(ContentEventRow.actor_id).where(
            ContentEventRow.org_id == org_id,
            ContentEventRow.resource_type == resource_type,
            ContentEventRow.resource_id == resource_id,
            ContentEventRow.type == "created",
            ContentEventRow.actor_type == "agent",
        )
        async with self._db.read() as conn:
            found = {str(agent) for agent in await conn.scalars(by_audit)}
            found |= {str(agent) for agent in await conn.scalars(by_event)}
        return found

    async def hops_of(self, org_id: str, agent: str, run_id: str | None) -> int:
        """How many hops from a person an event by ``agent`` is: those of its run
        ``run_id`` when that is one of the agent's runs in the org, else those of the
        agent's latest run (0 with none)."""
        query = select(RunRow.hops).where(RunRow.org_id == org_id, RunRow.agent == agent)
        async with self._db.read() as conn:
            if run_id is not None:
                found = await conn.scalar(query.where(RunRow.id == run_id))
                if found is not None:
                    return int(found)
            latest = await conn.scalar(query.order_by(RunRow.created_at.desc()).limit(1))
        return int(latest or 0)

    async def take_cooldown(self, cooldown: Cooldown, seconds: int) -> bool:
        """Start ``cooldown`` for ``seconds`` unless another event's is still on: whether
        its event may start the agent. One statement (an upsert that overwrites only an
        ended cool-down, or this event's own from an earlier try), so of two events on
        the resource at once, on any workers, one takes it."""
        now = utcnow()
        values = {**asdict(cooldown), "until": now + timedelta(seconds=seconds)}
        insert = self._db.insert(TriggerCooldownRow).values(**values)
        query = insert.on_conflict_do_update(
            index_elements=["org_id", "agent", "resource_type", "resource_id"],
            set_={"event_id": insert.excluded.event_id, "until": insert.excluded.until},
            where=or_(
                TriggerCooldownRow.until <= now,
                TriggerCooldownRow.event_id == cooldown.event_id,
            ),
        ).returning(TriggerCooldownRow.agent)
        async with self._db.write() as conn:
            return (await conn.execute(query)).first() is not None

    async def give_back_cooldown(self, cooldown: Cooldown) -> None:
        """End a cool-down its event took but started no run with (a pause, the rate
        limit, a failure): the next event on the resource may start the agent."""
        async with self._db.write() as conn:
            await conn.execute(
                delete(TriggerCooldownRow).where(
                    *cooldown.key(), TriggerCooldownRow.event_id == cooldown.event_id
                )
            )
