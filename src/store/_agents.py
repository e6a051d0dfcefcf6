"""Agent profiles per org, versioned: every change is a new version, none is rewritten.

A profile is stored as JSON (its shape and rules are the ``agents`` package's); the store
keeps the versions, which one is current, and whether the handle was deleted. Turns and
runs record the version they ran with, so a version stays readable after the profile
moves on or is deleted. Version numbers are never reused, even for a handle deleted and
created again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._hooks import AgentHookRow
from store._models import Base, JSONData, utcnow
from store._subscriptions import Subscriptions, drop_subscriptions


class AgentRow(Base):
    """A handle in an org: its current version, or deleted."""

    __tablename__ = "agents"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    handle: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    # Paused outside the versioned profile (an auto-pause at the cost limit is no version).
    paused_at: Mapped[datetime | None] = mapped_column(default=None)
    paused_reason: Mapped[str | None] = mapped_column(String(32), default=None)
    # The current version's ``parent`` (a user id), kept in step on every save, so the
    # queries of who sees what (runs, approvals, notices, webhooks) filter on a column.
    parent: Mapped[str | None] = mapped_column(String(128), default=None)


class AgentVersionRow(Base):
    """One version of a profile, as it was saved."""

    __tablename__ = "agent_versions"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    handle: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile: Mapped[dict[str, Any]] = mapped_column(JSONData)
    saved_by: Mapped[str] = mapped_column(String(128))
    saved_at: Mapped[datetime] = mapped_column(default=utcnow)


class AgentExistsError(Exception):
    """A create named a handle the org already uses."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRecord:
    org_id: str
    handle: str
    version: int
    profile: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    paused_at: datetime | None = None
    paused_reason: str | None = None
    parent: str | None = None


_CURRENT = (
    AgentRow.org_id,
    AgentRow.handle,
    AgentRow.version,
    AgentVersionRow.profile,
    AgentRow.created_at,
    AgentRow.updated_at,
    AgentRow.paused_at,
    AgentRow.paused_reason,
    AgentRow.parent,
)


def _current() -> Any:
    return (
        select(*_CURRENT)
        .join(
            AgentVersionRow,
            (AgentVersionRow.org_id == AgentRow.org_id)
            & (AgentVersionRow.handle == AgentRow.handle)
            & (AgentVersionRow.version == AgentRow.version),
        )
        .where(AgentRow.deleted_at.is_(None))
    )


_GET = _current().where(
    AgentRow.org_id == bindparam("org_id"), AgentRow.handle == bindparam("handle")
)
"""``Agents.get``'s query, built once: every turn runs it, and a statement memoises its
cache key (building and keying the join again cost more than running it)."""


class Agents:
    """Repository of the ``agents`` and ``agent_versions`` tables."""

    def __init__(self, db: Database, subscriptions: Subscriptions) -> None:
        self._db = db
        self._subscriptions = subscriptions

    async def everywhere(self) -> list[AgentRecord]:
        """Every org's current agents (the schedule ticker reads them each poll)."""
        async with self._db.read() as conn:
            return [AgentRecord(**row._asdict()) for row in await conn.execute(_current())]

    async def list(self, org_id: str) -> list[AgentRecord]:
        """The org's profiles (current versions), by handle."""
        query = _current().where(AgentRow.org_id == org_id).order_by(AgentRow.handle)
        async with self._db.read() as conn:
            return [AgentRecord(**row._asdict()) for row in await conn.execute(query)]

    async def get(self, org_id: str, handle: str) -> AgentRecord | None:
        """The current version of ``handle``, unless it does not exist or was deleted."""
        params = {"org_id": org_id, "handle": handle}
        row = await self._db.run_read(lambda conn: conn.execute(_GET, params).first())  # every turn
        return AgentRecord(**row._asdict()) if row else None

    async def parented(self, org_id: str, user_id: str) -> tuple[str, ...]:
        """The handles of the org's agents whose parent is ``user_id``."""
        query = (
            select(AgentRow.handle)
            .where(
                AgentRow.org_id == org_id,
                AgentRow.parent == user_id,
                AgentRow.deleted_at.is_(None),
            )
            .order_by(AgentRow.handle)
        )
        async with self._db.read() as conn:
            return tuple((await conn.scalars(query)).all())

    async def version(self, org_id: str, handle: str, version: int) -> dict[str, Any] | None:
        """The profile as saved in ``version`` (kept after later versions and deletion)."""
        query = select(AgentVersionRow.profile).where(
            AgentVersionRow.org_id == org_id,
            AgentVersionRow.handle == handle,
            AgentVersionRow.version == version,
        )
        async with self._db.read() as conn:
            profile: dict[str, Any] | None = await conn.scalar(query)
        return profile

    async def save(
        self, org_id: str, handle: str, profile: dict[str, Any], *, by: str, create: bool
    ) -> AgentRecord:
        """Save ``profile`` as the handle's next version. ``create``: only if the handle is
        free (``AgentExistsError`` otherwise); else create or update it."""
        now = utcnow()
        async with self._db.write() as conn:
            row = (
                await conn.execute(
                    select(
                        AgentRow.deleted_at,
                        AgentRow.created_at,
                        AgentRow.paused_at,
                        AgentRow.paused_reason,
                    ).where(AgentRow.org_id == org_id, AgentRow.handle == handle)
                )
            ).first()
            if create and row is not None and row.deleted_at is None:
                raise AgentExistsError(handle)
            version = await _next_version(conn, org_id, handle)
            await conn.execute(
                insert(AgentVersionRow).values(
                    org_id=org_id, handle=handle, version=version, profile=profile,
                    saved_by=by, saved_at=now,
                )
            )  # fmt: skip
            created = now if row is None or row.deleted_at is not None else row.created_at
            paused = (
                (row.paused_at, row.paused_reason)  # a pause outlives a profile change
                if row is not None and row.deleted_at is None
                else (None, None)
            )
            if row is None or row.deleted_at is not None:  # a new agent: no old webhook
                await _drop_hook(conn, org_id, handle)
            parent = profile.get("parent")
            if row is None:
                await conn.execute(
                    insert(AgentRow).values(
                        org_id=org_id, handle=handle, version=version, created_at=created,
                        updated_at=now, deleted_at=None, parent=parent,
                    )
                )  # fmt: skip
            else:
                await conn.execute(
                    update(AgentRow)
                    .where(AgentRow.org_id == org_id, AgentRow.handle == handle)
                    .values(
                        version=version,
                        created_at=created,
                        updated_at=now,
                        deleted_at=None,
                        paused_at=paused[0],
                        paused_reason=paused[1],
                        parent=parent,
                    )
                )
        return AgentRecord(
            org_id=org_id, handle=handle, version=version, profile=profile,
            created_at=created, updated_at=now, paused_at=paused[0], paused_reason=paused[1],
            parent=parent,
        )  # fmt: skip

    async def delete(self, org_id: str, handle: str) -> bool:
        """Delete ``handle`` (its versions stay readable), its inbound webhook and its
        subscriptions, so a handle created again neither takes the old secret's deliveries
        nor watches what the old agent watched; whether there was one."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(AgentRow)
                .where(
                    AgentRow.org_id == org_id,
                    AgentRow.handle == handle,
                    AgentRow.deleted_at.is_(None),
                )
                .values(deleted_at=utcnow())
                .returning(AgentRow.handle)
            )
            deleted = result.first() is not None
            if deleted:
                await _drop_hook(conn, org_id, handle)
                await drop_subscriptions(conn, org_id, handle)
        self._subscriptions.forget(org_id, handle)
        return deleted


async def _drop_hook(conn: AsyncConnection, org_id: str, handle: str) -> None:
    """Remove the agent's webhook secret. Creating a handle drops one too: a row left by
    a deletion from before deletions dropped them must not come back to life."""
    await conn.execute(
        delete(AgentHookRow).where(AgentHookRow.org_id == org_id, AgentHookRow.handle == handle)
    )


async def _next_version(conn: AsyncConnection, org_id: str, handle: str) -> int:
    latest = await conn.scalar(
        select(func.max(AgentVersionRow.version)).where(
            AgentVersionRow.org_id == org_id, AgentVersionRow.handle == handle
        )
    )
    return int(latest or 0) + 1
