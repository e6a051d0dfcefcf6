"""A turn's budget, split among its plan's steps: each executor checks its share before
every model call and wraps up as it runs out, instead of failing."""

from __future__ import annotations

from typing import Any

from executor_fakes import FakeRunner, kit, per_goal, scope
from executors import MERGE_RESERVE, PlanResult, StepResult, StepShare, run_plan, run_step
from planner import Plan, PlannedStep
from providers import FunctionModel, ModelRequest, Reply, TokenUsage, ToolCall

GOAL = "List the programs"


def _call(i: int, tokens: int = 0) -> Reply:
    return Reply(
        tool_calls=(ToolCall(id=f"c{i}", name="programs_list", input={}),),
        usage=TokenUsage(input_tokens=tokens),
    )


def _programs(_: dict[str, Any]) -> dict[str, Any]:
    return {"programs": [{"id": "prg_1", "title": "Couch to 5k"}]}


def test_a_budget_splits_evenly_and_keeps_the_merge_reserve() -> None:
    budget = StepShare(tokens=10_000, usd_micros=5_000, tool_calls=9, wall_s=100.0)
    assert budget.split(3) == StepShare(tokens=3_333, usd_micros=1_666, tool_calls=3, wall_s=100.0)
    held = budget.split(2, keep=MERGE_RESERVE)
    assert (held.tokens, held.usd_micros, held.wall_s) == (4_000, 2_000, 80.0)
    assert StepShare().split(4) == StepShare()  # no limits stay no limits


async def test_a_step_near_its_token_share_wraps_up_with_what_it_has() -> None:
    model = per_goal({GOAL: [_call(1, tokens=900), Reply(text="Couch to 5k.")]})
    step = PlannedStep(id="s1", goal=GOAL, tools=["programs.list"])

    result = await run_step(step, kit=kit(model, FakeRunner({"programs.list": _programs})),
                            scope=scope(), emit=lambda _: None,
                            share=StepShare(tokens=1_000))  # fmt: skip

    assert isinstance(result, StepResult)
    assert (result.ok, result.ended, result.tool_calls) == (True, "wrapped_up", 1)
    wrap_up = model.calls[1]
    assert wrap_up.tool_choice == "none"
    assert "share of the turn's tokens (1,000) is nearly used" in wrap_up.messages[-1].text


async def test_the_turns_tool_calls_are_shared_among_parallel_steps() -> None:
    goals = ["List the programs", "List the programs again"]
    model = per_goal({g: [_call(1), _call(2), Reply(text="Done.")] for g in goals})
    plan = Plan(strategy="complex", reasoning="two lists", executors=2,
                steps=[PlannedStep(id=f"s{i}", goal=g, tools=["programs.list"])
                       for i, g in enumerate(goals, 1)])  # fmt: skip

    outcome = await run_plan(
        plan, kit=kit(model, FakeRunner({"programs.list": _programs})), scope=scope(),
        emit=lambda _: None, budget=StepShare(tool_calls=4),
    )  # fmt: skip

    assert isinstance(outcome, PlanResult)
    assert [r.tool_calls for r in outcome.results] == [2, 2]  # 4 for the turn, 2 each
    assert all(r.ended == "wrapped_up" for r in outcome.results)


async def test_a_costly_step_wraps_up_on_its_cost_share() -> None:
    def priced(request: ModelRequest) -> Reply:
        turn = sum(m.role == "assistant" for m in request.messages)
        return _call(turn, tokens=1_000) if turn < 2 else Reply(text="Enough.")

    model = FunctionModel(priced, name="claude-haiku-4-5")  # $1 per million input tokens
    step = PlannedStep(id="s1", goal=GOAL, tools=["programs.list"])

    result = await run_step(step, kit=kit(model, FakeRunner({"programs.list": _programs})),
                            scope=scope(), emit=lambda _: None,
                            share=StepShare(usd_micros=1_500))  # fmt: skip

    assert isinstance(result, StepResult)
    assert result.ended == "wrapped_up" and result.cost_usd_micros == 2_000
