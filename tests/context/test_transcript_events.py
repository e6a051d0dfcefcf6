"""The session log as the model's native transcript (trainer spec §4.3): tool calls and
their results (ids kept), artifacts after the result they belong to, a typed result for a
call that has none, stable abbreviation of bulky results, fitting that never splits a
call from its result, compaction that never splits one either, and the compact form the
planner and the summariser read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from context import (
    TokenCounter,
    compact_messages,
    compact_text,
    fit_history,
    history,
)
from context._transcript import NO_RESULT, RESULT_CHARS
from providers import Message, ModelRequest, TextPart, ToolCall, ToolResult
from providers._anthropic_request import build_params
from providers._openai_request import chat_messages
from store import StoredEvent

COUNTER = TokenCounter("claude-haiku-4-5")


def event(seq: int, kind: str, turn: str | None, **data: Any) -> StoredEvent:
    return StoredEvent(
        seq=seq, session_id="s", turn_id=turn, type=kind, data={"type": kind, **data},
        created_at=datetime.now(UTC),
    )  # fmt: skip


def tool_turn(
    turn: str, start: int, *, output: Any = None, answer: str = "Done."
) -> list[StoredEvent]:
    """A turn that creates a task (call ``c-<turn>``) and answers."""
    out = {"id": f"task_{turn}", "title": "Plumber"} if output is None else output
    return [
        event(start, "user_message", turn, message_id=f"m{turn}", text=f"ask {turn}"),
        event(start + 1, "text_delta", turn, delta="On it. "),
        event(
            start + 2,
            "tool_started",
            turn,
            tool_use_id=f"c-{turn}",
            tool="tasks.create",
            input={"title": "Plumber"},
            step_id="s1",
        ),
        event(start + 3, "tool_completed", turn, tool_use_id=f"c-{turn}", ok=True, output=out),
        event(start + 4, "text_delta", turn, delta=answer),
        event(start + 5, "message_done", turn, message_id=f"m{turn}", stop_reason="end_turn"),
    ]


def test_a_turns_tool_call_replays_as_tool_use_then_tool_result() -> None:
    view = history(tool_turn("t1", 1))

    call = ToolCall(id="c-t1", name="tasks_create", input={"title": "Plumber"})
    result = ToolResult(tool_use_id="c-t1", content='{"id":"task_t1","title":"Plumber"}')
    assert view.messages == [
        Message.user("ask t1"),
        Message(role="assistant", parts=(TextPart(text="On it. "), call)),
        Message(role="user", parts=(result,)),
        Message.assistant("Done."),
    ]


def test_artifacts_follow_their_result_and_a_failure_is_an_error_result() -> None:
    events = [
        event(1, "user_message", "t1", message_id="m", text="Make a workout"),
        event(2, "tool_started", "t1", tool_use_id="a", tool="workouts.generate", input={}),
        event(
            3,
            "artifact",
            "t1",
            artifact_id="art_1",
            version=1,
            artifact_type="workout",
            schema_version="1",
            title="Chest",
            summary="Chest, 4 exercises",
            tool_use_id="a",
        ),
        event(4, "tool_completed", "t1", tool_use_id="a", ok=True, output={"id": "art_1"}),
        event(5, "tool_started", "t1", tool_use_id="b", tool="tasks.create", input={}),
        event(
            6,
            "tool_completed",
            "t1",
            tool_use_id="b",
            ok=False,
            error={"code": "invalid_input", "message": "title is required"},
        ),
        event(7, "message_done", "t1", message_id="m", stop_reason="end_turn"),
    ]

    messages = history(events).messages

    assert messages[2].parts == (
        ToolResult(tool_use_id="a", content='{"id":"art_1"}'),
        TextPart(
            text='<artifact type="workout" id="art_1" version="1">Chest, 4 exercises</artifact>'
        ),
    )
    [failed] = messages[4].parts
    assert isinstance(failed, ToolResult) and failed.is_error
    assert json.loads(failed.content) == {
        "error": {"code": "invalid_input", "message": "title is required"}
    }


def test_a_call_with_no_recorded_result_gets_a_typed_error_result() -> None:
    events = [
        event(1, "user_message", "t1", message_id="m1", text="Delete it"),
        event(2, "tool_started", "t1", tool_use_id="x", tool="tasks.delete", input={}),
        event(3, "done", "t1", session_id="s", status="failed"),  # crashed mid-call
        event(4, "user_message", "t2", message_id="m2", text="Well?"),
    ]

    messages = history(events).messages

    assert [m.role for m in messages] == ["user", "assistant", "user"]
    result, text = messages[2].parts
    assert isinstance(result, ToolResult) and result.tool_use_id == "x" and result.is_error
    assert json.loads(result.content)["error"]["code"] == NO_RESULT
    assert text == TextPart(text="Well?")  # the next message follows the result (§4.3)
    for build in (lambda r: build_params(r, model="m"), chat_messages):
        build(ModelRequest(messages=tuple(messages)))  # valid for both providers


def test_what_a_forced_loops_tool_says_is_not_replayed_as_assistant_text() -> None:
    events = [
        event(1, "user_message", "t1", message_id="m", text="Hi"),
        event(
            2,
            "tool_started",
            "t1",
            tool_use_id="n",
            tool="message.notify_user",
            input={"message": "Hello!"},
        ),
        event(3, "text_delta", "t1", delta="Hello!"),
        event(4, "tool_completed", "t1", tool_use_id="n", ok=True, output={"message": "Hello!"}),
        event(5, "message_done", "t1", message_id="m", stop_reason="end_turn"),
    ]

    messages = history(events).messages

    assert len(messages) == 3 and messages[1].parts == (
        ToolCall(id="n", name="message_notify_user", input={"message": "Hello!"}),
    )


def test_a_bulky_result_is_abbreviated_the_same_way_every_turn() -> None:
    rows = [{"id": f"task_{i:04d}", "title": "x" * 40} for i in range(60)]
    events = tool_turn("t1", 1, output={"tasks": rows})
    later = [*events, *tool_turn("t2", 10)]

    first = history(events).messages[2].parts[0]
    again = history(later).messages[2].parts[0]

    assert isinstance(first, ToolResult) and first == again
    assert len(first.content) < RESULT_CHARS < len(json.dumps(rows))
    assert first.content.startswith('{"tasks":[{"id":"task_0000"')
    assert 'call tool_results_read with {"tool_use_id": "c-t1"}' in first.content


def test_fitting_keeps_each_call_with_its_result() -> None:
    events = [e for n in range(12) for e in tool_turn(f"t{n}", n * 10 + 1)]
    view = history(events)

    for allocation in (120, 300, 700):
        fitted = fit_history(view, allocation, counter=COUNTER, keep_last=2)
        messages = list(fitted.messages)
        assert fitted.fill.used <= allocation
        for i, message in enumerate(messages):
            calls = {p.id for p in message.parts if isinstance(p, ToolCall)}
            results = {p.tool_use_id for p in message.parts if isinstance(p, ToolResult)}
            if calls:
                following = messages[i + 1].parts
                assert calls == {p.tool_use_id for p in following if isinstance(p, ToolResult)}
            if results:
                before = messages[i - 1].parts if i else ()
                assert results <= {p.id for p in before if isinstance(p, ToolCall)}
        build_params(ModelRequest(messages=tuple(messages)), model="m")


def test_a_summary_never_splits_a_call_from_its_result() -> None:
    events = [e for n in range(4) for e in tool_turn(f"t{n}", n * 10 + 1)]
    view = history(events)
    # keep_last=6 would cut right after t2's call: the cut moves back before it
    call, result = view.entries[9], view.entries[10]
    assert isinstance(call.message.parts[-1], ToolCall) and call.seq == result.seq == 24
    up_to = view.split_seq(6)
    assert up_to == 21  # t2's user message ends the summarised part

    summarised = history(
        [*events, event(99, "history_summarised", None, summary="S", up_to_seq=up_to)]
    )
    first = summarised.entries[0].message
    assert first.role == "assistant" and isinstance(first.parts[-1], ToolCall)


def test_the_history_from_the_latest_summary_on_equals_the_whole_logs() -> None:
    """The contract a turn that reads only the log's tail relies on: the latest summary
    plus the events after its ``up_to_seq`` give the same history as the whole log."""
    events = [e for n in range(4) for e in tool_turn(f"t{n}", n * 10 + 1)]
    summary = event(50, "history_summarised", None, summary="S", up_to_seq=16)
    whole = history([*events, summary])
    tail = history([summary, *(e for e in events if e.seq > 16)])

    assert tail.messages == whole.messages and whole.summary == "S"


def test_the_compact_form_keeps_ids_and_outcomes_not_whole_results() -> None:
    rows = {"tasks": [{"id": f"task_{i}", "title": "y" * 50} for i in range(40)]}
    messages = history(tool_turn("t1", 1, output=rows)).messages

    compact = compact_messages(messages)

    assert [m.role for m in compact] == [m.role for m in messages]
    assert all(isinstance(p, TextPart) for m in compact for p in m.parts)
    assert compact[1].text == 'On it.  [tool call tasks_create id=c-t1 input={"title":"Plumber"}]'
    assert compact[2].text.startswith('[tool result id=c-t1 ok: {"tasks":[{"id":"task_0"')
    assert len(compact[2].text) < 400
    assert compact_text(messages[0]) == "user: ask t1"
