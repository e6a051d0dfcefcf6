"""A turn with a planner: plan, preload sources (append-only), answer with that context."""

from __future__ import annotations

import json
from typing import Any

from bosun_demo import demo_registry, seed_demo
from conftest import ServerFactory
from helpers import stream_turn, types
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage
from turn import TurnModels


def plan(**fields: Any) -> Reply:
    body = {"strategy": "simple", "reasoning": "r", **fields}
    return Reply(text=json.dumps(body), usage=TokenUsage(input_tokens=500, output_tokens=50))


async def test_the_plan_picks_sources_and_the_answer_sees_them(make_server: ServerFactory) -> None:
    planner = ScriptedModel(
        [
            plan(sources=[{"name": "schedule", "why": "classes", "params": {"days_ahead": 7}}]),
            plan(sources=[{"name": "schedule", "params": {"days_ahead": 3}}]),  # covered
            plan(sources=[{"name": "schedule", "params": {"days_ahead": 14}}]),  # wider: loads
        ]
    )
    seen: list[ModelRequest] = []

    def answerer(request: ModelRequest) -> str:
        seen.append(request)
        return "Here is what is coming up."

    models = TurnModels(planner=planner, executor=FunctionModel(answerer))
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        first = await stream_turn(server.client, {"message": "what's on this week?"}, headers)
        session = {"session_id": first[0].data["session_id"]}
        second = await stream_turn(server.client, {"message": "and in 3 days?", **session}, headers)
        third = await stream_turn(server.client, {"message": "next fortnight?", **session}, headers)

    assert types(first)[:5] == [
        "session_started",
        "user_message",
        "plan_created",
        "context_budget",
        "context_loaded",
    ]
    assert first[2].data["strategy"] == "simple" and first[2].data["sources"] == ["schedule"]
    loaded = first[4].data
    assert (loaded["source"], loaded["params"]) == ("schedule", {"days_ahead": 7})
    assert loaded["tokens"] > 0 and "sessions" in loaded["text"]
    assert "context_loaded" not in types(second)  # already holds a wider load
    assert [f.data["params"] for f in third if f.event == "context_loaded"] == [{"days_ahead": 14}]
    knowledge = "\n".join(b.text for b in seen[0].system)
    assert "Context (schedule)" in knowledge
    assert "Context (schedule)" in "\n".join(
        b.text for b in seen[1].system
    )  # reused, not refetched
    usage = first[-2].data
    assert set(usage["by_role"]) == {"planner", "merger"}
    assert usage["by_role"]["planner"]["input_tokens"] == 500
    budgets = [f.data for f in first if f.event == "context_budget"]
    assert [b["role"] for b in budgets] == ["planner", "merger"]
    planner.assert_complete()


async def test_a_failing_source_is_recorded_and_skipped(make_server: ServerFactory) -> None:
    planner = ScriptedModel(
        [plan(sources=[{"name": "schedule", "params": {"days_ahead": 999}}])]  # out of range
    )
    models = TurnModels(planner=planner, executor=FunctionModel(lambda _r: "ok"))
    async with make_server(models) as server:
        frames = await stream_turn(server.client, {"message": "x"}, server.auth(role="owner"))
    [loaded] = [f.data for f in frames if f.event == "context_loaded"]
    assert loaded["source"] == "schedule" and loaded["tokens"] == 0
    assert "days_ahead" in loaded["error"]
    assert frames[-1].data["status"] == "completed"


async def test_a_planner_failure_falls_back_and_the_turn_still_answers(
    make_server: ServerFactory,
) -> None:
    planner = ScriptedModel(["not a plan", '{"strategy": "sometimes"}'])
    models = TurnModels(planner=planner, executor=FunctionModel(lambda _r: "answered"))
    async with make_server(models) as server:
        frames = await stream_turn(
            server.client, {"message": "find Sam"}, server.auth(role="owner")
        )
    plan_created = next(f.data for f in frames if f.event == "plan_created")
    assert plan_created["strategy"] == "tool"
    assert plan_created["fallback"] == (
        "the plan was still invalid after one repair; the first problem: the reply is not a "
        "valid plan JSON object (reply: Invalid JSON: expected ident at line 1 column 2)"
    )  # the first problem, not the repair's (an unknown strategy)
    # a direct answer with the agent's tools: every tool the caller may use
    tools = {t.name for t in demo_registry().for_role("owner")}
    assert set(plan_created["steps"][0]["tools"]) == tools
    assert "".join(f.data["delta"] for f in frames if f.event == "text_delta") == "answered"
