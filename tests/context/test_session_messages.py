"""session_messages: a log folded into messages with their tool calls (what GET
/v1/sessions/{id} serves), on logs written as the runner, resume, undo and approvals do."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from context import OUTPUT_CAP_CHARS, conversation, session_messages
from events import (
    ApprovalResolved,
    ArtifactSaved,
    ConfirmationPending,
    Done,
    Event,
    MessageDone,
    MessageReset,
    PlanCreated,
    PlanStep,
    QuestionPending,
    StepCompleted,
    StepStarted,
    TextDelta,
    ToolCompleted,
    ToolError,
    ToolResolved,
    ToolStarted,
    UserMessage,
    event_data,
)
from store import StoredEvent


@dataclass
class Log:
    events: list[StoredEvent] = field(default_factory=list)

    def add(self, turn_id: str | None, *events: Event) -> int:
        for event in events:
            self.events.append(
                StoredEvent(
                    session_id="s",
                    seq=len(self.events) + 1,
                    type=event.type,
                    data=event_data(event),
                    turn_id=turn_id,
                    created_at=datetime(2026, 1, 1, tzinfo=UTC),
                )
            )
        return len(self.events)


def _user(text: str) -> UserMessage:
    return UserMessage(message_id=f"m_{text}", text=text)


def _done(status: Any = "completed") -> Done:
    return Done(session_id="s", status=status)


def _calls(log: Log) -> dict[str, Any]:
    return {c.tool_use_id: c for m in session_messages(log.events) for c in m.tool_calls}


def test_a_complex_plans_calls_name_their_steps_and_an_abandoned_answer_is_told_once() -> None:
    log = Log()
    steps = [PlanStep(id="s1", goal="Find Sam"), PlanStep(id="s2", goal="List tasks")]
    log.add("t1", _user("plan it"), PlanCreated(strategy="complex", reasoning="r", steps=steps))
    log.add(
        "t1",
        StepStarted(step_id="s1", executor_id="e1"),
        StepStarted(step_id="s2", executor_id="e2"),
        ToolStarted(tool_use_id="a", tool="members.search", input={"q": "Sam"}, step_id="s1"),
        ToolStarted(tool_use_id="b", tool="tasks.list", input={}, step_id="s2"),
        ToolCompleted(tool_use_id="b", ok=True, output={"tasks": []}),
        ToolCompleted(tool_use_id="a", ok=True, output={"members": ["Sam"]}),
        TextDelta(delta="Found Sam.", step_id="s1"),
        StepCompleted(
            step_id="s1",
            executor_id="e1",
            ok=True,
            summary="",
            tool_calls=1,
            tokens=1,
            duration_ms=1,
        ),
        TextDelta(delta="Sam has "),
    )
    reset_at = log.add("t1", TextDelta(delta="no ta"))
    log.add(
        "t1",
        MessageReset(message_id="m", reason="takeover", from_seq=reset_at),
        TextDelta(delta="no tasks."),
        MessageDone(message_id="m", stop_reason="end_turn"),
        _done(),
    )

    [user, answer] = session_messages(log.events)
    assert (user.role, user.text, user.tool_calls) == ("user", "plan it", ())
    assert (answer.text, answer.complete, answer.turn_id) == ("Sam has no tasks.", True, "t1")
    assert [(c.tool_use_id, c.step_id, c.step_goal, c.status) for c in answer.tool_calls] == [
        ("a", "s1", "Find Sam", "ok"),
        ("b", "s2", "List tasks", "ok"),
    ]
    assert answer.tool_calls[0].output == {"members": ["Sam"]}
    assert [(s.step_id, s.goal, s.status, s.text) for s in answer.steps] == [
        ("s1", "Find Sam", "ok", "Found Sam."),
        ("s2", "List tasks", "running", ""),
    ]
    assert [(m.role, m.text) for m in session_messages(log.events)] == [
        (m.role, m.text) for m in conversation(log.events)
    ]


def test_a_large_output_is_summarised_with_a_flag() -> None:
    log = Log()
    big = {"rows": ["x" * 100] * 100}
    log.add(
        "t1",
        _user("go"),
        ToolStarted(tool_use_id="a", tool="big.read", input={}),
        ToolCompleted(tool_use_id="a", ok=True, output=big),
        ToolStarted(tool_use_id="b", tool="small.read", input={}),
        ToolCompleted(tool_use_id="b", ok=True, output=[1, 2]),
        MessageDone(message_id="m", stop_reason="end_turn"),
    )
    calls = _calls(log)
    large, small = calls["a"], calls["b"]
    assert (large.output, large.output_truncated) == (None, True)
    assert large.output_chars > OUTPUT_CAP_CHARS
    assert large.output_summary is not None
    assert large.output_summary.startswith('{"rows":["xxx') and large.output_summary.endswith("…")
    assert len(large.output_summary) == 1_001
    assert (small.output, small.output_truncated, small.output_summary) == ([1, 2], False, None)


def test_a_question_answered_by_the_next_message_keeps_both_user_messages() -> None:
    log = Log()
    log.add(
        "t1",
        _user("make a workout"),
        ToolStarted(tool_use_id="q", tool="message.ask_user", input={"question": "Legs?"}),
        QuestionPending(tool_use_id="q", question="Legs?"),
        _done("suspended"),
    )
    suspended = session_messages(log.events)
    assert [(m.role, m.complete) for m in suspended] == [("user", True), ("assistant", False)]
    assert suspended[-1].tool_calls[0].status == "pending_answer"

    log.add(
        "t1",
        _user("legs"),
        ToolResolved(tool_use_id="q", decision="answered"),
        TextDelta(delta="Leg day it is."),
        MessageDone(message_id="m", stop_reason="end_turn"),
        _done(),
    )
    messages = session_messages(log.events)
    assert [(m.role, m.text, m.complete) for m in messages] == [
        ("user", "make a workout", True),
        ("assistant", "", False),
        ("user", "legs", True),
        ("assistant", "Leg day it is.", True),
    ]
    asked = messages[1].tool_calls[0]
    assert (asked.status, asked.decision) == ("ok", "answered")


def test_calls_settled_outside_their_turn_undo_and_approvals() -> None:
    log = Log()
    log.add(
        "t1",
        _user("do things"),
        ToolStarted(tool_use_id="w", tool="workouts.create", input={"title": "A"}),
        ToolCompleted(tool_use_id="w", ok=True, output={"id": "wo_1"}, inverse_available=True),
        ArtifactSaved(
            artifact_id="art_1",
            version=2,
            artifact_type="workout",
            schema_version="1",
            title="A",
            summary="A",
            tool_use_id="w",
        ),
        ToolStarted(tool_use_id="d", tool="workouts.delete", input={"workout_id": "wo_9"}),
        ToolCompleted(tool_use_id="d", ok=True, output={"status": "queued_for_approval"}),
        ToolStarted(tool_use_id="e", tool="workouts.delete", input={"workout_id": "wo_8"}),
        ToolCompleted(tool_use_id="e", ok=True, output={"status": "queued_for_approval"}),
        MessageDone(message_id="m", stop_reason="end_turn"),
        _done(),
    )
    assert _calls(log)["d"].status == "queued_for_approval"
    log.add(
        None,
        ToolStarted(tool_use_id="w-undo", tool="workouts.delete", input={"workout_id": "wo_1"}),
        ToolCompleted(tool_use_id="w-undo", ok=True, output={"deleted": "wo_1"}),
        ApprovalResolved(
            approval_id="ap1",
            tool_use_id="d",
            tool="workouts.delete",
            decision="approved",
            ok=False,
            error=ToolError(code="not_found", message="No workout 'wo_9'"),
        ),
        ApprovalResolved(
            approval_id="ap2", tool_use_id="e", tool="workouts.delete", decision="expired"
        ),
    )
    calls = _calls(log)
    assert (calls["w"].status, calls["w"].undone_by) == ("undone", "w-undo")
    assert [a.artifact_id for a in calls["w"].artifacts] == ["art_1"]
    assert calls["w"].artifacts[0].version == 2
    assert (calls["d"].status, calls["d"].decision) == ("error", "approved")
    assert calls["d"].error == {"code": "not_found", "message": "No workout 'wo_9'", "hint": None}
    assert (calls["e"].status, calls["e"].decision) == ("expired", "expired")
    assert "w-undo" not in calls  # an undo is shown on the write it undid


def test_calls_left_without_a_result_say_how_their_turn_ended() -> None:
    log = Log()
    for turn, status in (("t1", "cancelled"), ("t2", "expired"), ("t3", None)):
        log.add(
            turn,
            _user(f"turn {turn}"),
            ToolStarted(tool_use_id="r", tool="slow.run", input={}),
            ConfirmationPending(tool_use_id="c", tool="x.delete", input={}, confirm="always"),
        )
        if status is not None:
            log.add(turn, _done(status))
    messages = session_messages(log.events)
    states = [[c.status for c in m.tool_calls] for m in messages if m.role == "assistant"]
    assert states == [
        ["cancelled", "cancelled"],
        ["cancelled", "expired"],
        ["running", "pending_confirmation"],
    ]
    assert all(not m.complete for m in messages if m.role == "assistant")
