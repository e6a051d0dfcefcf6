"""Each bound of the executor loop, reached gracefully: the wrap-up request turns tools
off and says what remains; an executor that overruns even so ends ok=False, never hangs."""

from __future__ import annotations

import asyncio
from typing import Any

from events import Event, ToolCompleted, ToolStarted
from executor_fakes import FakeRunner, kit, per_goal, scope
from executors import StepResult, run_step
from planner import PlannedStep
from providers import ModelRequest, Reply, ToolCall

GOAL = "List the programs"


def _call(i: int) -> Reply:
    return Reply(tool_calls=(ToolCall(id=f"c{i}", name="programs_list", input={}),))


def _programs(_: dict[str, Any]) -> dict[str, Any]:
    return {"programs": [{"id": "prg_1", "title": "Couch to 5k"}]}


def _step(max_tool_calls: int = 10) -> PlannedStep:
    return PlannedStep(id="s1", goal=GOAL, tools=["programs.list"], max_tool_calls=max_tool_calls)


def _note(request: ModelRequest) -> str:
    return request.messages[-1].text


async def test_the_tool_call_budget_ends_in_a_wrap_up_with_tools_off() -> None:
    model = per_goal({GOAL: [_call(1), _call(2), Reply(text="One program: Couch to 5k.")]})
    runner = FakeRunner({"programs.list": _programs})

    result = await run_step(_step(max_tool_calls=2), kit=kit(model, runner, max_tool_calls=5),
                            scope=scope(), emit=lambda _: None)  # fmt: skip

    assert isinstance(result, StepResult)
    assert (result.ok, result.ended, result.tool_calls) == (True, "wrapped_up", 2)
    assert result.summary == "One program: Couch to 5k."
    first, _, wrap_up = model.calls
    assert (first.tool_choice, wrap_up.tool_choice) == ("auto", "none")
    assert _note(wrap_up) == (
        "[Step budget] all 2 tool calls of this step are used. Remaining: 0 of 2 tool calls "
        "and about 60 s of 60 s. This is your last model turn and tools are off: answer now "
        "with what you have, saying what you found or did and what is still missing."
    )
    assert wrap_up.tools == first.tools  # the prefix stays: only tool_choice changes


async def test_calls_past_the_budget_in_one_message_are_refused_not_run() -> None:
    three = Reply(tool_calls=tuple(ToolCall(id=f"c{i}", name="programs_list", input={})
                                   for i in range(3)))  # fmt: skip
    model = per_goal({GOAL: [three, Reply(text="Done.")]})
    runner = FakeRunner({"programs.list": _programs})
    events: list[Event] = []

    result = await run_step(_step(max_tool_calls=2), kit=kit(model, runner), scope=scope(),
                            emit=events.append)  # fmt: skip

    assert len(runner.runs) == 2
    completed = [e for e in events if isinstance(e, ToolCompleted)]
    assert [(e.tool_use_id, e.ok, e.error.code if e.error else None) for e in completed] == [
        ("c0", True, None), ("c1", True, None), ("c2", False, "tool_budget_spent"),
    ]  # fmt: skip
    assert isinstance(result, StepResult) and result.ended == "wrapped_up"
    assert model.calls[-1].tool_choice == "none"


async def test_the_last_model_turn_is_a_wrap_up() -> None:
    model = per_goal({GOAL: [_call(1), _call(2), Reply(text="Partial list.")]})
    runner = FakeRunner({"programs.list": _programs})

    result = await run_step(_step(), kit=kit(model, runner, max_model_turns=3), scope=scope(),
                            emit=lambda _: None)  # fmt: skip

    assert isinstance(result, StepResult) and result.ended == "wrapped_up"
    assert [r.tool_choice for r in model.calls] == ["auto", "auto", "none"]
    assert _note(model.calls[-1]).startswith("[Step budget] this is model turn 3 of 3. ")
    assert "Remaining: 8 of 10 tool calls" in _note(model.calls[-1])


async def test_little_wall_time_left_asks_for_a_wrap_up() -> None:
    async def slow(_: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.45)  # of a 0.5 s wall time: under 20 % is left afterwards
        return {"programs": []}

    model = per_goal({GOAL: [_call(1), Reply(text="No programs found so far.")]})
    runner = FakeRunner({"programs.list": slow})

    result = await run_step(_step(), kit=kit(model, runner, wall_time_s=0.5), scope=scope(),
                            emit=lambda _: None)  # fmt: skip

    assert isinstance(result, StepResult) and (result.ok, result.ended) == (True, "wrapped_up")
    assert model.calls[-1].tool_choice == "none"
    note = _note(model.calls[-1])
    assert note.startswith(
        "[Step budget] less than 20% of the step's wall time is left. Remaining: 9 of 10 "
        "tool calls and about "
    )
    assert " s of 0.5 s. This is your last model turn and tools are off" in note


async def test_calling_tools_after_the_wrap_up_ends_the_step_failed_with_a_partial_summary() -> (
    None
):
    model = per_goal({GOAL: [
        _call(1),
        Reply(text="Let me check once more.", tool_calls=(ToolCall(id="c9", name="programs_list",
                                                               input={}),)),
    ]})  # fmt: skip
    runner = FakeRunner({"programs.list": _programs})
    events: list[Event] = []

    result = await run_step(_step(max_tool_calls=1), kit=kit(model, runner), scope=scope(),
                            emit=events.append)  # fmt: skip

    assert isinstance(result, StepResult)
    assert (result.ok, result.ended, result.tool_calls, len(runner.runs)) == (
        False, "overran", 1, 1,
    )  # fmt: skip
    assert result.summary == (
        "Incomplete: it kept calling tools after being asked to wrap up (all 1 tool calls of "
        "this step are used).\n"
        "Tool calls: programs.list ok; programs.list failed (tool_budget_spent).\n"
        "Last words: Let me check once more."
    )
    # The refused call is answered too: every tool_use has its result and its events.
    assert [type(e).__name__ for e in events if isinstance(e, ToolStarted | ToolCompleted)] == [
        "ToolStarted", "ToolCompleted", "ToolStarted", "ToolCompleted",
    ]  # fmt: skip
    assert result.messages[-1].parts[0].tool_use_id == "c9"  # type: ignore[union-attr]


async def test_a_model_that_hangs_is_cut_at_the_wall_time() -> None:
    async def hang(_: ModelRequest) -> Reply:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    model = per_goal({GOAL: [_call(1), hang]})
    runner = FakeRunner({"programs.list": _programs})
    loop = asyncio.get_running_loop()
    started = loop.time()

    result = await run_step(_step(), kit=kit(model, runner, wall_time_s=0.3), scope=scope(),
                            emit=lambda _: None)  # fmt: skip

    assert loop.time() - started < 1.0
    assert isinstance(result, StepResult)
    assert (result.ok, result.ended, result.tool_calls) == (False, "timed_out", 1)
    assert result.summary == (
        "Incomplete: the step's wall time of 0.3 s ran out.\nTool calls: programs.list ok."
    )


async def test_a_tool_cut_off_by_the_deadline_still_completes_in_the_log() -> None:
    async def stuck(_: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    model = per_goal({GOAL: [_call(1)]})
    events: list[Event] = []

    result = await run_step(
        _step(), kit=kit(model, FakeRunner({"programs.list": stuck}), wall_time_s=0.2),
        scope=scope(), emit=events.append,
    )  # fmt: skip

    assert isinstance(result, StepResult) and result.ended == "timed_out"
    assert events[-1] == ToolCompleted(
        tool_use_id="c1",
        ok=False,
        error=events[-1].error,  # type: ignore[union-attr]
    )
    assert events[-1].error.code == "step_timed_out"  # type: ignore[union-attr]


async def test_a_provider_error_fails_the_step_without_raising() -> None:
    from providers import ScriptedModel

    model = ScriptedModel([{"error": {"code": "provider_overloaded", "message": "busy"}}])
    result = await run_step(_step(), kit=kit(model, FakeRunner({})), scope=scope(),  # type: ignore[arg-type]
                            emit=lambda _: None)  # fmt: skip

    assert isinstance(result, StepResult)
    assert (result.ok, result.ended) == (False, "model_failed")
    assert result.summary == "Incomplete: the model failed (provider_overloaded: busy)."
