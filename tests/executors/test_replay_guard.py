"""The replay-integrity guard: every tool call is answered in the message right after it,
every result answers a call, before any transcript reaches a model."""

from __future__ import annotations

import json
from collections.abc import Sequence

from structlog.testing import capture_logs

from bosun_demo import demo_registry
from context import EXECUTOR_BUDGET
from events import Event, ReplayViolation, TextDelta
from executor_fakes import FakeRunner, counter, kit, scope
from executors import REPLAY_VIOLATION, Repair, repair_transcript
from executors._loop import drive
from executors._prompt import build_prompt
from executors._replay import synthetic_result
from executors._state import Finish, StepEnv, StepState
from providers import FunctionModel, Message, ModelRequest, Reply, TextPart, ToolCall, ToolResult

SEARCH = ToolCall(id="t1", name="members_search", input={"query": "Sam"})
GET = ToolCall(id="t2", name="members_get", input={"member_id": "mem_1"})
LIST = ToolCall(id="t3", name="programs_list", input={})


def calls(*parts: ToolCall, text: str = "") -> Message:
    return Message(role="assistant", parts=((TextPart(text=text),) if text else ()) + parts)


def results(*ids: str) -> Message:
    return Message(
        role="user", parts=tuple(ToolResult(tool_use_id=i, content=f"r{i}") for i in ids)
    )


def result(tool_use_id: str) -> ToolResult:
    return ToolResult(tool_use_id=tool_use_id, content=f"r{tool_use_id}")


def unpaired(messages: Sequence[Message]) -> list[str]:
    """What a strict provider would reject: calls not answered in the next message, and
    results answering no call of the message before them (empty: the history is valid)."""
    problems = []
    for index, message in enumerate(messages):
        asked = [p.id for p in message.parts if isinstance(p, ToolCall)]
        after = messages[index + 1] if index + 1 < len(messages) else None
        answered = (
            [p.tool_use_id for p in after.parts if isinstance(p, ToolResult)]
            if after is not None and after.role == "user"
            else []
        )
        problems += [f"unanswered {i}" for i in asked if i not in answered]
        before = messages[index - 1] if index else None
        known = {p.id for p in before.parts if isinstance(p, ToolCall)} if before else set()
        ids = [p.tool_use_id for p in message.parts if isinstance(p, ToolResult)]
        problems += [f"stray {i}" for n, i in enumerate(ids) if i not in known or i in ids[:n]]
    return problems


def test_a_valid_transcript_comes_back_unchanged() -> None:
    transcript = (
        Message.user("find Sam"),
        calls(SEARCH, GET, text="Looking."),
        Message(role="user", parts=(result("t2"), result("t1"))),  # any order is valid
        calls(LIST),
        results("t3"),
        Message.assistant("Done."),
    )

    repair = repair_transcript(transcript)

    assert repair == Repair(messages=transcript)
    assert not repair.changed
    assert all(a is b for a, b in zip(repair.messages, transcript, strict=True))


def test_calls_left_unanswered_at_the_end_get_a_results_message() -> None:
    transcript = [Message.user("find Sam"), calls(SEARCH, GET, text="Looking.")]

    repair = repair_transcript(transcript)

    assert repair == Repair(
        messages=(
            *transcript,
            Message(role="user", parts=(synthetic_result(SEARCH), synthetic_result(GET))),
        ),
        answered=("t1", "t2"),
    )
    assert unpaired(repair.messages) == []


def test_a_user_who_typed_instead_of_clicking_gets_the_results_before_their_text() -> None:
    typed = Message(role="user", parts=(TextPart(text="never mind, list programs"),), cache=True)
    transcript = [calls(SEARCH), typed, calls(LIST), results("t3"), Message.assistant("Two.")]

    repair = repair_transcript(transcript)

    repaired = Message(role="user", parts=(synthetic_result(SEARCH), *typed.parts), cache=True)
    assert repair.messages == (transcript[0], repaired, *transcript[2:])
    assert (repair.answered, repair.dropped) == (("t1",), ())
    assert all(a is b for a, b in zip(repair.messages[2:], transcript[2:], strict=True))
    assert unpaired(repair.messages) == []


def test_calls_followed_by_another_assistant_message_get_a_results_message_between() -> None:
    transcript = [calls(SEARCH), Message.assistant("Let me think."), Message.user("ok")]

    repair = repair_transcript(transcript)

    assert repair.messages == (
        transcript[0],
        Message(role="user", parts=(synthetic_result(SEARCH),)),
        *transcript[1:],
    )
    assert repair.answered == ("t1",)


def test_of_several_calls_with_one_answered_the_others_get_results_in_call_order() -> None:
    transcript = [calls(SEARCH, GET, LIST), Message(role="user", parts=(result("t2"),))]

    repair = repair_transcript(transcript)

    assert repair.messages[1] == Message(
        role="user", parts=(synthetic_result(SEARCH), result("t2"), synthetic_result(LIST))
    )
    assert repair.answered == ("t1", "t3")
    assert unpaired(repair.messages) == []


def test_results_for_unknown_ids_and_duplicates_are_dropped() -> None:
    transcript = [
        results("t0"),  # answers nothing: dropped, and the message with it
        calls(SEARCH),
        Message(role="user", parts=(result("t1"), result("t9"), result("t1"), TextPart(text="hi"))),
        Message.assistant("Sam found."),
        Message(role="user", parts=(result("t1"), TextPart(text="thanks"))),  # after no calls
    ]

    repair = repair_transcript(transcript)

    assert repair.messages == (
        calls(SEARCH),
        Message(role="user", parts=(result("t1"), TextPart(text="hi"))),
        Message.assistant("Sam found."),
        Message.user("thanks"),
    )
    assert (repair.answered, repair.dropped) == ((), ("t0", "t9", "t1", "t1"))
    assert unpaired(repair.messages) == []


def test_repairing_twice_changes_nothing_more() -> None:
    transcript = [calls(SEARCH, GET), Message.user("stop"), calls(LIST), results("t7")]

    once = repair_transcript(transcript)
    twice = repair_transcript(once.messages)

    assert (once.answered, once.dropped) == (("t1", "t2", "t3"), ("t7",))
    assert twice == Repair(messages=once.messages)


def test_the_synthetic_result_is_an_error_the_model_can_act_on() -> None:
    synthetic = synthetic_result(SEARCH)

    assert (synthetic.tool_use_id, synthetic.is_error) == ("t1", True)
    error = json.loads(synthetic.content)["error"]
    assert error["code"] == REPLAY_VIOLATION == "replay_integrity_violation"
    assert "members_search call 't1' has no recorded result" in error["message"]
    assert "Sam" not in synthetic.content  # the input is not repeated
    assert error["hint"]


async def test_the_loop_repairs_the_transcript_before_the_model_sees_it() -> None:
    """A step resumed with an unanswered call (the user typed instead of confirming)."""
    seen: list[list[str]] = []

    def strict(request: ModelRequest) -> Reply:
        seen.append(unpaired(request.messages))
        return Reply(text="Here are the programs.")

    model = FunctionModel(strict)
    registry = demo_registry()
    prompt = build_prompt(
        step_id="s1",
        goal="List the programs",
        tools=[registry.get("members.search"), registry.get("programs.list")],
        data=[],
        budget=EXECUTOR_BUDGET,
        counter=counter(),
    )
    typed = Message.user("never mind Sam, just list programs")
    state = StepState(
        prompt=prompt,
        max_calls=5,
        started=0.0,
        deadline=1e12,
        messages=[calls(SEARCH, text="Looking Sam up."), typed],
    )
    events: list[Event] = []
    env = StepEnv(
        step_id="s1",
        kit=kit(model, FakeRunner({})),
        scope=scope(),
        emit=events.append,
        final_answer=False,
    )

    with capture_logs() as logs:
        end = await drive(state, env)

    assert end == Finish(ok=True, ended="answered", summary="Here are the programs.")
    assert seen == [[]]  # the request the model got was valid
    repaired = [
        calls(SEARCH, text="Looking Sam up."),
        Message(role="user", parts=(synthetic_result(SEARCH), *typed.parts)),
    ]
    sent = model.calls[0].messages  # the request marks its last message for the cache
    assert [(m.role, m.parts) for m in sent[-2:]] == [(m.role, m.parts) for m in repaired]
    assert state.messages[:2] == repaired  # repaired once, for every later request
    assert events == [
        ReplayViolation(tool_use_ids=["t1"], step_id="s1"),
        TextDelta(delta="Here are the programs.", step_id="s1"),
    ]
    violations = [e for e in logs if e["event"] == "replay.violation"]
    assert violations == [
        {
            "event": "replay.violation",
            "log_level": "warning",
            "session_id": "sess_1",
            "turn_id": "turn_1",
            "step_id": "s1",
            "tool_use_ids": ["t1"],
            "dropped": [],
        }
    ]
