"""Schedules: an agent's cron expression fires one run per tick, whatever the workers.

Every worker looks at the schedules each poll; a tick fires through ``submit`` with the
idempotency key ``schedule:<tick>``, unique per agent in the database, so however many
workers see a tick, one run starts. A tick is fired only within ``GRACE_S`` of its time:
a server that was down skips the ticks it missed instead of firing them late in a burst.
A tick over the agent's rate limit is skipped and logged.

A schedule is saved only if it fires within ``HORIZON`` (``schedule_problem``):
croniter accepts expressions no calendar ever matches (``0 0 30 2 *``, 30 February), and
asking one for its ticks raises. croniter (and dateutil under it) loads when a schedule
is first read: a process that reads none (most CLI commands) does not pay for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

GRACE_S = 120.0
"""How late a tick may still fire."""
HORIZON = timedelta(days=8 * 366)
"""A saved schedule must fire within this long: none that never fires. Eight years, not
one, so that a leap-day schedule (``0 0 29 2 *``) is accepted in every year, 2100's gap
included, rather than refused three years in four."""
_FIELDS = 5


def schedule_problem(expression: str, now: datetime) -> str | None:
    """Why ``expression`` cannot be an agent's schedule (saved at ``now``, UTC), or
    ``None``: five cron fields that croniter reads, with a tick within ``HORIZON``."""
    from croniter import CroniterError, croniter

    if len(expression.split()) != _FIELDS or not croniter.is_valid(expression):
        return f"{expression!r} is not a cron expression of five fields (UTC)"
    tick: datetime | None
    try:
        tick = croniter(expression, now).get_next(datetime)
    except CroniterError:  # no date matches at all (e.g. 30 February)
        tick = None
    if tick is None or tick - now > HORIZON:
        return (
            f"{expression!r} never fires (no calendar date matches it "
            "within eight years): pick days that exist, e.g. '0 0 28 2 *' rather than '0 0 30 2 *'"
        )
    return None


def due_tick(expression: str, now: datetime, *, grace_s: float = GRACE_S) -> datetime | None:
    """The latest tick of ``expression`` at or before ``now``, if it is at most
    ``grace_s`` old (UTC). Raises ``CroniterError`` for one that matches no date."""
    from croniter import croniter

    tick: datetime = croniter(expression, now + timedelta(microseconds=1)).get_prev(datetime)
    return tick if now - tick <= timedelta(seconds=grace_s) else None
