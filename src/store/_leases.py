"""Turn leases: which worker runs a turn, and taking over the turns of a worker that died.

A running turn is held by one worker until its ``lease_until``; the worker renews the
lease with a heartbeat. A turn whose lease has run out is claimed by another worker with
``FOR UPDATE SKIP LOCKED`` (PostgreSQL; SQLite has one writer, so the conditional update
alone decides), and the claim bumps the session's ownership epoch in the same
transaction, so the old worker's late appends are refused from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update

from store._db import Database
from store._models import SessionRow, TurnRow, utcnow


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A turn this worker now holds, with what it needs to run it."""

    turn_id: str
    session_id: str
    trace_id: str
    job: dict[str, Any] | None
    epoch: int


class Leases:
    """Repository of the turns' lease columns and the sessions' ownership epochs."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def renew(self, worker_id: str, turn_ids: list[str], lease_s: float) -> set[str]:
        """Extend this worker's leases; returns the turns it still holds (the others were
        taken over, or have finished)."""
        if not turn_ids:
            return set()
        async with self._db.write() as conn:
            result = await conn.execute(
                update(TurnRow)
                .where(
                    TurnRow.id.in_(turn_ids),
                    TurnRow.worker_id == worker_id,
                    TurnRow.status == "running",
                )
                .values(lease_until=utcnow() + timedelta(seconds=lease_s))
                .returning(TurnRow.id)
            )
            return set(result.scalars())

    async def claim_expired(
        self, worker_id: str, lease_s: float, *, limit: int = 10
    ) -> list[Claim]:
        """Take over running turns whose lease ran out (or that never had one: a process
        older than leases left them), oldest first."""
        now = utcnow()
        expired = or_(TurnRow.lease_until.is_(None), TurnRow.lease_until < now)
        async with self._db.write() as conn:
            rows = (
                await conn.execute(
                    select(TurnRow.id, TurnRow.session_id, TurnRow.trace_id, TurnRow.job)
                    .where(TurnRow.status == "running", expired)
                    .order_by(TurnRow.started_at)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            claims = []
            for row in rows:
                taken = await conn.execute(
                    update(TurnRow)
                    .where(and_(TurnRow.id == row.id, TurnRow.status == "running", expired))
                    .values(worker_id=worker_id, lease_until=now + timedelta(seconds=lease_s))
                    .returning(TurnRow.id)
                )
                if taken.first() is None:
                    continue
                epoch = await conn.scalar(
                    update(SessionRow)
                    .where(SessionRow.id == row.session_id)
                    .values(epoch=SessionRow.epoch + 1)
                    .returning(SessionRow.epoch)
                )
                claims.append(
                    Claim(
                        turn_id=row.id,
                        session_id=row.session_id,
                        trace_id=row.trace_id,
                        job=row.job,
                        epoch=int(epoch or 0),
                    )
                )
        return claims

    async def take(
        self, turn_id: str, worker_id: str, lease_s: float, *, job: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        """Hold ``turn_id`` (a suspended turn resuming here); returns the session's epoch
        and the turn's job: the one already recorded if any, else ``job``, recorded now."""
        async with self._db.write() as conn:
            row = (
                await conn.execute(
                    select(TurnRow.session_id, TurnRow.job).where(TurnRow.id == turn_id)
                )
            ).one()
            session_id = row.session_id
            held = {"worker_id": worker_id, "lease_until": utcnow() + timedelta(seconds=lease_s)}
            if row.job is None and job is not None:
                held["job"] = job
            await conn.execute(update(TurnRow).where(TurnRow.id == turn_id).values(**held))
            epoch = await conn.scalar(select(SessionRow.epoch).where(SessionRow.id == session_id))
        return int(epoch or 0), row.job or job

    async def holder(self, turn_id: str) -> tuple[str | None, datetime | None]:
        """Who holds ``turn_id`` and until when (for operators and tests)."""
        async with self._db.read() as conn:
            row = (
                await conn.execute(
                    select(TurnRow.worker_id, TurnRow.lease_until).where(TurnRow.id == turn_id)
                )
            ).first()
        return (row[0], row[1]) if row else (None, None)
