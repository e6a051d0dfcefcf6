"""The demo context fetchers: profile, schedule and recent activity, bounded and per org."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bosun_demo import demo_registry, profile, recent_activity, schedule, seed_demo
from store import Store
from tools import ToolContext

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def without_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in rows:
        assert isinstance(row.pop("id"), str)
        row.pop("member_id", None)
    return rows


async def test_profile_summarises_the_org_and_the_caller(store: Store) -> None:
    await seed_demo(store, "acme", now=NOW)
    assert await profile(store, "acme", "ada", role="owner") == {
        "org": {"id": "acme", "tier": "lite"},
        "user": {"id": "ada", "role": "owner"},
        "counts": {
            "members": 8,
            "active_members": 6,
            "programs": 3,
            "published_programs": 2,
            "open_tasks": 3,
        },
    }
    assert await profile(store, "nobody", "bob") == {
        "org": {"id": "nobody", "tier": None},
        "user": {"id": "bob", "role": None},
        "counts": {
            "members": 0,
            "active_members": 0,
            "programs": 0,
            "published_programs": 0,
            "open_tasks": 0,
        },
    }


async def test_schedule_lists_whats_coming_within_the_window(store: Store) -> None:
    await seed_demo(store, "acme", now=NOW)
    await seed_demo(store, "globex", now=NOW + timedelta(hours=1))
    two_days = await schedule(store, "acme", days_ahead=2, now=NOW)
    assert json.loads(json.dumps(two_days)) == two_days  # JSON-able as is
    assert {**two_days, "class_sessions": [], "workouts": []} == {
        "from": "2026-03-02T09:30:00+00:00",
        "to": "2026-03-04T09:30:00+00:00",
        "class_sessions": [],
        "workouts": [],
        "truncated": False,
    }
    assert without_ids(two_days["class_sessions"]) == [
        {
            "title": "Morning HIIT",
            "coach": "Jo Park",
            "starts_at": "2026-03-03T07:00:00+00:00",
            "duration_min": 60,
            "capacity": 14,
            "status": "scheduled",
        },
        {
            "title": "Olympic lifting",
            "coach": "Luis Ortega",
            "starts_at": "2026-03-03T18:00:00+00:00",
            "duration_min": 60,
            "capacity": 8,
            "status": "scheduled",
        },
    ]
    assert without_ids(two_days["workouts"]) == [
        {
            "title": "Lower body strength",
            "scheduled_for": "2026-03-03T07:00:00+00:00",
            "duration_min": 60,
            "member": "Sam Rivera",
        }
    ]
    week = await schedule(store, "acme", now=NOW)
    assert [(c["title"], c["starts_at"][:10]) for c in week["class_sessions"]] == [
        ("Morning HIIT", "2026-03-03"),
        ("Olympic lifting", "2026-03-03"),
        ("Mobility flow", "2026-03-04"),
        ("Strength club", "2026-03-05"),
        ("Morning HIIT", "2026-03-06"),
        ("Open gym", "2026-03-08"),
    ]
    assert [(w["title"], w["member"]) for w in week["workouts"]] == [
        ("Lower body strength", "Sam Rivera"),
        ("Knee-friendly conditioning", "Sam Okafor"),
        ("Tempo run + core", "Sam Rivera"),
    ]
    assert week["truncated"] is False
    capped = await schedule(store, "acme", now=NOW, limit=2)
    assert [len(capped["class_sessions"]), len(capped["workouts"]), capped["truncated"]] == [
        2,
        2,
        True,
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"days_ahead": 0}, "days_ahead must be between 1 and 60, not 0"),
        ({"days_ahead": 61}, "days_ahead must be between 1 and 60, not 61"),
        ({"limit": 0}, "limit must be between 1 and 100, not 0"),
    ],
)
async def test_fetchers_refuse_unbounded_requests(
    sqlite_url: str, kwargs: dict[str, int], message: str
) -> None:
    store = Store(sqlite_url)  # never queried: the bounds are checked first
    try:
        with pytest.raises(ValueError, match=message):
            await schedule(store, "acme", **kwargs)
        with pytest.raises(ValueError, match="days_back must be between 1 and 60, not 90"):
            await recent_activity(store, "acme", days_back=90)
    finally:
        await store.close()


async def test_recent_activity_shows_new_rows_and_agent_changes(store: Store) -> None:
    await seed_demo(store, "acme", now=NOW)
    later = await recent_activity(store, "acme", days_back=7, now=NOW + timedelta(days=1))
    assert later["since"] == "2026-02-24T09:30:00+00:00"
    assert later["audit"] == []
    assert sorted(w["title"] for w in later["workouts_created"]) == [
        "Engine builder",
        "Intro to the barbell",
        "Knee-friendly conditioning",
        "Lower body strength",
        "Tempo run + core",
    ]
    assert sorted((t["title"], t["due_on"], t["done"]) for t in later["tasks_created"]) == [
        ("Call Marcus Lee about pausing his membership", "2026-03-04", False),
        ("Finish the Competition Prep program", "2026-03-07", False),
        ("Order four 16 kg kettlebells", "2026-03-09", False),
        ("Review Sam Okafor's rehab plan with the physio", "2026-03-01", True),
    ]
    long_after = await recent_activity(store, "acme", days_back=7, now=NOW + timedelta(days=8))
    assert [long_after["workouts_created"], long_after["tasks_created"]] == [[], []]

    # An agent write shows up at the top, marked as the agent's.
    tool = demo_registry().get("tasks.create")
    assert tool.handler is not None
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="staff")
    task = await tool.handler(tool.input_model(title="Restock chalk"), ctx)
    now = await recent_activity(store, "acme", limit=1)
    assert [{k: v for k, v in a.items() if k != "at"} for a in now["audit"]] == [
        {"action": "task.created", "target": f"task:{task.id}", "agent": True, "user_id": "ada"}
    ]
    assert [t["title"] for t in now["tasks_created"]] == ["Restock chalk"]
    assert now["workouts_created"] == []
    assert now["truncated"] is False
    assert await recent_activity(store, "globex", now=NOW) == {
        "since": "2026-02-23T09:30:00+00:00",
        "audit": [],
        "workouts_created": [],
        "tasks_created": [],
        "truncated": False,
    }
