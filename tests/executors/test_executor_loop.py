"""The executor's tool loop: a tool step end to end, its handlers alone, the retry cap and
prefix stability across the loop's requests."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from typing import Any

from bosun_demo import demo_registry
from context import EXECUTOR_BUDGET, prefix_ratio
from events import (
    ContextBudget,
    Event,
    StepCompleted,
    StepStarted,
    TextDelta,
    ToolCompleted,
    ToolStarted,
)
from executor_fakes import FakeRunner, counter, goal_of, kit, normalise, per_goal, scope
from executors import EXECUTOR_PROMPT, StepResult, dependency_item, run_plan, run_step
from executors._loop import call_model
from executors._prompt import build_prompt
from executors._state import CallModel, Finish, StepEnv, StepState, WrapUp, next_turn
from planner import Plan, PlannedStep
from providers import Reply, TokenUsage, ToolCall
from tools import ToolError

SAM = {"id": "mem_1", "name": "Sam Rivera", "status": "active"}


def _members(_: dict[str, Any]) -> dict[str, Any]:
    return {"members": [SAM]}


def _member(data: dict[str, Any]) -> dict[str, Any]:
    return {**SAM, "id": data["member_id"], "phone": "+1 555 0101"}


async def test_a_tool_step_end_to_end_streams_the_answer_and_brackets_each_call() -> None:
    goal = "Find Sam Rivera's phone number"
    model = per_goal({goal: [
        Reply(text="Looking Sam up.", usage=TokenUsage(input_tokens=900, output_tokens=20),
              tool_calls=(ToolCall(id="t1", name="members_search", input={"query": "Sam"}),)),
        Reply(tool_calls=(ToolCall(id="t2", name="members_get", input={"member_id": "mem_1"}),),
              usage=TokenUsage(input_tokens=1000, output_tokens=15, cache_read_tokens=800)),
        Reply(text="Sam Rivera's phone is +1 555 0101.",
              usage=TokenUsage(input_tokens=1100, output_tokens=12)),
    ]})  # fmt: skip
    runner = FakeRunner({"members.search": _members, "members.get": _member})
    plan = Plan(
        strategy="tool",
        reasoning="one lookup",
        steps=[PlannedStep(id="s1", goal=goal, tools=["members.search", "members.get"])],
    )
    events: list[Event] = []

    outcome = await run_plan(plan, kit=kit(model, runner), scope=scope(), emit=events.append)

    answer = "Sam Rivera's phone is +1 555 0101."
    assert normalise(events) == [
        StepStarted(step_id="s1", executor_id="s1-exec"),
        ContextBudget(role="executor", report={}, step_id="s1"),
        TextDelta(delta="Looking Sam up."),
        ToolStarted(tool_use_id="t1", tool="members.search", input={"query": "Sam"}, step_id="s1"),
        ToolCompleted(tool_use_id="t1", ok=True, output={"members": [SAM]}),
        ToolStarted(
            tool_use_id="t2", tool="members.get", input={"member_id": "mem_1"}, step_id="s1"
        ),
        ToolCompleted(tool_use_id="t2", ok=True, output=_member({"member_id": "mem_1"})),
        TextDelta(delta="\n\n"),
        TextDelta(delta=answer),
        StepCompleted(step_id="s1", executor_id="s1-exec", ok=True, summary=answer,
                      tool_calls=2, tokens=3847, duration_ms=0),
    ]  # fmt: skip
    result = outcome.results[0]
    assert (result.ok, result.ended, result.usage.cache_read_tokens) == (True, "answered", 800)
    assert result.budget is not None and result.budget.step_id == "s1"
    assert runner.runs == [("members.search", {"query": "Sam"}),
                           ("members.get", {"member_id": "mem_1"})]  # fmt: skip
    first = model.calls[0]
    assert [t.name for t in first.tools] == ["members_search", "members_get"]
    assert first.tool_choice == "auto"
    assert first.system[0].text == EXECUTOR_PROMPT
    assert goal_of(first) == goal
    # The loop is append-only: the third request holds both calls and both results.
    roles = [(m.role, [type(p).__name__ for p in m.parts]) for m in model.calls[2].messages]
    assert roles == [
        ("user", ["TextPart"]),
        ("assistant", ["TextPart", "ToolCall"]),
        ("user", ["ToolResult"]),
        ("assistant", ["ToolCall"]),
        ("user", ["ToolResult"]),
    ]
    model_results = [p for m in model.calls[2].messages for p in m.parts if hasattr(p, "content")]
    assert json.loads(model_results[0].content) == {"members": [SAM]}


async def test_a_complex_step_streams_with_its_step_id() -> None:
    model = per_goal({"Say hi": [Reply(text="hi")]})
    events: list[Event] = []
    step = PlannedStep(id="s7", goal="Say hi")

    result = await run_step(step, kit=kit(model, FakeRunner({})), scope=scope(),
                            emit=events.append)  # fmt: skip

    assert isinstance(result, StepResult) and result.summary == "hi"
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta(delta="hi", step_id="s7")]
    assert model.calls[0].tools == ()


def _state(tools: bool = True, *, calls: int = 0, turns: int = 0) -> StepState:
    registry = demo_registry()
    prompt = build_prompt(
        step_id="s1", goal="g", tools=[registry.get("members.search")] if tools else [],
        data=[], budget=EXECUTOR_BUDGET, counter=counter(),
    )  # fmt: skip
    return StepState(prompt=prompt, max_calls=3, started=0.0, deadline=60.0,
                     tool_calls=calls, model_turns=turns)  # fmt: skip


def _env(**limits: Any) -> StepEnv:
    return StepEnv(step_id="s1", kit=kit(per_goal({}), FakeRunner({}), **limits),
                   scope=scope(), emit=lambda _: None, final_answer=False)  # fmt: skip


def test_next_turn_calls_the_model_while_every_bound_has_room() -> None:
    assert next_turn(_state(calls=2, turns=10), _env(), at=47.0) == CallModel()


def test_next_turn_wraps_up_and_says_why_and_what_remains() -> None:
    spent = next_turn(_state(calls=3), _env(), at=1.0)
    late = next_turn(_state(), _env(), at=49.0)  # 11 s of 60 left: under 20 %
    last = next_turn(_state(turns=11), _env(), at=1.0)
    assert isinstance(spent, WrapUp) and isinstance(late, WrapUp) and isinstance(last, WrapUp)
    assert spent.reasons == ("all 3 tool calls of this step are used",)
    assert "Remaining: 0 of 3 tool calls and about 59 s of 60 s" in spent.note
    assert late.reasons == ("less than 20% of the step's wall time is left",)
    assert last.reasons == ("this is model turn 12 of 12",)
    # A step without tools has no tool-call bound to run into.
    assert next_turn(_state(tools=False), _env(), at=1.0) == CallModel()


async def test_a_tool_that_keeps_failing_the_same_way_is_not_called_again() -> None:
    goal = "Fetch the programs"

    def programs(_: dict[str, Any]) -> Any:
        raise ToolError("upstream_down", "the catalogue is down", hint="try later")

    turns = [Reply(tool_calls=(ToolCall(id=f"p{i}", name="programs_list", input={}),))
             for i in range(4)]  # fmt: skip
    model = per_goal({goal: [*turns, Reply(text="The catalogue is down.")]})
    runner = FakeRunner({"programs.list": programs})
    events: list[Event] = []
    step = PlannedStep(id="s1", goal=goal, tools=["programs.list"], max_tool_calls=10)

    result = await run_step(step, kit=kit(model, runner, retries_per_tool=2), scope=scope(),
                            emit=events.append)  # fmt: skip

    assert len(runner.runs) == 3  # the first try and two retries
    completed = [e for e in events if isinstance(e, ToolCompleted)]
    assert [e.error.code for e in completed if e.error] == [
        "upstream_down", "upstream_down", "upstream_down", "retries_exhausted",
    ]  # fmt: skip
    last = model.calls[-1].messages[-1].parts[0]
    assert "failed 3 times with code 'upstream_down'" in last.content  # type: ignore[union-attr]
    assert isinstance(result, StepResult)
    assert (result.ok, result.tool_calls, result.summary) == (True, 3, "The catalogue is down.")


async def test_five_loop_requests_share_a_byte_identical_prefix() -> None:
    goal = "Check the recent workouts of the members called Sam and list open tasks for them"
    members = [{"id": "mem_0", "name": "Sam Rivera"}, {"id": "mem_1", "name": "Sam Okafor"}]
    script = [
        Reply(tool_calls=(ToolCall(id="c1", name="members_search", input={"query": "Sam"}),)),
        Reply(tool_calls=(ToolCall(id="c2", name="members_get", input={"member_id": "mem_0"}),)),
        Reply(tool_calls=(ToolCall(id="c3", name="members_get", input={"member_id": "mem_1"}),)),
        Reply(tool_calls=(ToolCall(id="c4", name="tasks_list", input={"limit": 3}),)),
        Reply(text="Both Sams trained this week; one task is open."),
    ]
    model = per_goal({goal: script})
    runner = FakeRunner({
        "members.search": lambda _: {"members": members},
        "members.get": lambda d: {"id": d["member_id"], "last_workout": "Tempo run, 2 Jun"},
        "tasks.list": lambda _: {"tasks": [{"id": "task_1", "title": "Call Sam"}]},
    })  # fmt: skip
    tools = ["members.search", "members.get", "tasks.list", "workouts.create"]
    step = PlannedStep(id="s1", goal=goal, tools=tools, max_tool_calls=6)
    data = [dependency_item("s0", "Summarise this week's classes for members called Sam", (
        "Sam Rivera (mem_0) attended Tuesday's 7am Strength (Coach Lee) and Thursday's "
        "6pm Tempo Run; Sam Okafor (mem_1) attended Monday's Mobility class only and "
        "cancelled Friday's Spin (knee rehab, no deep lunges). Next week both are booked "
        "into Saturday's 9am Open Gym; the class is at 14 of 16 places."
    )), dependency_item("s1", "Find the coaches' notes on both Sams", (
        "Coach Lee: Sam Rivera is on week 6 of 10 of the half-marathon plan, long run "
        "moved to Sundays. Physio: Sam Okafor may add light squats from 9 June; no jumping "
        "until the review on 20 June. Both asked to be reminded of Saturday's Open Gym."
    ))]  # fmt: skip

    await run_step(step, kit=kit(model, runner), scope=scope(), emit=lambda _: None, data=data)

    requests = model.calls
    assert len(requests) == 5
    ratios = [prefix_ratio(a, b) for a, b in pairwise(requests)]
    assert all(r >= 0.9 for r in ratios), ratios
    for a, b in pairwise(requests):  # append-only, cache marks aside
        unmarked = [replace(m, cache=False) for m in b.messages[: len(a.messages)]]
        assert unmarked == [replace(m, cache=False) for m in a.messages]
        assert (a.system, a.tools) == (b.system, b.tools)


async def test_the_model_handler_runs_alone_and_a_wrap_up_turns_tools_off() -> None:
    model = per_goal({"g": [Reply(text="All I have: nothing yet.")]})
    state = _state()
    env = StepEnv(step_id="s1", kit=kit(model, FakeRunner({})), scope=scope(),
                  emit=lambda _: None, final_answer=False)  # fmt: skip

    end = await call_model(
        state, env, WrapUp(note="[Step budget] wrap up", reasons=("x",), cut="time_limit")
    )

    assert end == Finish(
        ok=True, ended="wrapped_up", summary="All I have: nothing yet.", cut="time_limit"
    )
    assert model.calls[0].tool_choice == "none"
    assert [m.text for m in state.messages] == ["[Step budget] wrap up", "All I have: nothing yet."]
    assert state.model_turns == 1
