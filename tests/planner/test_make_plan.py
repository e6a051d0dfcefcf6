"""Triage and planning with stubbed models: strategies, repair, fallback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from planner import Catalogue, Plan, PlanLimits, Planning, find_cycle, make_plan, validate_plan
from providers import FunctionModel, ModelError, ModelRequest, Reply, ScriptedModel, TokenUsage

CATALOGUE = Catalogue(
    tools={
        "members.search": "members.search: find members by name or email",
        "members.get": "members.get: one member's details",
        "workouts.create": "workouts.create: create a workout",
    },
    read_tools=["members.search", "members.get"],
    sources={"schedule": "upcoming class sessions", "profile": "the user and their org"},
)
PLANNING = Planning(catalogue=CATALOGUE)


def plan_json(**fields: Any) -> str:
    return json.dumps({"reasoning": "because", **fields})


SIMPLE = plan_json(strategy="simple")
TOOL = plan_json(
    strategy="tool",
    steps=[{"id": "s1", "goal": "find Sam", "tools": ["members.search"], "max_tool_calls": 2}],
    sources=[{"name": "schedule", "why": "classes", "params": {"days_ahead": 7}}],
)
COMPLEX = plan_json(
    strategy="complex",
    executors=5,
    steps=[
        {"id": "s1", "goal": "find Sam", "tools": ["members.search"]},
        {"id": "s2", "goal": "find Ada", "tools": ["members.search"]},
        {
            "id": "s3",
            "goal": "create workouts for both",
            "tools": ["workouts.create"],
            "depends_on": ["s1", "s2"],
            "max_tool_calls": 99,
        },
    ],
)


async def test_each_strategy_is_accepted_as_planned() -> None:
    usage = TokenUsage(input_tokens=1_000, output_tokens=100)
    model = ScriptedModel([Reply(text=t, usage=usage) for t in (SIMPLE, TOOL, COMPLEX)])
    simple = await make_plan(model, "hi!", PLANNING)
    tool = await make_plan(model, "find Sam", PLANNING)
    complex_ = await make_plan(model, "plan for Sam and Ada", PLANNING)
    model.assert_complete()

    assert simple.plan == Plan(strategy="simple", reasoning="because")
    assert (simple.attempts, simple.fallback, simple.problems) == (1, None, ())
    assert simple.usage == usage
    assert tool.plan.steps[0].tools == ["members.search"]
    assert tool.plan.sources[0].params == {"days_ahead": 7}
    assert [s.id for s in complex_.plan.steps] == ["s1", "s2", "s3"]
    assert complex_.plan.steps[2].max_tool_calls == 10  # clamped to the limit
    assert complex_.plan.executors == 3  # clamped to max_executors

    request = model.calls[0]
    assert request.response_schema is not None and request.response_schema.name == "plan"
    [system] = request.system
    assert system.cache
    assert "members.search: find members" in system.text
    assert "schedule: upcoming class sessions" in system.text
    report = simple.budget
    assert report is not None and report.role == "planner"
    used = {s.name: s.used for s in report.sections}
    assert 0 < used["system"] <= 800 and used["conversation"] == 0 and report.cuts == ()
    assert request.messages[-1].text.endswith("hi!")


async def test_an_unknown_tool_is_repaired_once() -> None:
    bad = plan_json(strategy="tool", steps=[{"id": "s1", "goal": "x", "tools": ["members.nuke"]}])
    model = ScriptedModel([bad, TOOL])
    outcome = await make_plan(model, "find Sam", PLANNING)
    assert outcome.attempts == 2 and outcome.repaired
    assert outcome.problems == ("step 's1' uses unknown tools ['members.nuke']",)
    assert outcome.plan.steps[0].tools == ["members.search"]
    repair = model.calls[1].messages
    assert [m.role for m in repair] == ["user", "assistant", "user"]
    assert repair[1].text == bad
    assert "members.nuke" in repair[2].text


async def test_a_cycle_is_repaired_and_bad_json_twice_falls_back() -> None:
    cyclic = plan_json(
        strategy="complex",
        steps=[
            {"id": "a", "goal": "x", "depends_on": ["b"]},
            {"id": "b", "goal": "y", "depends_on": ["a"]},
        ],
    )
    repaired = await make_plan(ScriptedModel([cyclic, SIMPLE]), "hi", PLANNING)
    assert repaired.problems == ("dependency cycle: a -> b -> a",)
    assert repaired.plan.strategy == "simple"

    model = ScriptedModel(["not json at all", '{"strategy": "sometimes"}'])
    fallback = await make_plan(model, "find Sam please", PLANNING)
    assert fallback.attempts == 2
    assert fallback.fallback is not None and "still invalid" in fallback.fallback
    assert "not a valid plan JSON" in fallback.problems[0]
    assert fallback.plan.strategy == "tool"
    # a direct answer with the agent's tools (writes still ask for their approvals)
    assert fallback.plan.steps[0].tools == ["members.search", "members.get", "workouts.create"]
    assert fallback.plan.steps[0].goal == "find Sam please"
    assert fallback.plan.steps[0].max_tool_calls == 10  # the step limit, not a small default
    assert fallback.plan.reasoning.startswith("Fallback plan:")


async def test_an_invalid_plan_falls_back_keeping_its_valid_sources_and_first_problem() -> None:
    """The repair's own parse error does not hide what was wrong first, and the sources
    the plan picked validly are still loaded."""
    first = plan_json(
        strategy="tool",
        steps=[{"id": "s1", "goal": "x", "tools": ["members.nuke"]}],
        sources=[{"name": "schedule", "params": {"days_ahead": 3}}, {"name": "weather"}],
    )
    model = ScriptedModel([first, "sorry, I cannot"])
    outcome = await make_plan(model, "find Sam", PLANNING)
    model.assert_complete()
    assert outcome.fallback == (
        "the plan was still invalid after one repair; "
        "the first problem: step 's1' uses unknown tools ['members.nuke']"
    )
    assert [(s.name, s.params) for s in outcome.plan.sources] == [("schedule", {"days_ahead": 3})]
    assert outcome.fallback_code == "invalid_plan"
    assert outcome.plan.strategy == "tool" and outcome.attempts == 2

    # the repair's plan parses: its valid sources are the ones kept (the latest word)
    repaired_badly = plan_json(
        strategy="simple", steps=[{"id": "s1", "goal": "x"}], sources=[{"name": "profile"}]
    )
    outcome = await make_plan(ScriptedModel([first, repaired_badly]), "find Sam", PLANNING)
    assert [s.name for s in outcome.plan.sources] == ["profile"]
    assert outcome.fallback is not None and "members.nuke" in outcome.fallback


async def test_a_fallback_without_tools_is_a_plain_answer() -> None:
    planning = Planning(catalogue=Catalogue(tools={}, read_tools=[]))
    outcome = await make_plan(ScriptedModel(["no", "no"]), "hi", planning)
    assert outcome.plan.strategy == "simple" and outcome.plan.steps == []


async def test_a_provider_error_is_raised_not_planned_around() -> None:
    """An outage is not a plan problem: a fallback plan would call the same provider."""

    def overloaded(_request: ModelRequest) -> str:
        raise ModelError("provider_overloaded", "busy", retry_after_s=3.0)

    model = FunctionModel(overloaded)
    with pytest.raises(ModelError) as raised:
        await make_plan(model, "find Sam", PLANNING)
    assert (raised.value.code, raised.value.retry_after_s) == ("provider_overloaded", 3.0)
    assert len(model.calls) == 1  # no repair round either


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("provider_overloaded", "planner failed: overloaded"),
        ("provider_unavailable", "planner failed: unavailable"),
        ("provider_timeout", "planner failed: timeout"),
        ("provider_rate_limited", "planner failed: rate_limited"),
        ("provider_invalid_request", "planner failed: invalid_request"),
    ],
)
async def test_a_turns_planner_failure_falls_back_with_its_code(code: str, reason: str) -> None:
    """For a turn (``on_error="fallback"``) any provider failure is contained (trainer
    spec §12.3): the main loop still runs, and the reason names the classified code."""

    def failing(_request: ModelRequest) -> str:
        raise ModelError(code, "nope")  # type: ignore[arg-type]

    model = FunctionModel(failing)
    outcome = await make_plan(model, "find Sam", PLANNING, on_error="fallback")
    assert outcome.fallback == reason and outcome.attempts == 1
    assert outcome.fallback_code == code
    assert outcome.plan.strategy == "tool" and outcome.plan.steps[0].goal == "find Sam"


async def test_a_failed_repair_names_the_first_problem_and_keeps_the_usage() -> None:
    usage = TokenUsage(input_tokens=700, output_tokens=40)
    bad = plan_json(
        strategy="tool",
        steps=[{"id": "s1", "goal": "x", "tools": ["members.nuke"]}],
        sources=[{"name": "schedule"}],
    )
    replies = iter([Reply(text=bad, usage=usage)])

    def then_overloaded(_request: ModelRequest) -> Reply:
        reply = next(replies, None)
        if reply is None:
            raise ModelError("provider_overloaded", "busy")
        return reply

    outcome = await make_plan(
        FunctionModel(then_overloaded), "find Sam", PLANNING, on_error="fallback"
    )
    assert outcome.fallback == (
        "planner failed: overloaded; the first problem: step 's1' uses unknown tools "
        "['members.nuke']"
    )
    assert [s.name for s in outcome.plan.sources] == ["schedule"]
    assert outcome.usage == usage and outcome.attempts == 2


async def test_anything_but_a_provider_failure_still_raises() -> None:
    """A cap's refusal (the turn's meter raises its own error) must stop the turn."""

    class Refused(Exception):
        pass

    def refused(_request: ModelRequest) -> str:
        raise Refused

    with pytest.raises(Refused):
        await make_plan(FunctionModel(refused), "x", PLANNING, on_error="fallback")


async def test_a_timeout_degrades_to_the_fallback() -> None:
    async def slow(_request: ModelRequest) -> str:
        await asyncio.sleep(5)
        return SIMPLE

    timed_out = await make_plan(
        FunctionModel(slow), "x", Planning(catalogue=CATALOGUE, timeout_s=0.05)
    )
    assert timed_out.fallback == "the planner model did not answer within 0.05 s"


def test_validation_names_every_problem() -> None:
    plan = Plan.model_validate_json(
        plan_json(
            strategy="complex",
            sources=[{"name": "weather"}],
            steps=[
                {"id": "s1", "goal": "x", "tools": ["members.get"], "depends_on": ["s1", "s9"]},
            ],
        )
    )
    problems = validate_plan(
        plan, tools=CATALOGUE.tools, sources=CATALOGUE.sources, limits=PlanLimits()
    )
    assert problems == [
        "strategy 'complex' needs 2 to 5 steps, not 1",
        "step 's1' depends on missing or itself: ['s1', 's9']",
        "dependency cycle: s1 -> s1",
        "unknown sources ['weather']; choose from ['profile', 'schedule']",
    ]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]


async def test_a_long_history_is_fitted_into_the_planner_budget() -> None:
    from providers import Message

    history = [
        Message.user(f"message {i}: " + "lorem ipsum dolor sit amet " * 20)
        if i % 2 == 0
        else Message.assistant(f"reply {i}: " + "consectetur adipiscing elit " * 20)
        for i in range(200)
    ]
    model = ScriptedModel([SIMPLE])
    outcome = await make_plan(model, "and now?", PLANNING, history=history)
    report = outcome.budget
    assert report is not None
    conversation = next(s for s in report.sections if s.name == "conversation")
    assert 0 < conversation.used <= conversation.allocated == 2_500
    assert {c.action for c in report.cuts if c.section == "conversation"} >= {"dropped"}
    sent = model.calls[0].messages
    assert len(sent) < 200 and sent[-1].text.endswith("and now?")


def test_the_documented_prompt_is_the_real_one() -> None:
    from pathlib import Path

    from planner._prompt import instructions

    docs = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text()
    assert instructions(max_steps=5, max_tool_calls=10) in docs
