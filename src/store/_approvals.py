"""Approvals: tool calls waiting for a human, across every session of an org (the inbox).

A row is one call ``(turn_id, tool_use_id)`` that needs a person's yes before it runs, in
one of two modes. ``suspend``: the turn waits (a chat's confirmation); the row mirrors the
call's execution row and is answered through the same path as ``/confirm``. ``defer``:
the turn went on with "queued for approval"; an approval runs the recorded input in the
background, once (``claim`` is a conditional update), and its outcome lands on the row.

Every decision is one conditional update on a ``pending`` row, so of two answers (or an
answer and the expiry sweep) exactly one wins, on any number of workers. An approved
deferred call claimed long ago with no outcome lost its worker mid-run: ``interrupt``
marks it ``interrupted`` for a person to look at (it is never run again).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Index,
    String,
    Text,
    UniqueConstraint,
    and_,
    func,
    select,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column

from store._agents import AgentRow
from store._db import Database
from store._models import Base, JSONData, SessionRow, utcnow
from store._runs import RunRow

ApprovalMode = Literal["suspend", "defer"]
ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "superseded", "interrupted"]
Decision = Literal["approved", "rejected"]
DEFAULT_AGENT = "default"


def new_approval_id() -> str:
    return f"apr_{secrets.token_hex(12)}"


class ApprovalRow(Base):
    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("turn_id", "tool_use_id", name="uq_approvals_call"),
        Index("ix_approvals_org_status_requested", "org_id", "status", "requested_at"),
        Index("ix_approvals_status_expires", "status", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    agent: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str] = mapped_column(String(36))
    turn_id: Mapped[str] = mapped_column(String(36))
    tool_use_id: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(128))
    input: Mapped[dict[str, Any]] = mapped_column(JSONData)
    summary: Mapped[str] = mapped_column(Text, default="")
    mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    user_id: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    resolved_at: Mapped[datetime | None] = mapped_column(default=None)
    resolved_by: Mapped[str | None] = mapped_column(String(128), default=None)
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """One approval as stored, with the run its session belongs to (if any)."""

    id: str
    org_id: str
    agent: str
    session_id: str
    turn_id: str
    tool_use_id: str
    tool: str
    input: dict[str, Any]
    summary: str
    mode: ApprovalMode
    status: ApprovalStatus
    user_id: str
    role: str
    requested_at: datetime
    expires_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    reason: str | None
    claimed_at: datetime | None
    outcome: dict[str, Any] | None
    finished_at: datetime | None
    run_id: str | None = None

    def expired_at(self, now: datetime) -> bool:
        """Whether a pending approval is past its deadline (the sweep may not have run)."""
        return self.status == "pending" and self.expires_at <= now


def _records() -> Any:
    return select(*ApprovalRow.__table__.columns, RunRow.id.label("run_id")).outerjoin(
        RunRow, RunRow.turn_id == ApprovalRow.turn_id
    )


def _record(row: Any) -> ApprovalRecord:
    return ApprovalRecord(**row._asdict())


def _agent_of(session_id: str) -> Any:
    agent = select(SessionRow.agent).where(SessionRow.id == session_id).scalar_subquery()
    return func.coalesce(agent, DEFAULT_AGENT)


def _parented(query: Any, parent: str | None) -> Any:
    """``query`` narrowed to the approvals of agents whose parent is ``parent`` (now)."""
    if parent is None:
        return query
    return query.join(
        AgentRow, (AgentRow.org_id == ApprovalRow.org_id) & (AgentRow.handle == ApprovalRow.agent)
    ).where(AgentRow.parent == parent, AgentRow.deleted_at.is_(None))


def _pending(approval_id: str) -> ColumnElement[bool]:
    return and_(ApprovalRow.id == approval_id, ApprovalRow.status == "pending")


class Approvals:
    """Repository of the ``approvals`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def request(self, *, ttl_s: float, **values: Any) -> tuple[ApprovalRecord, bool]:
        """Record that the call in ``values`` waits for a human (expiring ``ttl_s`` from
        now), unless it is recorded already (a resumed or taken-over turn asks again):
        the approval, and whether it is new."""
        now = utcnow()
        statement = (
            self._db.insert(ApprovalRow)
            .values(
                id=new_approval_id(),
                agent=_agent_of(values["session_id"]),  # whose call: the session's agent
                status="pending",
                requested_at=now,
                expires_at=now + timedelta(seconds=ttl_s),
                **values,
            )
            .on_conflict_do_nothing()
            .returning(ApprovalRow.id)
        )
        call = and_(
            ApprovalRow.turn_id == values["turn_id"],
            ApprovalRow.tool_use_id == values["tool_use_id"],
        )
        async with self._db.write() as conn:
            created = (await conn.execute(statement)).first() is not None

            row = (await conn.execute(_records().where(call))).one()
        return _record(row), created

    async def get(self, org_id: str, approval_id: str) -> ApprovalRecord | None:
        query = _records().where(ApprovalRow.org_id == org_id, ApprovalRow.id == approval_id)
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return _record(row) if row else None

    async def for_call(self, turn_id: str, tool_use_id: str) -> ApprovalRecord | None:
        call = and_(ApprovalRow.turn_id == turn_id, ApprovalRow.tool_use_id == tool_use_id)
        async with self._db.read() as conn:
            row = (await conn.execute(_records().where(call))).first()
        return _record(row) if row else None

    async def page(
        self,
        org_id: str,
        *,
        status: ApprovalStatus | None,
        agent: str | None,
        limit: int,
        before: tuple[datetime, str] | None = None,
        parent: str | None = None,
    ) -> list[ApprovalRecord]:
        """The org's approvals, newest first; ``before``: after this (requested_at, id);
        ``parent``: only those of agents that user parents."""
        query = _parented(_records().where(ApprovalRow.org_id == org_id), parent)
        if status is not None:
            query = query.where(ApprovalRow.status == status)
        if agent is not None:
            query = query.where(ApprovalRow.agent == agent)
        if before is not None:
            at, last = before
            query = query.where(
                (ApprovalRow.requested_at < at)
                | and_(ApprovalRow.requested_at == at, ApprovalRow.id > last)
            )
        query = query.order_by(ApprovalRow.requested_at.desc(), ApprovalRow.id).limit(limit)
        async with self._db.read() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def counts(self, org_id: str, *, parent: str | None = None) -> dict[str, int]:
        """How many of the org's approvals (``parent``: of agents that user parents) are
        in each status."""
        query = _parented(
            select(ApprovalRow.status, func.count()).where(ApprovalRow.org_id == org_id), parent
        ).group_by(ApprovalRow.status)
        async with self._db.read() as conn:
            return {status: count for status, count in await conn.execute(query)}

    async def decide(
        self, approval_id: str, decision: Decision, *, by: str, reason: str | None
    ) -> bool:
        """Record a human's answer on a pending approval not yet past its deadline; whether
        this answer won (a second one, or one after the expiry, does not)."""
        now = utcnow()
        async with self._db.write() as conn:
            won = await conn.execute(
                update(ApprovalRow)
                .where(_pending(approval_id), ApprovalRow.expires_at > now)
                .values(status=decision, resolved_at=now, resolved_by=by, reason=reason)
                .returning(ApprovalRow.id)
            )
            return won.first() is not None

    async def expire(self, approval_id: str) -> bool:
        """End a pending approval past its deadline as ``expired``; whether this call did."""
        now = utcnow()
        async with self._db.write() as conn:
            won = await conn.execute(
                update(ApprovalRow)
                .where(_pending(approval_id), ApprovalRow.expires_at <= now)
                .values(status="expired", resolved_at=now)
                .returning(ApprovalRow.id)
            )
            return won.first() is not None

    async def due(self, limit: int = 100) -> list[ApprovalRecord]:
        """Pending approvals past their deadline (for the expiry sweep)."""
        query = (
            _records()
            .where(ApprovalRow.status == "pending", ApprovalRow.expires_at <= utcnow())
            .order_by(ApprovalRow.expires_at)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def unrun(self, *, older_than_s: float, limit: int = 100) -> list[ApprovalRecord]:
        """Approved deferred actions nobody claimed for ``older_than_s`` (their worker died
        between the answer and the run): the sweep runs them."""
        since = utcnow() - timedelta(seconds=older_than_s)
        query = (
            _records()
            .where(
                ApprovalRow.mode == "defer",
                ApprovalRow.status == "approved",
                ApprovalRow.claimed_at.is_(None),
                ApprovalRow.resolved_at < since,
            )
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def claim(self, approval_id: str) -> bool:
        """Take an approved deferred action to run it: exactly one caller ever wins."""
        async with self._db.write() as conn:
            won = await conn.execute(
                update(ApprovalRow)
                .where(
                    ApprovalRow.id == approval_id,
                    ApprovalRow.status == "approved",
                    ApprovalRow.claimed_at.is_(None),
                )
                .values(claimed_at=utcnow())
                .returning(ApprovalRow.id)
            )
            return won.first() is not None

    async def interrupt(self, *, older_than_s: float, limit: int = 100) -> list[ApprovalRecord]:
        """Mark ``interrupted`` the approved deferred actions claimed more than
        ``older_than_s`` ago that have no outcome: their worker died (or hung) mid-run.
        One conditional update per row, so on any number of workers each is marked once;
        the approvals this call marked."""
        since = utcnow() - timedelta(seconds=older_than_s)
        stale = (
            select(ApprovalRow.id)
            .where(
                ApprovalRow.mode == "defer",
                ApprovalRow.status == "approved",
                ApprovalRow.claimed_at < since,
                ApprovalRow.finished_at.is_(None),
            )
            .limit(limit)
        )
        async with self._db.write() as conn:
            ids = list((await conn.execute(stale)).scalars())
            if not ids:
                return []
            won = await conn.execute(
                update(ApprovalRow)
                .where(
                    ApprovalRow.id.in_(ids),
                    ApprovalRow.status == "approved",
                    ApprovalRow.finished_at.is_(None),
                )
                .values(status="interrupted")
                .returning(ApprovalRow.id)
            )
            marked = list(won.scalars())
            rows = await conn.execute(_records().where(ApprovalRow.id.in_(marked)))
            return [_record(row) for row in rows]

    async def finish(self, approval_id: str, outcome: dict[str, Any]) -> None:
        """Record how an approved action ran (one marked ``interrupted`` that finished
        after all is ``approved`` again: its outcome is known)."""
        async with self._db.write() as conn:
            await conn.execute(
                update(ApprovalRow)
                .where(ApprovalRow.id == approval_id)
                .values(outcome=outcome, finished_at=utcnow(), status="approved")
            )
