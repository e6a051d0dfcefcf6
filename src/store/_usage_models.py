"""Daily roll-ups of model usage: what the caps and ``GET /v1/usage`` read.

Per-call rows (``usage``) stay the record; these counters are bumped with atomic SQL
increments in the same transaction, so concurrent turns never lose an update.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import BigInteger, Date, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from store._models import Base, utcnow


class DailySpendRow(Base):
    """An org's spend on one UTC day, and what calls in flight have reserved of its cap."""

    __tablename__ = "daily_spend"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    spent_usd_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_usd_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    alerted_pct: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class DailyUsageRow(Base):
    """One user's tokens, calls and cost on one UTC day."""

    __tablename__ = "daily_usage"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd_micros: Mapped[int] = mapped_column(BigInteger, default=0)
