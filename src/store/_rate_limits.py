"""Rate-limit state shared by every worker: fixed-window request counters and recent
token use.

A request counter is one ``rate_windows`` row per key and window, bumped by a single
``INSERT .. ON CONFLICT DO UPDATE SET count = count + 1 RETURNING count`` (the same
statement on SQLite and PostgreSQL), so concurrent workers never lose a hit. The first
hit of a new window deletes windows older than ``KEEP_WINDOWS_S``, so the table holds
only the last few minutes. Token use is read from the ``usage`` rows every model call
writes (indexed by org, user and time); nothing extra is recorded for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from store._db import Database
from store._models import RateWindowRow, UsageRow, utcnow

KEEP_WINDOWS_S = 300
"""Windows older than this are deleted (opportunistically, as new windows open)."""


@dataclass(frozen=True, slots=True)
class WindowCount:
    """Requests counted in a key's current window (this one included), and when it ends."""

    count: int
    window_start: datetime
    resets_at: datetime


@dataclass(frozen=True, slots=True)
class TokenSpend:
    """Tokens of one model call, and when it was recorded."""

    at: datetime
    tokens: int


def window_start(now: datetime, window_s: int) -> datetime:
    """The start of the fixed window of ``window_s`` seconds that holds ``now``."""
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % window_s, UTC)


class RateLimits:
    """Repository of the ``rate_windows`` counters, and a reader of recent token use."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def hit(
        self, key: str, *, window_s: int = 60, now: datetime | None = None
    ) -> WindowCount:
        """Count one request under ``key`` in the current window; return the new count."""
        now = now or utcnow()
        start = window_start(now, window_s)
        upsert = (
            self._db.insert(RateWindowRow)
            .values(key=key, window_start=start, count=1)
            .on_conflict_do_update(
                index_elements=[RateWindowRow.key, RateWindowRow.window_start],
                set_={"count": RateWindowRow.count + 1},
            )
            .returning(RateWindowRow.count)
        )
        async with self._db.autocommit() as conn:  # the sweep need not commit with the count
            count = int((await conn.execute(upsert)).scalar_one())
            if count == 1:  # one sweep per key and window, not one per request
                cutoff = now - timedelta(seconds=max(KEEP_WINDOWS_S, 2 * window_s))
                await conn.execute(delete(RateWindowRow).where(RateWindowRow.window_start < cutoff))
        return WindowCount(
            count=count, window_start=start, resets_at=start + timedelta(seconds=window_s)
        )

    async def token_spends(self, *, org_id: str, user_id: str, since: datetime) -> list[TokenSpend]:
        """The user's model calls recorded after ``since``, oldest first.

        A call's tokens are its input, output and cache-write tokens; cache reads are left
        out (they are cheap, and providers leave them out of their own limits too).
        """
        tokens = UsageRow.input_tokens + UsageRow.output_tokens + UsageRow.cache_write_tokens
        query = (
            select(UsageRow.created_at, tokens)
            .where(
                UsageRow.org_id == org_id,
                UsageRow.user_id == user_id,
                UsageRow.created_at > since,
            )
            .order_by(UsageRow.created_at)
        )
        async with self._db.read() as conn:
            return [TokenSpend(at=at, tokens=int(n)) for at, n in await conn.execute(query)]
