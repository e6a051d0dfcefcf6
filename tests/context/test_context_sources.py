"""Context sources: parallel loads, timeouts and failures, summary-first fitting, and the
append-only knowledge rules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from context import (
    Source,
    SourceLoad,
    SourceRegistry,
    SourceRequest,
    SourceScope,
    TokenCounter,
    UnknownSourceError,
    covers,
    load_sources,
    loads_from_log,
    loads_needed,
)
from store import StoredEvent

SCOPE = SourceScope(org_id="acme", user_id="ada", session_id="s1")
COUNTER = TokenCounter()


def _constant(value: Any) -> Source:
    async def fetch(request: SourceRequest) -> Any:
        return value

    return Source(name="const", description="A constant.", fetch=fetch)


def test_registry_registers_describes_and_refuses_duplicates() -> None:
    profile = Source(
        name="profile",
        description="The user's profile.",
        fetch=_constant({}).fetch,
        estimate_tokens=150,
    )
    schedule = Source(
        name="schedule",
        description="Upcoming events.",
        fetch=_constant([]).fetch,
        estimate_tokens=1_200,
    )
    registry = SourceRegistry([profile, schedule])
    assert registry.names() == ["profile", "schedule"]
    assert registry.get("schedule") is schedule
    assert registry.describe() == (
        "- profile (~150 tokens): The user's profile.\n- schedule (~1,200 tokens): Upcoming events."
    )
    with pytest.raises(ValueError, match="'profile' is already registered"):
        registry.register(profile)
    with pytest.raises(UnknownSourceError, match=r"No context source 'nope'; registered: \["):
        registry.get("nope")


async def test_sources_load_in_parallel_with_their_requests() -> None:
    started = 0
    both = asyncio.Event()
    seen: list[SourceRequest] = []

    async def fetch(request: SourceRequest) -> Any:
        nonlocal started
        seen.append(request)
        started += 1
        if started == 2:
            both.set()
        await both.wait()  # loaded one after the other, neither would get past this
        return {"days": request.params.get("days_back")}

    registry = SourceRegistry(
        [
            Source(name="history", description="h", fetch=fetch),
            Source(name="schedule", description="s", fetch=fetch, format=lambda d: f"S {d}"),
        ]
    )
    loaded = await load_sources(
        registry,
        [SourceLoad(name="history", params={"days_back": 7}), SourceLoad(name="schedule")],
        scope=SCOPE,
        counter=COUNTER,
        budget_tokens=1_000,
        timeout_s=5,
    )
    assert [(r.name, r.ok, r.truncated) for r in loaded.results] == [
        ("history", True, False),
        ("schedule", True, False),
    ]
    assert seen[0] == SourceRequest(
        org_id="acme", user_id="ada", session_id="s1", params={"days_back": 7}
    )
    history_text, schedule_text = (r.text for r in loaded.results)
    assert history_text == '<source name="history">\n{"days":7}\n</source>'
    assert schedule_text == "<source name=\"schedule\">\nS {'days': None}\n</source>"
    assert loaded.fill.text == f"{history_text}\n\n{schedule_text}"
    assert loaded.results[0].tokens == COUNTER.count(history_text)
    assert loaded.fill.cuts == ()


async def test_failing_and_slow_sources_are_recorded_and_skipped() -> None:
    async def broken(request: SourceRequest) -> Any:
        raise ValueError("database said no")

    async def stuck(request: SourceRequest) -> Any:
        await asyncio.Event().wait()

    registry = SourceRegistry(
        [
            Source(name="broken", description="b", fetch=broken),
            Source(name="stuck", description="s", fetch=stuck),
            Source(name="fine", description="f", fetch=_constant("all good").fetch),
        ]
    )
    with capture_logs() as logs:
        loaded = await load_sources(
            registry,
            [SourceLoad(name=n) for n in ("broken", "stuck", "missing", "fine")],
            scope=SCOPE,
            counter=COUNTER,
            budget_tokens=500,
            timeout_s=0.05,
        )
    assert [(r.name, r.ok, r.tokens, r.error) for r in loaded.results] == [
        ("broken", False, 0, "ValueError: database said no"),
        ("stuck", False, 0, "timed out after 0.05 s"),
        ("missing", False, 0, f"No context source 'missing'; registered: {registry.names()}"),
        ("fine", True, COUNTER.count('<source name="fine">\nall good\n</source>'), None),
    ]
    assert loaded.fill.text == '<source name="fine">\nall good\n</source>'
    assert sorted((log["event"], log["source"]) for log in logs) == [
        ("context.source_failed", "broken"),
        ("context.source_failed", "missing"),
        ("context.source_failed", "stuck"),
    ]


def _big_log() -> list[dict[str, Any]]:
    return [
        {"day": f"2025-01-{1 + i % 28:02d}", "entry": f"Session {i}: " + "squats and rows " * 8}
        for i in range(330)
    ]


async def test_a_large_source_is_summarised_first_when_over_budget() -> None:
    data = _big_log()

    async def fetch(request: SourceRequest) -> Any:
        return data

    source = Source(
        name="history",
        description="Training log.",
        fetch=fetch,
        summarise=lambda d: f"{len(d)} sessions, latest {d[-1]['day']}.",
        detail="call get_history(days_back=N) for entries",
    )
    loaded = await load_sources(
        SourceRegistry([source]),
        [SourceLoad(name="history", params={"days_back": 30})],
        scope=SCOPE,
        counter=COUNTER,
        budget_tokens=1_000,
    )
    (result,) = loaded.results
    assert result.ok and result.truncated
    assert result.text == (
        '<source name="history" abbreviated="true" '
        'detail="call get_history(days_back=N) for entries">\n'
        "330 sessions, latest 2025-01-22.\n</source>"
    )
    assert loaded.fill.used <= 1_000
    assert [c.action for c in loaded.fill.cuts] == ["abbreviated"]


async def test_a_large_source_without_summary_is_cut_to_fit() -> None:
    data = _big_log()

    async def fetch(request: SourceRequest) -> Any:
        return data

    loaded = await load_sources(
        SourceRegistry([Source(name="history", description="h", fetch=fetch)]),
        [SourceLoad(name="history")],
        scope=SCOPE,
        counter=COUNTER,
        budget_tokens=1_000,
    )
    (result,) = loaded.results
    assert result.ok and result.truncated
    assert result.text.startswith('<source name="history">\n[{"day":"2025-01-01"')
    assert "[… truncated " in result.text
    assert loaded.fill.used <= 1_000
    assert [c.action for c in loaded.fill.cuts] == ["truncated"]


# Append-only knowledge.


def _load(name: str, **params: Any) -> SourceLoad:
    return SourceLoad(name=name, params=params)


@pytest.mark.parametrize(
    ("loaded", "wanted", "covered"),
    [
        (_load("profile"), _load("profile"), True),
        (_load("history", days_back=7), _load("history", days_back=7), True),
        (_load("history", days_back=14), _load("history", days_back=7), True),
        (_load("history", days_back=7), _load("history", days_back=14), False),
        (_load("schedule", days_ahead=7), _load("schedule", days_ahead=3), True),
        (_load("schedule", days_ahead=3), _load("schedule", days_ahead=7.5), False),
        (_load("log", days_back=7, kind="run"), _load("log", days_back=3, kind="swim"), False),
        (_load("history", days_back=7), _load("history"), False),
        (_load("history"), _load("history", days_back=7), False),
        (_load("history", days_back=True), _load("history", days_back=1), False),
        (_load("history", days_back=7), _load("schedule", days_back=7), False),
    ],
)
def test_covers(loaded: SourceLoad, wanted: SourceLoad, covered: bool) -> None:
    assert covers(loaded, wanted) is covered


def test_loads_needed_skips_covered_loads_and_appends_wider_ones() -> None:
    loaded = [_load("profile"), _load("history", days_back=7)]
    snapshot = list(loaded)
    requested = [
        _load("profile"),  # already there
        _load("history", days_back=3),  # narrower: covered
        _load("history", days_back=30),  # wider: loads again, next to the old one
        _load("schedule", days_ahead=7),  # new
        _load("schedule", days_ahead=7),  # asked twice: once
    ]
    assert loads_needed(requested, loaded) == [
        _load("history", days_back=30),
        _load("schedule", days_ahead=7),
    ]
    assert loaded == snapshot  # pure: nothing replaced
    assert loads_needed([], loaded) == []
    assert loads_needed(requested[:2], []) == requested[:2]


def _event(seq: int, type_: str, data: dict[str, Any]) -> StoredEvent:
    return StoredEvent(
        session_id="s1",
        seq=seq,
        type=type_,
        data={**data, "type": type_},
        turn_id="t1",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def test_loads_from_log_reads_context_loaded_events() -> None:
    events = [
        _event(1, "context_loaded", {"source": "profile", "tokens": 80, "truncated": False}),
        _event(2, "text_delta", {"delta": "hi"}),
        _event(
            3,
            "context_loaded",
            {"source": "history", "tokens": 900, "truncated": True, "params": {"days_back": 7}},
        ),
        _event(4, "context_loaded", {"source": "schedule", "tokens": 0, "truncated": True}),
    ]
    assert loads_from_log(events) == [_load("profile"), _load("history", days_back=7)]
