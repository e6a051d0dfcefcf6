"""A suspended step survives the log (snapshot round trip) and goes on where it stopped."""

from __future__ import annotations

from dataclasses import replace

from events import Event, ToolStarted, event_data, parse_event
from executor_fakes import FakeRunner, kit, per_goal, scope
from executors import PlanSuspended, Suspended, restore, resume_step, run_plan, suspension_event
from planner import Plan, PlannedStep
from providers import ModelRequest, Reply, ToolCall, ToolResult
from tools import ToolCallRequest, ToolContext, ToolOutcome

GOAL = "Tidy up the tasks"
LOOK = ToolCall(id="t1", name="tasks_list", input={"limit": 5})
DELETE = ToolCall(id="t2", name="tasks_delete", input={"task_id": "task_1"})


class ApprovingRunner(FakeRunner):
    """A fake runner that knows which calls the user approved (the real one reads its rows)."""

    approved: frozenset[str] = frozenset()

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        return await super().run(call, ctx, approved=approved or call.tool_use_id in self.approved)


def answered(request: ModelRequest) -> Reply:
    results = [p for p in request.messages[-1].parts if isinstance(p, ToolResult)]
    return Reply(text=f"Done with {[r.tool_use_id for r in results]}.")


async def suspend(runner: FakeRunner) -> tuple[Plan, PlanSuspended]:
    plan = Plan(
        strategy="tool",
        reasoning="one step",
        steps=[PlannedStep(id="s1", goal=GOAL, tools=["tasks.list", "tasks.delete"])],
    )
    model = per_goal({GOAL: [Reply(text="Looking.", tool_calls=(LOOK, DELETE)), answered]})
    outcome = await run_plan(plan, kit=kit(model, runner), scope=scope(), emit=lambda _: None)
    assert isinstance(outcome, PlanSuspended)
    return plan, outcome


async def test_a_suspension_round_trips_through_the_log() -> None:
    plan, outcome = await suspend(FakeRunner({"tasks.list": lambda _: {"tasks": []}}))

    data = event_data(suspension_event(plan, outcome))
    again = restore(event_data(parse_event(data)))

    # Everything but the step's budget report (logged as its own context_budget event).
    kept = replace(outcome, suspended=tuple(replace(s, budget=None) for s in outcome.suspended))
    assert again == (plan, kept)
    [paused] = again[1].suspended
    assert [p.tool_use_id for p in paused.pending] == ["t1", "t2"]
    assert paused.messages[-1].parts[1:] == (LOOK, DELETE)


async def test_resuming_runs_the_calls_in_order_and_the_model_gets_them_together() -> None:
    runner = ApprovingRunner({"tasks.list": lambda _: {"tasks": []}, "tasks.delete": lambda _: {}})
    plan, outcome = await suspend(runner)
    runner.approved = frozenset({"t2"})
    model = per_goal({GOAL: [Reply(text="unused"), answered]})
    events: list[Event] = []

    [paused] = restore(event_data(suspension_event(plan, outcome)))[1].suspended
    result = await resume_step(
        plan.steps[0], paused, kit=kit(model, runner), scope=scope(), emit=events.append
    )

    assert runner.runs == [("tasks.list", {"limit": 5}), ("tasks.delete", {"task_id": "task_1"})]
    assert [e.tool_use_id for e in events if isinstance(e, ToolStarted)] == ["t1", "t2"]
    assert not isinstance(result, Suspended) and result.ok
    assert result.summary == "Done with ['t1', 't2']."
    assert result.tool_calls == 2


async def test_resuming_before_the_user_answered_runs_nothing_and_suspends_again() -> None:
    runner = FakeRunner({"tasks.list": lambda _: {"tasks": []}, "tasks.delete": lambda _: {}})
    plan, outcome = await suspend(runner)
    model = per_goal({GOAL: [Reply(text="unused"), answered]})

    [paused] = outcome.suspended
    again = await resume_step(
        plan.steps[0], paused, kit=kit(model, runner), scope=scope(), emit=lambda _: None
    )

    # The read ahead of it runs (in order); the unanswered delete stops the step again.
    assert runner.runs == [("tasks.list", {"limit": 5})]
    assert isinstance(again, Suspended)
    assert [p.tool_use_id for p in again.pending] == ["t2"]
    assert [r.tool_use_id for r in again.results] == ["t1"]
