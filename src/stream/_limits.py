"""Per-user rate limits on the routes that call models: requests and tokens per minute.

Both are shared by every worker through the database (``store.rate_limits``): requests
are counted in fixed one-minute windows, and tokens are the user's recorded model usage
of the last 60 seconds. A caller over either limit gets 429 ``rate_limited`` with
``Retry-After``: the whole seconds until the window frees up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import structlog

from store import TokenSpend
from stream._api import Services
from stream._auth import Principal
from stream._errors import ApiError

WINDOW_S = 60
_log = structlog.get_logger("bosun.limits")


def retry_after_s(until: datetime, now: datetime) -> int:
    """Whole seconds from ``now`` to ``until``, at least 1 (a ``Retry-After`` value)."""
    return max(1, math.ceil((until - now).total_seconds()))


def tokens_free_at(spends: Sequence[TokenSpend], *, limit: int, window_s: int) -> datetime | None:
    """When the tokens of ``spends`` (the window's, oldest first) drop below ``limit`` as
    the oldest leave the window; None if they are below it already."""
    used = sum(s.tokens for s in spends)
    for spend in spends:
        if used < limit:
            break
        used -= spend.tokens
        if used < limit:
            return spend.at + timedelta(seconds=window_s)
    return None


def _limited(message: str, *, wait_s: int, kind: str, principal: Principal) -> ApiError:
    _log.info("http.rate_limited", limit=kind, org_id=principal.org_id, retry_after_s=wait_s)
    return ApiError(
        429,
        "rate_limited",
        f"{message}; retry in {wait_s} s",
        headers={"Retry-After": str(wait_s)},
    )


async def enforce_rate_limits(services: Services, principal: Principal) -> None:
    """Count this request against the caller's per-minute limits, or raise 429.

    Call it once per request that would start a turn or a plan, after the request is
    known to be valid and before any model is called. Limits of 0 are off.
    """
    config = services.config
    limits = services.store.rate_limits
    now = datetime.now(UTC)
    if config.tokens_per_minute:
        spends = await limits.token_spends(
            org_id=principal.org_id,
            user_id=principal.user_id,
            since=now - timedelta(seconds=WINDOW_S),
        )
        free_at = tokens_free_at(spends, limit=config.tokens_per_minute, window_s=WINDOW_S)
        if free_at is not None:
            used = sum(s.tokens for s in spends)
            raise _limited(
                f"You used {used} model tokens in the last minute; the limit is "
                f"{config.tokens_per_minute} per minute",
                wait_s=retry_after_s(free_at, now),
                kind="tokens_per_minute",
                principal=principal,
            )
    if config.requests_per_minute:
        key = f"requests:{len(principal.org_id)}:{principal.org_id}:{principal.user_id}"
        window = await limits.hit(key, window_s=WINDOW_S, now=now)
        if window.count > config.requests_per_minute:
            raise _limited(
                f"This is request {window.count} this minute; the limit is "
                f"{config.requests_per_minute} per minute",
                wait_s=retry_after_s(window.resets_at, now),
                kind="requests_per_minute",
                principal=principal,
            )
