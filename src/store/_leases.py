"""Turn leases: which worker runs a turn, and taking over the turns of a worker that died.

A running turn is held by one worker until its ``lease_until``; the worker renews the
lease with a heartbeat. A turn whose lease has run out, or whose worker is known to be
gone, is claimed by another worker with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL; SQLite has
one writer, so the conditional update alone decides), and the claim bumps the turn's
ownership epoch in the same statement, so the old worker's late appends to that turn are
refused from then on (the session's other turns are not touched).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, literal_column, or_, select, update

from store._db import Database
from store._models import TurnRow, utcnow

RUNNING: ColumnElement[bool] = TurnRow.status == literal_column("'running'")
"""Running turns, with the literal in the SQL (not a bound value), so both databases plan
the partial indexes on ``status = 'running'`` (``ix_turns_running``) even for a prepared
statement: the queries that read them cost the same however many turns have finished."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A turn this worker now holds, with what it needs to run it."""

    turn_id: str
    session_id: str
    trace_id: str
    job: dict[str, Any] | None
    epoch: int
    stop: str | None = None  # a stop request it carries (``interrupted``): close, not run


class Leases:
    """Repository of the turns' lease columns and ownership epochs."""

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

    async def holders(self, worker_id: str) -> set[str]:
        """The workers other than ``worker_id`` holding running turns."""
        query = select(TurnRow.worker_id).where(RUNNING, TurnRow.worker_id != worker_id)
        async with self._db.read() as conn:
            return {str(w) for w in (await conn.execute(query.distinct())).scalars()}

    async def claim_expired(
        self, worker_id: str, lease_s: float, *, limit: int = 10, gone: Collection[str] = ()
    ) -> list[Claim]:
        """Take over running turns whose lease ran out (or that never had one: a process
        older than leases left them), and those held by the ``gone`` workers (known dead,
        their leases not run out yet), oldest first."""
        now = utcnow()
        expired = or_(TurnRow.lease_until.is_(None), TurnRow.lease_until < now)
        if gone:
            expired = or_(expired, TurnRow.worker_id.in_(list(gone)))
        async with self._db.write() as conn:
            rows = (
                await conn.execute(
                    select(
                        TurnRow.id, TurnRow.session_id, TurnRow.trace_id, TurnRow.job, TurnRow.stop
                    )
                    .where(RUNNING, expired)
                    .order_by(TurnRow.started_at)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            claims = []
            for row in rows:
                epoch = await conn.scalar(
                    update(TurnRow)
                    .where(and_(TurnRow.id == row.id, TurnRow.status == "running", expired))
                    .values(
                        worker_id=worker_id,
                        lease_until=now + timedelta(seconds=lease_s),
                        epoch=TurnRow.epoch + 1,
                    )
                    .returning(TurnRow.epoch)
                )
                if epoch is None:
                    continue
                claims.append(
                    Claim(
                        turn_id=row.id,
                        session_id=row.session_id,
                        trace_id=row.trace_id,
                        job=row.job,
                        epoch=int(epoch),
                        stop=row.stop,
                    )
                )
        return claims

    async def take(
        self, turn_id: str, worker_id: str, lease_s: float, *, job: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        """Hold ``turn_id`` (a suspended turn resuming here); returns the turn's epoch and
        its job: the one already recorded if any, else ``job``, recorded now."""
        async with self._db.write() as conn:
            query = select(TurnRow.epoch, TurnRow.job).where(TurnRow.id == turn_id)
            row = (await conn.execute(query)).one()
            held = {"worker_id": worker_id, "lease_until": utcnow() + timedelta(seconds=lease_s)}
            if row.job is None and job is not None:
                held["job"] = job
            await conn.execute(update(TurnRow).where(TurnRow.id == turn_id).values(**held))
        return int(row.epoch), row.job or job

    async def holder(self, turn_id: str) -> tuple[str | None, datetime | None]:
        """Who holds ``turn_id`` and until when (for operators and tests)."""
        async with self._db.read() as conn:
            row = (
                await conn.execute(
                    select(TurnRow.worker_id, TurnRow.lease_until).where(TurnRow.id == turn_id)
                )
            ).first()
        return (row[0], row[1]) if row else (None, None)
