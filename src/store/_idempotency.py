"""Idempotency keys: a client's retry of a turn-starting request finds the first one's turn.

A key is claimed with one ``INSERT .. ON CONFLICT DO NOTHING`` on the unique
``(org_id, user_id, key)``: of two concurrent requests exactly one inserts and starts the
turn, then records its ids on the row (``turn_id`` is null until then); the other reads
the row. Keys expire after ``KEY_TTL``; a claim whose turn was never recorded (its request
failed without releasing it, or its process died) is given up after ``CLAIM_TIMEOUT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, or_, select, update

from store._db import Database
from store._models import IdempotencyKeyRow, utcnow

KEY_TTL = timedelta(hours=24)
CLAIM_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    """A key held by an earlier request; ``turn_id`` is None while that request starts it."""

    key: str
    request_hash: str
    session_id: str | None
    turn_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """This request holds the key: it starts the turn, then ``record``s it (or ``release``s
    the key if it could not)."""

    row_id: int


class IdempotencyKeys:
    """Repository of the ``idempotency_keys`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(
        self, *, org_id: str, user_id: str, key: str, request_hash: str
    ) -> IdempotencyClaim | IdempotencyRecord:
        """Take ``key`` for a new turn, or return the earlier request's record of it."""
        now = utcnow()
        this_key = and_(
            IdempotencyKeyRow.org_id == org_id,
            IdempotencyKeyRow.user_id == user_id,
            IdempotencyKeyRow.key == key,
        )
        stale = or_(
            IdempotencyKeyRow.created_at < now - KEY_TTL,  # every expired key, not just this one
            and_(
                this_key,
                IdempotencyKeyRow.turn_id.is_(None),
                IdempotencyKeyRow.created_at < now - CLAIM_TIMEOUT,
            ),
        )
        insert = (
            self._db.insert(IdempotencyKeyRow)
            .values(
                org_id=org_id, user_id=user_id, key=key, request_hash=request_hash, created_at=now
            )
            .on_conflict_do_nothing(index_elements=["org_id", "user_id", "key"])
            .returning(IdempotencyKeyRow.id)
        )
        held = select(
            IdempotencyKeyRow.key,
            IdempotencyKeyRow.request_hash,
            IdempotencyKeyRow.session_id,
            IdempotencyKeyRow.turn_id,
            IdempotencyKeyRow.created_at,
        ).where(this_key)
        while True:
            async with self._db.write() as conn:
                await conn.execute(delete(IdempotencyKeyRow).where(stale))
                row_id = (await conn.execute(insert)).scalar_one_or_none()
                if row_id is not None:
                    return IdempotencyClaim(int(row_id))
                row = (await conn.execute(held)).first()
            if row is not None:
                return IdempotencyRecord(**row._asdict())
            # The holder released the key between our insert and our read: claim again.

    async def record(self, claim: IdempotencyClaim, *, session_id: str, turn_id: str) -> bool:
        """Note the turn the claim started; False if the claim was given up meanwhile."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(IdempotencyKeyRow)
                .where(IdempotencyKeyRow.id == claim.row_id, IdempotencyKeyRow.turn_id.is_(None))
                .values(session_id=session_id, turn_id=turn_id)
                .returning(IdempotencyKeyRow.id)
            )
            return result.first() is not None

    async def release(self, claim: IdempotencyClaim) -> None:
        """Give the key up (no turn was started), so a retry can claim it again."""
        async with self._db.write() as conn:
            await conn.execute(
                delete(IdempotencyKeyRow).where(
                    IdempotencyKeyRow.id == claim.row_id, IdempotencyKeyRow.turn_id.is_(None)
                )
            )
