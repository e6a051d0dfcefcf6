"""Scheduling a plan: ready steps run concurrently (up to the cap), dependants get their
dependencies' results, a failed step's dependants are skipped, a suspension stops starts."""

from __future__ import annotations

import asyncio

from events import Event, StepCompleted, StepError, StepStarted, TextDelta
from executor_fakes import FakeRunner, kit, normalise, per_goal, scope
from executors import PlanResult, PlanSuspended, run_plan
from planner import Plan, PlannedStep
from providers import ModelError, ModelRequest, Reply, ToolCall


def _plan(*steps: PlannedStep, executors: int = 3) -> Plan:
    return Plan(strategy="complex", reasoning="several jobs", steps=list(steps),
                executors=executors)  # fmt: skip


def _steps(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.type, e.step_id) for e in events if isinstance(e, StepStarted | StepCompleted)]


def _data(request: ModelRequest) -> str:
    return "\n".join(block.text for block in request.system[1:])


async def test_a_diamond_runs_its_middle_steps_concurrently_and_joins_their_results() -> None:
    both_started = asyncio.Barrier(2)

    async def middle(text: str) -> Reply:
        # Each waits for the other to start: sequential steps would time out here.
        await asyncio.wait_for(both_started.wait(), timeout=2)
        return Reply(text=text)

    model = per_goal({
        "Find Sam": [Reply(text="Sam Rivera is mem_1.")],
        "Sam's workouts": [lambda _: middle("Sam ran 3 times this week.")],
        "Sam's tasks": [lambda _: middle("One open task: call Sam.")],
        "Write the weekly note": [Reply(text="Note drafted.")],
    })  # fmt: skip
    plan = _plan(
        PlannedStep(id="s1", goal="Find Sam"),
        PlannedStep(id="s2", goal="Sam's workouts", depends_on=["s1"]),
        PlannedStep(id="s3", goal="Sam's tasks", depends_on=["s1"]),
        PlannedStep(id="s4", goal="Write the weekly note", depends_on=["s2", "s3"]),
    )
    events: list[Event] = []

    outcome = await run_plan(plan, kit=kit(model, FakeRunner({})), scope=scope(),
                             emit=events.append)  # fmt: skip

    assert isinstance(outcome, PlanResult) and outcome.ok
    assert [r.step_id for r in outcome.results] == ["s1", "s2", "s3", "s4"]
    order = _steps(events)
    assert order[:4] == [
        ("step_started", "s1"), ("step_completed", "s1"),
        ("step_started", "s2"), ("step_started", "s3"),  # both before either completes
    ]  # fmt: skip
    assert sorted(order[4:6]) == [("step_completed", "s2"), ("step_completed", "s3")]
    assert order[6:] == [("step_started", "s4"), ("step_completed", "s4")]
    by_goal = {r.messages[0].text: r for r in model.calls}
    assert '<result step="s1" goal="Find Sam">\nSam Rivera is mem_1.\n</result>' in _data(
        by_goal["Sam's workouts"]
    )
    joined = _data(by_goal["Write the weekly note"])
    assert "Sam ran 3 times this week." in joined and "One open task: call Sam." in joined
    assert joined.index('step="s2"') < joined.index('step="s3"')  # in depends_on order
    deltas = [e.step_id for e in events if isinstance(e, TextDelta)]
    assert (deltas[0], sorted(deltas[1:3]), deltas[3]) == ("s1", ["s2", "s3"], "s4")


async def test_the_concurrency_cap_holds() -> None:
    model = per_goal({"a": [Reply(text="A")], "b": [Reply(text="B")], "c": [Reply(text="C")]})
    plan = _plan(*(PlannedStep(id=g, goal=g) for g in "abc"), executors=3)
    events: list[Event] = []

    await run_plan(plan, kit=kit(model, FakeRunner({})), scope=scope(), emit=events.append,
                   concurrency=1)  # fmt: skip

    assert _steps(events) == [
        ("step_started", "a"), ("step_completed", "a"),
        ("step_started", "b"), ("step_completed", "b"),
        ("step_started", "c"), ("step_completed", "c"),
    ]  # fmt: skip


async def test_a_failed_step_skips_its_dependants_and_the_rest_still_runs() -> None:
    def broken(_: ModelRequest) -> Reply:
        raise ModelError("provider_unavailable", "down for maintenance")

    model = per_goal({
        "Look up the class": [broken],
        "Count members": [Reply(text="120 active members.")],
        "Cancel the class": [Reply(text="unreachable")],
        "Tell the coach": [Reply(text="unreachable")],
    })  # fmt: skip
    plan = _plan(
        PlannedStep(id="s1", goal="Look up the class"),
        PlannedStep(id="s2", goal="Count members"),
        PlannedStep(id="s3", goal="Cancel the class", depends_on=["s1"]),
        PlannedStep(id="s4", goal="Tell the coach", depends_on=["s3", "s2"]),
    )
    events: list[Event] = []

    outcome = await run_plan(plan, kit=kit(model, FakeRunner({})), scope=scope(),
                             emit=events.append)  # fmt: skip

    assert isinstance(outcome, PlanResult) and not outcome.ok
    assert [(r.step_id, r.ok, r.ended) for r in outcome.results] == [
        ("s1", False, "model_failed"), ("s2", True, "answered"),
        ("s3", False, "skipped"), ("s4", False, "skipped"),
    ]  # fmt: skip
    failed = [e for e in normalise(events) if isinstance(e, StepCompleted) and not e.ok]
    assert failed[0].error is not None and failed[0].error.code == "provider_unavailable"
    why_s3, why_s4 = (
        "skipped: depends on s1, which failed",
        "skipped: depends on s3, which was skipped",
    )
    assert failed[1:] == [
        StepCompleted(step_id="s3", executor_id="s3-exec", ok=False, tool_calls=0, tokens=0,
                      summary=why_s3, duration_ms=0,
                      error=StepError(code="step_skipped", message=why_s3)),
        StepCompleted(step_id="s4", executor_id="s4-exec", ok=False, tool_calls=0, tokens=0,
                      summary=why_s4, duration_ms=0,
                      error=StepError(code="step_skipped", message=why_s4)),
    ]  # fmt: skip
    assert not [c for c in model.calls if c.messages[0].text in ("Cancel the class",
                                                                 "Tell the coach")]  # fmt: skip
    assert ("step_started", "s3") not in _steps(events)  # a skipped step never starts


async def test_a_suspended_step_stops_new_starts_and_lets_running_ones_finish() -> None:
    async def slow(_: ModelRequest) -> Reply:
        await asyncio.sleep(0.05)
        return Reply(text="Found 2 classes tomorrow.")

    cancel = ToolCall(id="k1", name="class_sessions_cancel", input={"session_id": "cls_1"})
    model = per_goal({
        "Cancel the 7am class": [Reply(tool_calls=(cancel,))],
        "Find tomorrow's classes": [slow],
        "Email the members": [Reply(text="unreachable")],
    })  # fmt: skip
    runner = FakeRunner({})
    plan = _plan(
        PlannedStep(id="s1", goal="Cancel the 7am class", tools=["class_sessions.cancel"]),
        PlannedStep(id="s2", goal="Find tomorrow's classes"),
        PlannedStep(id="s3", goal="Email the members", depends_on=["s2"]),
    )
    events: list[Event] = []

    outcome = await run_plan(plan, kit=kit(model, runner), scope=scope(), emit=events.append)

    assert isinstance(outcome, PlanSuspended)
    assert [s.step_id for s in outcome.suspended] == ["s1"]
    assert [r.step_id for r in outcome.results] == ["s2"]
    assert outcome.not_started == ("s3",)
    assert _steps(events) == [
        ("step_started", "s1"), ("step_started", "s2"), ("step_completed", "s2"),
    ]  # fmt: skip
    assert runner.runs == [] and runner.pending == ["k1"]


async def test_a_tool_plan_streams_its_answer_without_a_step_id_and_a_simple_plan_runs_nothing(
) -> None:  # fmt: skip
    model = per_goal({"Greet": [Reply(text="Hello!")]})
    tool_plan = Plan(strategy="tool", reasoning="r", steps=[PlannedStep(id="s1", goal="Greet")])
    events: list[Event] = []

    await run_plan(tool_plan, kit=kit(model, FakeRunner({})), scope=scope(), emit=events.append)
    simple = await run_plan(Plan(strategy="simple", reasoning="chat"),
                            kit=kit(model, FakeRunner({})), scope=scope(),
                            emit=events.append)  # fmt: skip

    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta(delta="Hello!")]
    assert simple == PlanResult(results=())
