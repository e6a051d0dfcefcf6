"""``bosun budget`` shows what per-source budgets cut and each model call's cache-hit ratio:
a turn whose planner picks a source larger than its own budget logs the cut on its
``context_loaded`` event, and the report (JSON and table) carries it; every model call's
usage is listed with its own ratio."""

from __future__ import annotations

import json
import uuid

from bosun.budget_report import render_table
from context import Source, SourceRegistry, SourceRequest, read_session_budget
from events import SessionStarted, UserMessage
from providers import FunctionModel, ModelRequest, Reply, TokenUsage
from store import Store
from turn import Turn, TurnKit, run_turn

PLAN = {"strategy": "simple", "reasoning": "r", "sources": [{"name": "schedule", "params": {}}]}
BIG = "Tuesday 18:00 yoga with Ana, room 2, 12 places left. " * 60


async def fetch(_request: SourceRequest) -> str:
    return BIG


def model() -> FunctionModel:
    async def reply(request: ModelRequest) -> Reply:
        planner = any("You are the planner" in b.text for b in request.system)
        if planner:
            return Reply(text=json.dumps(PLAN), usage=TokenUsage(input_tokens=300))
        usage = TokenUsage(input_tokens=100, cache_read_tokens=300, output_tokens=5)
        return Reply(text="Yoga on Tuesday.", usage=usage)

    return FunctionModel(reply, name="claude-haiku-4-5")


async def test_a_source_cut_to_its_own_budget_and_each_calls_ratio_are_reported(
    store: Store,
) -> None:
    source = Source(name="schedule", description="classes", fetch=fetch, budget_tokens=80)
    kit = TurnKit(sources=SourceRegistry([source]))
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="What's on?")],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    writer = model()
    turn = Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id="acme",
                user_id="ada", role="owner", message_id="m", text="What's on?",
                model=writer, planner=writer)  # fmt: skip

    assert await run_turn(store, turn, kit) == "completed"

    report = await read_session_budget(store, session_id)
    [turn_report] = report.to_dict()["turns"]
    [loaded] = turn_report["sources"]
    assert loaded["budget"] == 80 and loaded["truncated"] and 0 < loaded["tokens"] <= 80
    [cut] = loaded["cuts"]
    assert cut["action"] == "truncated" and cut["tokens_after"] <= 80 < cut["tokens_before"]
    calls = turn_report["model_calls"]
    assert [(c["role"], c["cache_hit_ratio"]) for c in calls] == [
        ("planner", 0.0),
        ("merger", 0.75),
    ]

    table = render_table(report)
    assert "source  schedule: " in table and "(own budget 80), truncated" in table
    assert "cut  source schedule: truncated" in table
    assert "source schedule over its own budget of 80 tokens" in table
    assert "1 planner" in table and "2 merger" in table and "75.0%" in table
