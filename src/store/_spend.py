"""What orgs spend on models: per-call rows, daily roll-ups, and cap reservations.

A model call under a cap first *reserves* an upper bound of its cost against the org's
day (one conditional update: admitted only while everything spent and reserved, plus
this call, fits the cap, or when nothing else is in flight); when it ends, ``settle``
records its real usage (the per-call ``usage`` row, the user's day, the org's day) and
gives the reservation back, all in one transaction. So however many turns race, the
day's spend passes the cap by at most one call: the one admitted alone at the edge.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from store import _hot as hot
from store import _hot_pg as hot_pg
from store._db import Database
from store._models import Base, OrgRow, UsageRow, utcnow
from store._sessions import UsageRecord
from store._usage_models import DailySpendRow, DailyUsageRow


def utc_day(at: datetime | None = None) -> date:
    """The UTC day a cost counts against (caps reset at 00:00 UTC)."""
    return (at or utcnow()).date()


def resets_at(day: date) -> datetime:
    """When ``day``'s cap resets: the next 00:00 UTC."""
    return datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=utcnow().tzinfo)


@dataclass(frozen=True, slots=True)
class DaySpend:
    spent_usd_micros: int
    reserved_usd_micros: int


class Spend:
    """Repository of the ``usage``, ``daily_usage`` and ``daily_spend`` tables."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _insert(self, table: type[Base]) -> PgInsert | SqliteInsert:
        """An insert that can say what to do on conflict, in the database's dialect."""
        return pg_insert(table) if self._db.dialect == "postgresql" else sqlite_insert(table)

    async def tier(self, org_id: str) -> str | None:
        """The org's tier, if the org is known."""
        query = select(OrgRow.tier).where(OrgRow.id == org_id)
        return await self._db.run_read(lambda conn: conn.scalar(query))

    async def set_tier(self, org_id: str, tier: str) -> None:
        """Put ``org_id`` on ``tier`` (creating the org on first sight)."""
        async with self._db.write() as conn:
            await conn.execute(
                self._insert(OrgRow)
                .values(id=org_id, tier=tier, created_at=utcnow())
                .on_conflict_do_update(index_elements=["id"], set_={"tier": tier})
            )

    async def today(self, org_id: str, day: date) -> DaySpend:
        query = select(DailySpendRow.spent_usd_micros, DailySpendRow.reserved_usd_micros).where(
            DailySpendRow.org_id == org_id, DailySpendRow.day == day
        )
        row = await self._db.run_read(lambda conn: conn.execute(query).first())
        return DaySpend(int(row[0]), int(row[1])) if row else DaySpend(0, 0)

    def _ensure_day(self, conn: Connection, org_id: str, day: date) -> None:
        conn.execute(
            self._insert(DailySpendRow)
            .values(
                org_id=org_id,
                day=day,
                spent_usd_micros=0,
                reserved_usd_micros=0,
                alerted_pct=0,
                updated_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["org_id", "day"])
        )

    async def reserve(self, org_id: str, day: date, amount: int, cap: int) -> DaySpend | None:
        """Reserve ``amount`` of ``cap`` for a call about to start; ``None`` if refused.

        Admitted while spent + reserved + amount stays within the cap, or, at the edge, when
        the day is still under the cap and no other call is in flight (that call may end
        over the cap: the one call a cap may be passed by).
        """
        spend = DailySpendRow

        def write(conn: Connection) -> DaySpend | None:
            self._ensure_day(conn, org_id, day)
            row = conn.execute(
                update(spend)
                .where(
                    spend.org_id == org_id,
                    spend.day == day,
                    or_(
                        spend.spent_usd_micros + spend.reserved_usd_micros + amount <= cap,
                        (spend.reserved_usd_micros == 0) & (spend.spent_usd_micros < cap),
                    ),
                )
                .values(reserved_usd_micros=spend.reserved_usd_micros + amount)
                .returning(spend.spent_usd_micros, spend.reserved_usd_micros)
            ).first()
            return DaySpend(int(row[0]), int(row[1])) if row else None

        return await self._db.run_write(write)

    async def release(self, org_id: str, day: date, amount: int) -> None:
        """Give back a reservation whose call recorded nothing (it failed or was cut off)."""
        if amount:
            spend = DailySpendRow
            await self._db.run_write(
                lambda conn: conn.execute(
                    update(spend)
                    .where(spend.org_id == org_id, spend.day == day)
                    .values(reserved_usd_micros=spend.reserved_usd_micros - amount)
                )
            )

    def settle(
        self, usage: UsageRecord, *, day: date, reserved: int = 0, per_call: bool = True
    ) -> Awaitable[DaySpend | None]:
        """Record one call's usage everywhere it counts and give its reservation back, in one
        transaction; resolves to the org's day afterwards (``None`` for a free call, which
        leaves it unchanged). ``per_call=False`` (a dry run, which has no session) counts it
        in the daily roll-ups only. Queued at once where ``Database.writes_in_order``, so a
        turn's later writes (its next reservation, its closing events) commit after it."""
        spend = DailySpendRow
        now = utcnow()

        def write(conn: Connection) -> DaySpend | None:
            if hot.runs_on(conn):  # the writer thread: fixed SQL (store._hot)
                after = hot.settle_usage(
                    hot.cursor_of(conn), _usage_values(usage), day=day, reserved=reserved,
                    per_call=per_call, now=now,
                )  # fmt: skip
                return None if after is None else DaySpend(*after)
            if per_call:
                conn.execute(insert(UsageRow).values(**_usage_values(usage), created_at=now))
            daily = self._insert(DailyUsageRow).values(
                org_id=usage.org_id,
                user_id=usage.user_id,
                day=day,
                calls=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd_micros=usage.cost_usd_micros,
            )
            conn.execute(
                daily.on_conflict_do_update(
                    index_elements=["org_id", "user_id", "day"],
                    set_={
                        name: getattr(DailyUsageRow, name) + getattr(daily.excluded, name)
                        for name in (
                            "calls",
                            "input_tokens",
                            "output_tokens",
                            "cache_read_tokens",
                            "cache_write_tokens",
                            "cost_usd_micros",
                        )
                    },
                )
            )
            if usage.cost_usd_micros == 0 and reserved == 0:
                return None  # a free call: the org's day is unchanged
            day_row = self._insert(spend).values(
                org_id=usage.org_id,
                day=day,
                spent_usd_micros=usage.cost_usd_micros,
                reserved_usd_micros=0,
                alerted_pct=0,
                updated_at=now,
            )
            row = (
                conn.execute(
                    day_row.on_conflict_do_update(
                        index_elements=["org_id", "day"],
                        set_={
                            "spent_usd_micros": spend.spent_usd_micros + usage.cost_usd_micros,
                            "reserved_usd_micros": spend.reserved_usd_micros - reserved,
                            "updated_at": now,
                        },
                    ).returning(spend.spent_usd_micros, spend.reserved_usd_micros)
                )
            ).one()
            return DaySpend(int(row[0]), int(row[1]))

        async def write_pg(pg: Any) -> DaySpend | None:
            after = await hot_pg.settle_usage(
                pg, _usage_values(usage), day=day, reserved=reserved, per_call=per_call, now=now
            )
            return None if after is None else DaySpend(*after)

        return self._db.write_soon(write, pg=write_pg)

    async def raise_alert(self, org_id: str, day: date, pct: int) -> int | None:
        """Mark the day's alerts as sent up to ``pct``; returns the level sent before, or
        ``None`` when it already was at ``pct`` or above (so each alert fires once)."""
        spend = DailySpendRow
        async with self._db.write() as conn:
            before = await conn.scalar(
                select(spend.alerted_pct)
                .where(spend.org_id == org_id, spend.day == day)
                .with_for_update()
            )
            if before is None or before >= pct:
                return None
            await conn.execute(
                update(spend)
                .where(spend.org_id == org_id, spend.day == day)
                .values(alerted_pct=pct)
            )
        return int(before)


def _usage_values(usage: UsageRecord) -> dict[str, object]:
    return {
        "session_id": usage.session_id,
        "turn_id": usage.turn_id,
        "org_id": usage.org_id,
        "user_id": usage.user_id,
        "role": usage.role,
        "model": usage.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd_micros": usage.cost_usd_micros,
    }
