"""Claiming outbound webhook deliveries fairly and settling them, with each webhook's
circuit breaker: what the delivery workers need from the store, apart from the endpoints'
repository (``store._webhooks``) that calls these.

A claim takes each webhook's oldest due delivery and deals them out round-robin by org, so
one org's many (or slow) webhooks cannot fill a worker's slots; a webhook whose attempts
keep failing has its circuit opened, and its deliveries wait out the cool-down.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from store._notices import NoticeRow
from store._webhook_rows import DeliveryRow, WebhookRow

NOT_THE_RECEIVERS = frozenset({"SecretsKeyError"})
"""Attempt errors that are this server's fault: they do not count against a circuit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Breaker:
    """A webhook's circuit opens after ``failures`` failed attempts in a row and holds its
    deliveries for ``cooldown_s``; then one attempt decides: success closes it, failure
    opens it again."""

    failures: int = 5
    cooldown_s: float = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DueDelivery:
    """A delivery this worker claimed: what to send, where, and as which attempt."""

    id: str
    claim: str
    org_id: str
    webhook_id: str
    url: str
    secret_enc: str
    number: int
    notice_id: int
    notice_type: str
    notice_data: dict[str, Any]
    notice_created_at: datetime


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one attempt went: an HTTP status, or the class of the error that stopped it."""

    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def fair_due(
    now: datetime, *, limit: int, per_org: int, busy: Mapping[str, int], skip: Collection[str]
) -> Select[Any]:
    """The ids of due deliveries to claim: each webhook's oldest, ordered by the org's turn
    (its n-th delivery here plus what it has ``busy``), then by age: round-robin by org."""
    closed = or_(WebhookRow.circuit_open_until.is_(None), WebhookRow.circuit_open_until <= now)
    oldest = (DeliveryRow.next_attempt_at, DeliveryRow.id)
    due = (
        select(
            DeliveryRow.id,
            DeliveryRow.org_id,
            DeliveryRow.next_attempt_at,
            func.row_number()
            .over(partition_by=DeliveryRow.webhook_id, order_by=oldest)
            .label("nth"),
        )
        .join(WebhookRow, WebhookRow.id == DeliveryRow.webhook_id)
        .where(DeliveryRow.status == "pending", DeliveryRow.next_attempt_at <= now, closed)
    )
    if skip:
        due = due.where(DeliveryRow.webhook_id.not_in(list(skip)))
    firsts = due.subquery()
    turn: ColumnElement[int] = func.row_number().over(
        partition_by=firsts.c.org_id, order_by=(firsts.c.next_attempt_at, firsts.c.id)
    )
    if busy:
        turn = turn + case(dict(busy), value=firsts.c.org_id, else_=0)
    ranked = (
        select(firsts.c.id, firsts.c.next_attempt_at, turn.label("turn"))
        .where(firsts.c.nth == 1)
        .subquery()
    )
    return (
        select(ranked.c.id)
        .where(ranked.c.turn <= per_org)
        .order_by(ranked.c.turn, ranked.c.next_attempt_at)
        .limit(limit)
    )


async def count_attempt(
    conn: AsyncConnection, due: DueDelivery, result: AttemptResult, breaker: Breaker, now: datetime
) -> datetime | None:
    """Count an attempt for its webhook's circuit: a success closes it; the ``breaker``-th
    failure in a row opens it and postpones the webhook's waiting deliveries to the end of
    the cool-down (none is dropped). Returns that time if this attempt opened it."""
    hook = WebhookRow.id == due.webhook_id
    if result.ok:
        reset = or_(
            WebhookRow.consecutive_failures != 0, WebhookRow.circuit_open_until.is_not(None)
        )
        await conn.execute(
            update(WebhookRow)
            .where(hook, reset)
            .values(consecutive_failures=0, circuit_open_until=None)
        )
        return None
    if result.error in NOT_THE_RECEIVERS:
        return None
    failures = await conn.scalar(
        update(WebhookRow)
        .where(hook)
        .values(consecutive_failures=WebhookRow.consecutive_failures + 1)
        .returning(WebhookRow.consecutive_failures)
    )
    if failures is None or failures < breaker.failures:
        return None
    until = now + timedelta(seconds=breaker.cooldown_s)
    await conn.execute(update(WebhookRow).where(hook).values(circuit_open_until=until))
    await conn.execute(
        update(DeliveryRow)
        .where(
            DeliveryRow.webhook_id == due.webhook_id,
            DeliveryRow.status == "pending",
            DeliveryRow.claim.is_(None),
            DeliveryRow.next_attempt_at < until,
        )
        .values(next_attempt_at=until, updated_at=now)
    )
    return until


async def due_records(conn: AsyncConnection, won: dict[str, str]) -> list[DueDelivery]:
    query = (
        select(
            DeliveryRow.id,
            DeliveryRow.org_id,
            DeliveryRow.webhook_id,
            DeliveryRow.attempts,
            DeliveryRow.notice_id,
            DeliveryRow.notice_type,
            WebhookRow.url,
            WebhookRow.secret_enc,
            NoticeRow.data,
            NoticeRow.created_at,
        )
        .join(WebhookRow, WebhookRow.id == DeliveryRow.webhook_id)
        .join(NoticeRow, NoticeRow.id == DeliveryRow.notice_id)
        .where(DeliveryRow.id.in_(list(won)))
    )
    return [
        DueDelivery(
            id=r.id,
            claim=won[r.id],
            org_id=r.org_id,
            webhook_id=r.webhook_id,
            url=r.url,
            secret_enc=r.secret_enc,
            number=r.attempts,
            notice_id=r.notice_id,
            notice_type=r.notice_type,
            notice_data=r.data,
            notice_created_at=r.created_at,
        )
        for r in (await conn.execute(query)).all()
    ]
