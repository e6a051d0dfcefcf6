"""The org notification log: what an org's owners and staff are told, in order.

A notice is appended once (``publish``) and read by id (``after``): the id is the org
event stream's ``Last-Event-ID``. The same transaction queues one delivery per enabled
outbound webhook of the org that wants the notice's type, so a notice and its deliveries
exist together or not at all, and publishing never waits on a receiver. Readers are woken
like session log readers: ``LogNotifier`` in this process, ``NOTIFY`` from other workers
on PostgreSQL (``store._notify``), under the key ``notice_key(org_id)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import Index, String, func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapped, mapped_column

from store import _hot_pg as hot_pg
from store._agents import AgentRow
from store._appends import LogNotifier
from store._appends import _notify_others as pg_notify
from store._db import Database
from store._models import Base, BigId, utcnow
from store._webhook_rows import DELIVERIES_KEY, enqueue_deliveries

NoticeType = Literal[
    "approval_requested", "approval_resolved", "run_finished", "cost_alert", "agent_paused"
]
NOTICE_TYPES: tuple[NoticeType, ...] = get_args(NoticeType)


def notice_key(org_id: str) -> str:
    """The notifier key of an org's notice readers (session ids are UUIDs: no clash)."""
    return f"notices:{org_id}"


class NoticeRow(Base):
    __tablename__ = "notices"
    __table_args__ = (
        Index("ix_notices_org_id", "org_id", "id"),
        Index("ix_notices_org_agent", "org_id", "agent", "id"),  # a parent's notices
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    org_id: Mapped[str] = mapped_column(String(128))
    type: Mapped[str] = mapped_column(String(40))
    agent: Mapped[str | None] = mapped_column(String(64), default=None)
    """The agent the notice is about (its ``data["agent"]``): whose parent is told."""
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True)
class NoticeRecord:
    id: int
    org_id: str
    type: str
    data: dict[str, Any]
    created_at: datetime


class Notices:
    """Repository of the ``notices`` table."""

    def __init__(self, db: Database, notifier: LogNotifier) -> None:
        self._db = db
        self.notifier = notifier

    async def publish(self, org_id: str, type: NoticeType, data: dict[str, Any]) -> int:
        """Append a notice and queue its webhook deliveries, in one transaction; wake the
        org's stream readers (and the delivery workers). Returns the notice id."""
        assert type in NOTICE_TYPES, f"unknown notice type {type!r}"
        about = data.get("agent")
        agent = about[:64] if isinstance(about, str) else None
        postgres = self._db.dialect == "postgresql"

        def write(conn: Connection) -> tuple[int, int]:
            if postgres:  # an org's ids commit in order, so no reader's cursor skips one
                lock = func.pg_advisory_xact_lock(func.hashtext(notice_key(org_id)))
                conn.execute(select(lock))
            now = utcnow()
            row = {"org_id": org_id, "type": type, "agent": agent, "data": data, "created_at": now}
            notice_id = int(
                conn.execute(insert(NoticeRow).values(**row).returning(NoticeRow.id)).scalar_one()
            )
            queued = enqueue_deliveries(conn, org_id, notice_id, type, now, agent=agent)
            if postgres:
                pg_notify(conn, notice_key(org_id))
                if queued:
                    pg_notify(conn, DELIVERIES_KEY)
            return notice_id, queued

        async def write_pg(pg: Any) -> tuple[int, int]:  # PostgreSQL's writer: one statement
            return await hot_pg.publish_notice(
                pg, key=notice_key(org_id), org_id=org_id, type=type, data=data,
                deliveries_key=DELIVERIES_KEY, now=utcnow(), agent=agent,
            )  # fmt: skip

        notice_id, queued = await self._db.run_write(write, pg=write_pg)
        self.notifier.notify(notice_key(org_id))
        if queued:
            self.notifier.notify(DELIVERIES_KEY)
        return notice_id

    async def after(
        self, org_id: str, after_id: int, limit: int = 100, *, parent: str | None = None
    ) -> list[NoticeRecord]:
        """The org's notices with ``id > after_id``, oldest first; ``parent``: only those
        about an agent whose parent that user is (now), filtered here so a page stays
        full and a cursor never skips one."""
        query = (
            select(
                NoticeRow.id, NoticeRow.org_id, NoticeRow.type, NoticeRow.data, NoticeRow.created_at
            )
            .where(NoticeRow.org_id == org_id, NoticeRow.id > after_id)
            .order_by(NoticeRow.id)
            .limit(limit)
        )
        if parent is not None:
            query = query.join(
                AgentRow,
                (AgentRow.org_id == NoticeRow.org_id) & (AgentRow.handle == NoticeRow.agent),
            ).where(AgentRow.parent == parent, AgentRow.deleted_at.is_(None))
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [NoticeRecord(**row._asdict()) for row in rows]

    async def last_id(self, org_id: str) -> int:
        """The org's newest notice id (0: none), where a stream without a cursor starts."""
        query = select(NoticeRow.id).where(NoticeRow.org_id == org_id)
        async with self._db.read() as conn:
            value = await conn.scalar(query.order_by(NoticeRow.id.desc()).limit(1))
        return int(value or 0)
