"""The audit log: who changed what in an org, the agent or a human. Append-only.

A change records its row in the same transaction as the change itself (``record`` takes
the caller's connection), so the two commit together or not at all. ``tool_use_id``
links a row to the tool execution that wrote it (and an undo's row to the original's);
rows outlive their executions (``bosun prune`` keeps the audit log).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from store._db import Database
from store._models import AuditLogRow, utcnow

_COLUMNS = (
    AuditLogRow.id,
    AuditLogRow.org_id,
    AuditLogRow.user_id,
    AuditLogRow.agent,
    AuditLogRow.action,
    AuditLogRow.target,
    AuditLogRow.detail,
    AuditLogRow.tool_use_id,
    AuditLogRow.created_at,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One audit row as stored; ``agent`` tells the agent's changes from a human's."""

    id: str
    org_id: str
    user_id: str
    agent: bool
    action: str
    target: str
    detail: dict[str, Any]
    tool_use_id: str | None
    created_at: datetime


class AuditLog:
    """Repository of the ``audit_log`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(
        self,
        conn: AsyncConnection,
        *,
        org_id: str,
        user_id: str,
        action: str,
        target: str,
        detail: dict[str, Any],
        agent: bool,
        tool_use_id: str | None = None,
    ) -> str:
        """Append a row in the caller's transaction ``conn``, so the change it records and
        the row commit together; returns the row's id."""
        audit_id = f"aud_{uuid.uuid4().hex[:16]}"
        await conn.execute(
            insert(AuditLogRow).values(
                id=audit_id,
                org_id=org_id,
                user_id=user_id,
                agent=agent,
                action=action,
                target=target,
                detail=detail,
                tool_use_id=tool_use_id,
                created_at=utcnow(),
            )
        )
        return audit_id

    async def recent(
        self, org_id: str, *, since: datetime, until: datetime, limit: int
    ) -> list[AuditEntry]:
        """The org's rows written from ``since`` to ``until`` (both included), newest
        first, at most ``limit`` of them."""
        query = (
            select(*_COLUMNS)
            .where(AuditLogRow.org_id == org_id, AuditLogRow.created_at.between(since, until))
            .order_by(AuditLogRow.created_at.desc(), AuditLogRow.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [AuditEntry(**row._asdict()) for row in rows]

    async def for_calls(
        self, org_id: str, tool_use_ids: Sequence[str], *, since: datetime, until: datetime
    ) -> list[AuditEntry]:
        """The org's rows written by the calls ``tool_use_ids`` between ``since`` and
        ``until`` (a turn's lifetime: ids are only unique within a turn), oldest first."""
        if not tool_use_ids:
            return []
        query = (
            select(*_COLUMNS)
            .where(
                AuditLogRow.org_id == org_id,
                AuditLogRow.tool_use_id.in_(list(tool_use_ids)),
                AuditLogRow.created_at.between(since, until),
            )
            .order_by(AuditLogRow.created_at, AuditLogRow.id)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [AuditEntry(**row._asdict()) for row in rows]
