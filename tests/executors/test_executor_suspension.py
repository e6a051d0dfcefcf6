"""A step that needs the user stops before anything of that message runs, lists every call
of the message, and hands the turn the pending events to emit."""

from __future__ import annotations

from events import (
    Candidate,
    ConfirmationPending,
    ContextBudget,
    DisambiguationPending,
    Event,
    TextDelta,
    ToolCompleted,
    ToolStarted,
)
from executor_fakes import FakeRunner, kit, normalise, per_goal, scope
from executors import PendingCall, Suspended, pending_events, run_step
from planner import PlannedStep
from providers import Reply, ToolCall

GOAL = "Cancel tomorrow's 7am class and tell the team"
SEARCH = ToolCall(id="t1", name="tasks_list", input={"limit": 5})
CANCEL = ToolCall(id="t2", name="class_sessions_cancel", input={"session_id": "cls_7"})
TASK = ToolCall(id="t3", name="tasks_create", input={"title": "Tell members about the 7am"})


async def test_a_confirmation_suspends_the_message_before_any_of_its_calls_runs() -> None:
    model = per_goal({GOAL: [
        Reply(tool_calls=(ToolCall(id="t0", name="tasks_list", input={}),)),
        Reply(text="Cancelling it.", tool_calls=(SEARCH, CANCEL, TASK)),
    ]})  # fmt: skip
    runner = FakeRunner({"tasks.list": lambda _: {"tasks": []}, "tasks.create": lambda _: {}})
    step = PlannedStep(id="s1", goal=GOAL,
                       tools=["tasks.list", "class_sessions.cancel", "tasks.create"])  # fmt: skip
    events: list[Event] = []

    outcome = await run_step(step, kit=kit(model, runner), scope=scope(), emit=events.append)

    assert isinstance(outcome, Suspended)
    assert outcome.pending == (
        PendingCall(tool_use_id="t1", tool="tasks.list", input={"limit": 5}),
        PendingCall(tool_use_id="t2", tool="class_sessions.cancel",
                    input={"session_id": "cls_7"}, needs="confirmation", confirm="destructive"),
        PendingCall(tool_use_id="t3", tool="tasks.create",
                    input={"title": "Tell members about the 7am"}),
    )  # fmt: skip
    assert outcome.results == () and outcome.tool_calls == 1
    # Only the earlier message's call ran; the runner recorded the confirmation as pending.
    assert runner.runs == [("tasks.list", {})] and runner.pending == ["t2"]
    assert normalise(events) == [
        ContextBudget(role="executor", report={}, step_id="s1"),
        ToolStarted(tool_use_id="t0", tool="tasks.list", input={}, step_id="s1"),
        ToolCompleted(tool_use_id="t0", ok=True, output={"tasks": []}),
        TextDelta(delta="Cancelling it.", step_id="s1"),  # no tool events for the message
    ]
    assert outcome.messages[-1].parts[1:] == (SEARCH, CANCEL, TASK)
    assert pending_events(outcome) == [
        ConfirmationPending(tool_use_id="t2", tool="class_sessions.cancel",
                            input={"session_id": "cls_7"}, confirm="destructive"),
    ]  # fmt: skip


async def test_two_confirmations_in_one_message_are_both_pending() -> None:
    delete = ToolCall(id="d1", name="workouts_delete", input={"workout_id": "wo_1"})
    publish = ToolCall(id="p1", name="programs_publish_bulk",
                       input={"program_ids": ["prg_1", "prg_2"]})  # fmt: skip
    model = per_goal({GOAL: [Reply(tool_calls=(delete, publish))]})
    runner = FakeRunner({})
    step = PlannedStep(id="s1", goal=GOAL, tools=["workouts.delete", "programs.publish_bulk"])

    outcome = await run_step(step, kit=kit(model, runner), scope=scope(), emit=lambda _: None)

    assert isinstance(outcome, Suspended)
    assert pending_events(outcome) == [
        ConfirmationPending(tool_use_id="d1", tool="workouts.delete",
                            input={"workout_id": "wo_1"}, confirm="destructive"),
        ConfirmationPending(tool_use_id="p1", tool="programs.publish_bulk",
                            input={"program_ids": ["prg_1", "prg_2"]}, confirm="always"),
    ]  # fmt: skip
    assert runner.runs == [] and runner.pending == ["d1", "p1"]


async def test_a_picker_suspends_with_its_candidates() -> None:
    pick = ToolCall(id="k1", name="ui_ask_user_to_pick", input={
        "kind": "member", "prompt": "Which Sam?",
        "candidates": [{"id": "mem_1", "label": "Sam Rivera", "sublabel": "+1 555 0101"},
                       {"id": "mem_2", "label": "Sam Okafor"}],
    })  # fmt: skip
    model = per_goal({"Book Sam": [Reply(tool_calls=(pick,))]})
    step = PlannedStep(id="s1", goal="Book Sam", tools=["ui.ask_user_to_pick"])

    outcome = await run_step(step, kit=kit(model, FakeRunner({})), scope=scope(),
                             emit=lambda _: None)  # fmt: skip

    assert isinstance(outcome, Suspended)
    assert pending_events(outcome) == [
        DisambiguationPending(tool_use_id="k1", kind="member", prompt="Which Sam?", candidates=[
            Candidate(id="mem_1", label="Sam Rivera", sublabel="+1 555 0101"),
            Candidate(id="mem_2", label="Sam Okafor"),
        ]),
    ]  # fmt: skip


async def test_a_confirmation_the_runner_refuses_does_not_suspend() -> None:
    # A member may not cancel classes: the check refuses, so there is nothing to confirm.
    model = per_goal({GOAL: [Reply(tool_calls=(CANCEL,)), Reply(text="I may not cancel it.")]})
    step = PlannedStep(id="s1", goal=GOAL, tools=["class_sessions.cancel"])
    events: list[Event] = []

    outcome = await run_step(step, kit=kit(model, FakeRunner({})), scope=scope(role="member"),
                             emit=events.append)  # fmt: skip

    assert not isinstance(outcome, Suspended) and outcome.ok
    completed = [e for e in events if isinstance(e, ToolCompleted)]
    assert [e.error.code for e in completed if e.error] == ["forbidden"]
