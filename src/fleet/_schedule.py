"""Schedules: an agent's cron expression fires one run per tick, whatever the workers.

Every worker looks at the schedules each poll; a tick fires through ``submit`` with the
idempotency key ``schedule:<tick>``, unique per agent in the database, so however many
workers see a tick, one run starts. A tick is fired only within ``GRACE_S`` of its time:
a server that was down skips the ticks it missed instead of firing them late in a burst.
A tick over the agent's rate limit is skipped and logged.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from croniter import croniter

GRACE_S = 120.0
"""How late a tick may still fire."""
_log = structlog.get_logger("bosun.schedules")


def valid_cron(expression: str) -> bool:
    return bool(croniter.is_valid(expression))


def due_tick(expression: str, now: datetime, *, grace_s: float = GRACE_S) -> datetime | None:
    """The latest tick of ``expression`` at or before ``now``, if it is at most
    ``grace_s`` old (UTC)."""
    tick: datetime = croniter(expression, now + timedelta(microseconds=1)).get_prev(datetime)
    return tick if now - tick <= timedelta(seconds=grace_s) else None
