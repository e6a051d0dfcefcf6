"""Wiring of the demo toolset: its tools and its context sources, over one store.

The fetchers live with the demo domain (``bosun_demo``); the context layer cannot import
tools, so the composition root wraps them as named ``context.Source``s here.
"""

from __future__ import annotations

from typing import Any

from bosun_demo._sources import member_card, member_profile, profile, recent_activity, schedule
from context import Source, SourceRegistry, SourceRequest
from store import Store

SOURCE_DESCRIPTIONS = {
    "profile": "who is asking: the user, their role, the org and its size",
    "schedule": "upcoming class sessions (params: days_ahead, default 7)",
    "recent_activity": "recent changes: audit log, new workouts and tasks (params: days_back)",
    "members.profile": "the member the user is (name, status, notes) and their units",
    "members.card": "the member the user's page shows (client context entity `member`)",
}


def _int(params: Any, name: str, default: int) -> int:
    """A numeric planner parameter; out-of-range values are refused by the fetcher."""
    try:
        return int(params.get(name, default))
    except (TypeError, ValueError):
        return default


def demo_sources(store: Store) -> SourceRegistry:
    """The demo's context sources, fetching from ``store``."""

    async def fetch_profile(request: SourceRequest) -> dict[str, Any]:
        return await profile(store, request.org_id, request.user_id)

    async def fetch_member(request: SourceRequest) -> dict[str, Any]:
        return await member_profile(store, request.org_id, request.user_id)

    async def fetch_card(request: SourceRequest) -> dict[str, Any]:
        return await member_card(store, request.org_id, str(request.params.get("id", "")))

    async def fetch_schedule(request: SourceRequest) -> dict[str, Any]:
        return await schedule(store, request.org_id, _int(request.params, "days_ahead", 7))

    async def fetch_recent(request: SourceRequest) -> dict[str, Any]:
        return await recent_activity(store, request.org_id, _int(request.params, "days_back", 7))

    return SourceRegistry(
        [
            Source(
                name="profile",
                description=SOURCE_DESCRIPTIONS["profile"],
                fetch=fetch_profile,
                estimate_tokens=120,
            ),
            Source(
                name="schedule",
                description=SOURCE_DESCRIPTIONS["schedule"],
                fetch=fetch_schedule,
                estimate_tokens=400,
                detail="call class_sessions tools for more",
            ),
            Source(
                name="recent_activity",
                description=SOURCE_DESCRIPTIONS["recent_activity"],
                fetch=fetch_recent,
                estimate_tokens=400,
            ),
            Source(
                name="members.profile",
                description=SOURCE_DESCRIPTIONS["members.profile"],
                fetch=fetch_member,
                format=_member_text,
                estimate_tokens=80,
                budget_tokens=150,
                user_data=True,
            ),
            Source(
                name="members.card",
                description=SOURCE_DESCRIPTIONS["members.card"],
                fetch=fetch_card,
                estimate_tokens=150,
                budget_tokens=400,
                entity="member",
            ),
        ]
    )


def _member_text(data: dict[str, Any]) -> str:
    """Spec §4.4's plain lines: the member, then their units."""
    units = data["units"]
    lines = [f"Weight: {units['weight']}", f"Distance: {units['distance']}"]
    member = data["member"]
    if member is None:
        return "\n".join(["Member: not on the studio's books", *lines])
    name = f"{member['first_name']} {member['last_name']}"
    head = [f"Member: {name} ({member['id']})", f"Status: {member['status']}"]
    if member.get("notes"):
        head.append(f"Notes: {member['notes']}")
    return "\n".join([*head, *lines])
