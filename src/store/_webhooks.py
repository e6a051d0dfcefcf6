"""Outbound webhooks of an org and their delivery log.

Secrets are encrypted at rest (``SecretBox``, like org keys and agent hooks) and leave the
store only for the delivery worker that signs with them, and once, when made. Deliveries
are claimed with a conditional update (``claim_due``): of several workers racing for one
due delivery exactly one wins the attempt, and a worker that dies mid-attempt gives it
back when its claim's lease runs out (the attempt is then made again: at least once).

One org must not hold up another's deliveries: an org has at most ``max_per_org``
webhooks, ``claim_due`` takes one delivery per webhook and deals them out round-robin
across orgs (an org's share shrinking with what this worker already sends for it), and a
webhook whose attempts keep failing has its circuit opened (``Breaker``): its deliveries
wait out the cool-down instead of taking a worker's time; none is dropped.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from store._db import Database
from store._hooks import SECRET_PREFIX
from store._models import utcnow
from store._org_keys import SecretBox, require_box
from store._webhook_claims import (
    AttemptResult,
    Breaker,
    DueDelivery,
    count_attempt,
    due_records,
    fair_due,
)
from store._webhook_rows import AttemptRow, DeliveryRow, WebhookRow, new_id


class WebhookLimitError(Exception):
    """An org asked for more webhooks than ``webhooks.max_per_org`` allows."""


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookRecord:
    id: str
    org_id: str
    url: str
    event_types: list[str]
    enabled: bool
    created_by: str
    created_at: datetime
    consecutive_failures: int = 0
    circuit_open_until: datetime | None = None
    user_id: str | None = None
    """A member's own webhook (notices about agents they parent); ``None``: the org's."""

    def circuit_open(self, now: datetime) -> bool:
        """Whether its deliveries are held back now (the breaker tripped, cool-down on)."""
        return self.circuit_open_until is not None and self.circuit_open_until > now


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    number: int
    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRecord:
    id: str
    webhook_id: str
    notice_id: int
    notice_type: str
    status: str
    next_attempt_at: datetime | None
    created_at: datetime
    updated_at: datetime
    attempts: list[AttemptRecord]


_WEBHOOK_COLUMNS = (
    WebhookRow.id,
    WebhookRow.org_id,
    WebhookRow.url,
    WebhookRow.event_types,
    WebhookRow.enabled,
    WebhookRow.created_by,
    WebhookRow.created_at,
    WebhookRow.consecutive_failures,
    WebhookRow.circuit_open_until,
    WebhookRow.user_id,
)


def _owned(query: Any, user_id: str | None) -> Any:
    """``query`` narrowed to ``user_id``'s own webhooks (``None``: every webhook)."""
    return query if user_id is None else query.where(WebhookRow.user_id == user_id)


class Webhooks:
    """Repository of the ``webhooks``, ``webhook_deliveries`` and ``webhook_attempts``."""

    def __init__(self, db: Database, box: SecretBox | None) -> None:
        self._db = db
        self._box = box

    def _require_box(self) -> SecretBox:
        return require_box(self._box, "Webhook secrets are stored encrypted")

    async def create(
        self,
        org_id: str,
        *,
        url: str,
        event_types: list[str],
        secret: str | None,
        by: str,
        max_per_org: int | None = None,
        user_id: str | None = None,
    ) -> tuple[WebhookRecord, str]:
        """Add an endpoint (``user_id``: a member's own); returns it and its secret
        (``secret`` or a new one), once.
        ``WebhookLimitError`` if the org has ``max_per_org`` already (counted under a lock
        per org on PostgreSQL, and in SQLite's one writer, so racing adds cannot pass it)."""
        box = self._require_box()
        secret = secret or new_secret()
        record = WebhookRecord(
            id=new_id("wh"),
            org_id=org_id,
            url=url,
            event_types=event_types,
            enabled=True,
            created_by=by,
            created_at=utcnow(),
            user_id=user_id,
        )
        values = {**asdict(record), "secret_enc": box.encrypt(secret)}
        async with self._db.write() as conn:
            if max_per_org is not None:
                await self._check_room(conn, org_id, max_per_org)
            await conn.execute(insert(WebhookRow).values(**values))
        return record, secret

    async def _check_room(self, conn: AsyncConnection, org_id: str, max_per_org: int) -> None:
        if self._db.dialect == "postgresql":
            key = func.hashtext(f"webhooks:{org_id}")
            await conn.execute(select(func.pg_advisory_xact_lock(key)))
        count = await conn.scalar(
            select(func.count()).select_from(WebhookRow).where(WebhookRow.org_id == org_id)
        )
        if (count or 0) >= max_per_org:
            raise WebhookLimitError(
                f"The org has {count} webhooks, the most allowed (webhooks.max_per_org="
                f"{max_per_org}); delete one or point one at a receiver that fans out"
            )

    async def of_org(self, org_id: str, *, user_id: str | None = None) -> list[WebhookRecord]:
        """The org's webhooks (``user_id``: only that member's own)."""
        query = _owned(select(*_WEBHOOK_COLUMNS).where(WebhookRow.org_id == org_id), user_id)
        async with self._db.read() as conn:
            rows = (await conn.execute(query.order_by(WebhookRow.created_at))).all()
        return [WebhookRecord(**r._asdict()) for r in rows]

    async def get(
        self, org_id: str, webhook_id: str, *, user_id: str | None = None
    ) -> WebhookRecord | None:
        """The webhook (``user_id``: only if it is that member's own)."""
        query = _owned(
            select(*_WEBHOOK_COLUMNS).where(
                WebhookRow.org_id == org_id, WebhookRow.id == webhook_id
            ),
            user_id,
        )
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else WebhookRecord(**row._asdict())

    async def delete(self, org_id: str, webhook_id: str, *, user_id: str | None = None) -> bool:
        """Remove an endpoint with its deliveries (pending ones are never sent);
        ``user_id``: only if it is that member's own."""
        async with self._db.write() as conn:
            mine = _owned(
                select(WebhookRow.id).where(
                    WebhookRow.org_id == org_id, WebhookRow.id == webhook_id
                ),
                user_id,
            )
            if await conn.scalar(mine) is None:
                return False
            await conn.execute(
                delete(DeliveryRow).where(
                    DeliveryRow.webhook_id == webhook_id, DeliveryRow.org_id == org_id
                )
            )
            result = await conn.execute(
                delete(WebhookRow)
                .where(WebhookRow.org_id == org_id, WebhookRow.id == webhook_id)
                .returning(WebhookRow.id)
            )
            return result.first() is not None

    async def deliveries(
        self, webhook_id: str, *, limit: int, before: int | None = None
    ) -> list[DeliveryRecord]:
        """The endpoint's deliveries, newest notice first (``before``: notice ids below)."""
        query = select(DeliveryRow).where(DeliveryRow.webhook_id == webhook_id)
        if before is not None:
            query = query.where(DeliveryRow.notice_id < before)
        query = query.order_by(DeliveryRow.notice_id.desc()).limit(limit)
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
            attempts = await _attempts_of(conn, [r.id for r in rows])
        return [
            DeliveryRecord(
                id=r.id,
                webhook_id=r.webhook_id,
                notice_id=r.notice_id,
                notice_type=r.notice_type,
                status=r.status,
                next_attempt_at=r.next_attempt_at,
                created_at=r.created_at,
                updated_at=r.updated_at,
                attempts=attempts.get(r.id, []),
            )
            for r in rows
        ]

    def secret_of(self, due: DueDelivery) -> str:
        """The plaintext secret to sign ``due`` with (``SecretsKeyError`` without a key)."""
        return self._require_box().decrypt(due.secret_enc)

    async def claim_due(
        self,
        *,
        lease_s: float,
        limit: int = 20,
        per_org: int | None = None,
        busy: Mapping[str, int] | None = None,
        skip_webhooks: Collection[str] = (),
    ) -> list[DueDelivery]:
        """Claim up to ``limit`` due deliveries for one attempt each, held for ``lease_s``:
        the oldest of each webhook (not of ``skip_webhooks``, nor of one whose circuit is
        open), dealt round-robin across orgs, at most ``per_org`` of an org counting the
        ``busy`` attempts the caller already makes for it.

        Each claim is an update conditional on the delivery still being due, so racing
        workers (PostgreSQL re-checks the condition after the row lock) never both win."""
        now = utcnow()
        due = (DeliveryRow.status == "pending", DeliveryRow.next_attempt_at <= now)
        query = fair_due(
            now, limit=limit, per_org=per_org or limit, busy=busy or {}, skip=skip_webhooks
        )
        async with self._db.write() as conn:
            ids: list[str] = list((await conn.scalars(query)).all())
            won: dict[str, str] = {}
            for delivery_id in ids:
                token = secrets.token_hex(16)
                result = await conn.execute(
                    update(DeliveryRow)
                    .where(DeliveryRow.id == delivery_id, *due)
                    .values(
                        claim=token,
                        attempts=DeliveryRow.attempts + 1,
                        next_attempt_at=now + timedelta(seconds=lease_s),
                        updated_at=now,
                    )
                    .returning(DeliveryRow.id)
                )
                if result.first() is not None:
                    won[delivery_id] = token
            return await due_records(conn, won) if won else []

    async def finish(
        self,
        due: DueDelivery,
        result: AttemptResult,
        *,
        retry_at: datetime | None,
        breaker: Breaker | None = None,
    ) -> datetime | None:
        """Record the attempt and settle the delivery: ``delivered``, due again at
        ``retry_at``, or ``failed`` (no retry left). A claim that lapsed meanwhile (another
        worker took the delivery over) still records its attempt, and changes nothing else.

        With a ``breaker`` the attempt also counts for the webhook's circuit; returns until
        when the circuit is open if this failure opened it (the retry waits as long)."""
        now = utcnow()
        async with self._db.write() as conn:
            await conn.execute(
                insert(AttemptRow).values(
                    delivery_id=due.id,
                    number=due.number,
                    attempted_at=now,
                    status_code=result.status_code,
                    error=result.error,
                    duration_ms=result.duration_ms,
                )
            )
            opened = (
                None if breaker is None else await count_attempt(conn, due, result, breaker, now)
            )
            if result.ok:
                settle: dict[str, Any] = {"status": "delivered", "next_attempt_at": None}
            elif retry_at is not None:
                settle = {"status": "pending", "next_attempt_at": max(retry_at, opened or now)}
            else:
                settle = {"status": "failed", "next_attempt_at": None}
            await conn.execute(
                update(DeliveryRow)
                .where(DeliveryRow.id == due.id, DeliveryRow.claim == due.claim)
                .values(**settle, claim=None, updated_at=now)
            )
        return opened


async def _attempts_of(conn: AsyncConnection, ids: list[str]) -> dict[str, list[AttemptRecord]]:
    if not ids:
        return {}
    query = (
        select(AttemptRow)
        .where(AttemptRow.delivery_id.in_(ids))
        .order_by(AttemptRow.delivery_id, AttemptRow.number, AttemptRow.id)
    )
    found: dict[str, list[AttemptRecord]] = {}
    for a in (await conn.execute(query)).all():
        found.setdefault(a.delivery_id, []).append(
            AttemptRecord(
                number=a.number,
                attempted_at=a.attempted_at,
                status_code=a.status_code,
                error=a.error,
                duration_ms=a.duration_ms,
            )
        )
    return found
