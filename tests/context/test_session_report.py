"""The session budget report, folded from a real log on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from context import (
    EXECUTOR_BUDGET,
    MERGER_BUDGET,
    PLANNER_BUDGET,
    BudgetReport,
    Cut,
    SectionFill,
    TokenCounter,
    UsageFigures,
    fit_text,
    read_session_budget,
)
from context._session_report import session_budget_report
from events import (
    ContextBudget,
    ContextLoaded,
    Done,
    Event,
    HistorySummarised,
    MessageDone,
    PlanCreated,
    SessionStarted,
    TextDelta,
    TurnStatus,
    Usage,
    UserMessage,
)
from store import Store

COUNTER = TokenCounter()
SECRET_USER_TEXT = "my locker code is 4471 xylophone"
SECRET_SOURCE_TEXT = "Sam Quokka, member since 2019"
SECRET_SUMMARY = "The user said quokka twice"


def _role_usage(i: int, o: int, read: int, write: int, cost: int) -> dict[str, int]:
    return {
        "input_tokens": i,
        "output_tokens": o,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "cache_write_1h_tokens": 0,
        "cost_usd_micros": cost,
    }


def _usage(**by_role: dict[str, int]) -> Usage:
    def total(key: str) -> int:
        return sum(figures[key] for figures in by_role.values())

    return Usage(
        input_tokens=total("input_tokens"),
        output_tokens=total("output_tokens"),
        cache_read_tokens=total("cache_read_tokens"),
        cache_write_tokens=total("cache_write_tokens"),
        cost_usd_micros=total("cost_usd_micros"),
        by_role=by_role,
    )


def _planner_report() -> BudgetReport:
    system = fit_text("system", 800, "Plan the turn.", counter=COUNTER)
    profile = fit_text("profile", 20, "likes yoga " * 40, counter=COUNTER)  # truncated
    return BudgetReport.build(PLANNER_BUDGET, [system, profile])


def _merger_report(*, compressed: Cut | None = None) -> BudgetReport:
    system = fit_text("system", 400, "Answer from the results.", counter=COUNTER)
    conversation = SectionFill(
        name="conversation",
        allocated=1_000,
        used=300,
        text="",
        cuts=(compressed,) if compressed else (),
    )
    return BudgetReport.build(MERGER_BUDGET, [system, conversation])


async def _turn(
    store: Store,
    session_id: str,
    turn_id: str,
    events: list[Event],
    *,
    status: TurnStatus = "completed",
) -> None:
    opening: list[Event] = [
        SessionStarted(session_id=session_id, turn_id=turn_id),
        UserMessage(message_id=f"m-{turn_id}", text=SECRET_USER_TEXT),
    ]
    await store.log.open_turn(session_id, opening, turn_id=turn_id, trace_id=f"tr-{turn_id}")
    closing: list[Event] = [Done(session_id=session_id, status=status)]
    await store.log.append(
        session_id,
        [*events, *closing],
        turn_id=turn_id,
        finish=status,
    )


async def _session(store: Store) -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="alice", session_id=session_id, title="t")
    return session_id


async def test_the_report_folds_calls_usage_sources_and_compression_per_turn(store: Store) -> None:
    session_id = await _session(store)
    planner, merger = _planner_report(), _merger_report()
    step = BudgetReport.build(
        EXECUTOR_BUDGET, [fit_text("task", 200, "Find Sam", counter=COUNTER)], step_id="s1"
    )
    compressed = Cut(
        section="conversation",
        action="compressed",
        tokens_before=4_000,
        tokens_after=180,
        detail="30 messages up to seq 9 summarised",
    )
    await _turn(
        store,
        session_id,
        "t1",
        [
            PlanCreated(strategy="tool", reasoning="r", sources=["members"]),
            ContextBudget(role="planner", report=planner.to_dict()),
            ContextLoaded(source="members", tokens=120, truncated=True, text=SECRET_SOURCE_TEXT),
            ContextLoaded(source="schedule", tokens=0, truncated=False, error="timed out"),
            ContextBudget(role="executor", step_id="s1", report=step.to_dict()),
            TextDelta(delta="Sam is here"),
            ContextBudget(role="merger", report=merger.to_dict()),
            MessageDone(message_id="a1", stop_reason="end_turn"),
            _usage(
                planner=_role_usage(500, 50, 0, 800, 900),
                executor=_role_usage(300, 20, 100, 0, 200),
                merger=_role_usage(200, 30, 0, 0, 400),
            ),
        ],
    )
    await _turn(
        store,
        session_id,
        "t2",
        [
            HistorySummarised(summary=SECRET_SUMMARY, up_to_seq=9),
            ContextBudget(role="merger", report=_merger_report(compressed=compressed).to_dict()),
            _usage(merger=_role_usage(100, 10, 900, 0, 150)),
        ],
    )

    report = await read_session_budget(store, session_id)
    data = report.to_dict()

    turns = await store.sessions.turns(session_id)
    assert [t["turn_id"] for t in data["turns"]] == ["t1", "t2"]
    first, second = data["turns"]
    assert first["status"] == "completed"
    assert first["started_at"] == turns[0].started_at.isoformat().replace("+00:00", "Z")
    assert [(c["role"], c["step_id"]) for c in first["calls"]] == [
        ("planner", None),
        ("executor", "s1"),
        ("merger", None),
    ]
    assert first["calls"] == [planner.to_dict(), step.to_dict(), merger.to_dict()]
    profile_cut = first["calls"][0]["cuts"]
    assert [(c["section"], c["action"]) for c in profile_cut] == [("profile", "truncated")]
    assert first["calls"][0]["sections"][3] == {"name": "profile", "allocated": 300, "used": 20}
    assert first["sources"] == [
        {"source": "members", "tokens": 120, "truncated": True, "error": None,
         "budget": None, "cuts": []},
        {"source": "schedule", "tokens": 0, "truncated": False, "error": "timed out",
         "budget": None, "cuts": []},
    ]  # fmt: skip
    assert first["compressed"] == []
    assert first["usage"] == {
        "by_role": {
            "planner": {**_role_usage(500, 50, 0, 800, 900), "cache_hit_ratio": 0.0},
            "executor": {**_role_usage(300, 20, 100, 0, 200), "cache_hit_ratio": 0.25},
            "merger": {**_role_usage(200, 30, 0, 0, 400), "cache_hit_ratio": 0.0},
        },
        **_role_usage(1_000, 100, 100, 800, 1_500),
        "cache_hit_ratio": 100 / 1_100,
    }
    assert second["compressed"] == [{"up_to_seq": 9, "summary_tokens": 180}]
    assert second["calls"][0]["cuts"][0]["action"] == "compressed"
    assert data["totals"] == {
        "by_role": {
            "planner": {**_role_usage(500, 50, 0, 800, 900), "cache_hit_ratio": 0.0},
            "executor": {**_role_usage(300, 20, 100, 0, 200), "cache_hit_ratio": 0.25},
            "merger": {**_role_usage(300, 40, 900, 0, 550), "cache_hit_ratio": 0.75},
        },
        **_role_usage(1_100, 110, 1_000, 800, 1_650),
        "cache_hit_ratio": 1_000 / 2_100,
    }
    text = json.dumps(data)
    for private in (SECRET_USER_TEXT, SECRET_SOURCE_TEXT, SECRET_SUMMARY, "Sam is here"):
        assert private not in text  # numbers, names and keys only


def test_cache_hit_ratio_is_null_without_input_or_cache_reads() -> None:
    assert UsageFigures().cache_hit_ratio is None
    assert UsageFigures(output_tokens=5, cache_write_tokens=9).cache_hit_ratio is None
    assert UsageFigures(cache_read_tokens=3).cache_hit_ratio == 1.0
    assert UsageFigures(input_tokens=3, cache_read_tokens=1).cache_hit_ratio == 0.25


async def test_failed_running_and_unrecorded_turns(store: Store) -> None:
    session_id = await _session(store)
    await _turn(
        store,
        session_id,
        "t1",
        [ContextBudget(role="planner", report=_planner_report().to_dict())],
        status="failed",
    )
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id="t2")],
        turn_id="t2",
        trace_id="x",
    )
    report = await read_session_budget(store, session_id)
    data = report.to_dict()
    assert [(t["turn_id"], t["status"], len(t["calls"])) for t in data["turns"]] == [
        ("t1", "failed", 1),
        ("t2", "running", 0),
    ]
    failed = data["turns"][0]["usage"]  # no usage event: the turn failed before it
    assert failed == {"by_role": {}, **_role_usage(0, 0, 0, 0, 0), "cache_hit_ratio": None}
    assert data["totals"]["cache_hit_ratio"] is None

    # A turn in the log that the turns table does not know: status from its done event.
    events = await store.log.read(session_id)
    orphan = [
        *events,
        *(
            await store.log.append(
                session_id,
                [
                    _usage(merger=_role_usage(1, 1, 1, 0, 1)),
                    Done(session_id=session_id, status="completed"),
                ],
                turn_id="t3",
            )
        ),
    ]
    rebuilt = session_budget_report(session_id, orphan, await store.sessions.turns(session_id))
    last = rebuilt.turns[-1]
    assert (last.turn_id, last.status, last.usage.total.cache_hit_ratio) == ("t3", "completed", 0.5)
    assert last.started_at == orphan[-1].created_at


async def test_a_malformed_persisted_report_is_an_error_not_a_silent_gap(store: Store) -> None:
    session_id = await _session(store)
    bad: dict[str, Any] = {**_planner_report().to_dict(), "sections": [{"name": "system"}]}
    await _turn(store, session_id, "t1", [ContextBudget(role="planner", report=bad)])
    with pytest.raises(ValidationError):
        await read_session_budget(store, session_id)
