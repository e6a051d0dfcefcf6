"""``GET /v1/usage``: the caller's org's spend today against its daily cap."""

from __future__ import annotations

from datetime import datetime

from litestar import get
from pydantic import BaseModel, Field

from store import resets_at, utc_day
from stream._api import AuthedRequest, ServicesDep
from turn import UNMETERED


class UsageOut(BaseModel):
    tier: str
    cap_usd_micros: int = Field(description="The daily cap; -1 when the tier is unmetered.")
    spent_usd_micros: int = Field(description="Spent today (UTC), every model call included.")
    reserved_usd_micros: int = Field(description="Held for model calls in flight right now.")
    percent: float | None = Field(description="spent / cap x 100; null when unmetered.")
    resets_at: datetime = Field(description="The next 00:00 UTC.")


@get("/v1/usage", summary="The org's model spend today against its daily cap")
async def org_usage(request: AuthedRequest, services: ServicesDep) -> UsageOut:
    org_id = request.user.org_id
    tier, cap = services.kit.caps.cap(await services.store.spend.tier(org_id))
    day = utc_day()
    today = await services.store.spend.today(org_id, day)
    metered = cap != UNMETERED
    return UsageOut(
        tier=tier,
        cap_usd_micros=cap,
        spent_usd_micros=today.spent_usd_micros,
        reserved_usd_micros=today.reserved_usd_micros,
        percent=round(100 * today.spent_usd_micros / cap, 2) if metered and cap > 0 else None,
        resets_at=resets_at(day),
    )
