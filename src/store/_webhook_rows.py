"""Outbound webhook tables: an org's endpoints, one delivery per (notice, endpoint), and
every attempt at it. Kept apart from the repositories so that ``store._notices`` can queue
deliveries in its own transaction without importing the webhook repository."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapped, mapped_column

from store._agents import AgentRow
from store._models import Base, BigId, JSONData, utcnow

DELIVERIES_KEY = "webhook-deliveries"
"""The notifier key the delivery workers wait on (woken when a delivery is queued)."""


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class WebhookRow(Base):
    __tablename__ = "webhooks"
    __table_args__ = (Index("ix_webhooks_org", "org_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    url: Mapped[str] = mapped_column(Text)
    event_types: Mapped[list[str]] = mapped_column(JSONData)  # empty: every type
    secret_enc: Mapped[str] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A member's own endpoint: only notices about agents they parent. None: the org's.
    user_id: Mapped[str | None] = mapped_column(String(128), default=None)
    # the circuit breaker: failed attempts in a row, and until when deliveries wait
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    circuit_open_until: Mapped[datetime | None] = mapped_column(default=None)


class DeliveryRow(Base):
    """``pending -> delivered | failed``; ``next_attempt_at`` is when it is due (a claimed
    one's is pushed past its attempt, so no other worker takes it meanwhile)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_webhook", "webhook_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # the webhook-id header
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    org_id: Mapped[str] = mapped_column(String(128))
    notice_id: Mapped[int] = mapped_column(ForeignKey("notices.id", ondelete="CASCADE"))
    notice_type: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    claim: Mapped[str | None] = mapped_column(String(40), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class AttemptRow(Base):
    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery", "delivery_id", "number"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column(Integer)
    attempted_at: Mapped[datetime] = mapped_column(default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    error: Mapped[str | None] = mapped_column(String(80), default=None)  # an error class
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)


def enqueue_deliveries(
    conn: Connection,
    org_id: str,
    notice_id: int,
    notice_type: str,
    now: datetime,
    *,
    agent: str | None = None,
) -> int:
    """Queue the notice for every enabled webhook of the org that wants its type (an empty
    list of types wants all), due now or when the webhook's open circuit closes; a
    member's webhook only if ``agent`` (what the notice is about) is one they parent.
    Returns how many were queued."""
    parent = (
        select(AgentRow.parent)
        .where(AgentRow.org_id == org_id, AgentRow.handle == agent, AgentRow.deleted_at.is_(None))
        .scalar_subquery()
    )
    hooks = conn.execute(
        select(WebhookRow.id, WebhookRow.event_types, WebhookRow.circuit_open_until).where(
            WebhookRow.org_id == org_id,
            WebhookRow.enabled.is_(True),
            WebhookRow.user_id.is_(None) | (WebhookRow.user_id == parent),
        )
    ).all()
    rows = [
        {
            "id": new_id("msg"),
            "webhook_id": hook_id,
            "org_id": org_id,
            "notice_id": notice_id,
            "notice_type": notice_type,
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": max(now, open_until) if open_until else now,  # circuit open
            "created_at": now,
            "updated_at": now,
        }
        for hook_id, types, open_until in hooks
        if not types or notice_type in types
    ]
    if rows:
        conn.execute(insert(DeliveryRow), rows)
    return len(rows)
