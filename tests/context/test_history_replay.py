"""Conversation replay from the log: the full transcript, summaries, and budget fitting."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from context import (
    History,
    HistoryEntry,
    TokenCounter,
    abandoned,
    answer_text,
    conversation,
    fit_history,
    history,
)
from providers import Message
from store import StoredEvent

COUNTER = TokenCounter()


class _Log:
    """Builds a session log the way turns write it."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def add(self, type_: str, turn_id: str | None, **data: Any) -> int:
        seq = len(self.events) + 1
        self.events.append(
            StoredEvent(
                session_id="s1",
                seq=seq,
                type=type_,
                data={**data, "type": type_},
                turn_id=turn_id,
                created_at=datetime(2025, 1, 1, tzinfo=UTC),
            )
        )
        return seq

    def turn(self, turn_id: str, question: str, answer: str | None) -> None:
        self.add("user_message", turn_id, message_id=f"m{turn_id}", text=question)
        if answer is not None:
            self.add("text_delta", turn_id, delta=answer[:3])
            self.add("text_delta", turn_id, delta=answer[3:])
            self.add("message_done", turn_id, message_id=f"a{turn_id}")


def test_text_a_takeover_abandoned_is_replayed_once() -> None:
    """Two takeovers of one turn, each cutting off its predecessor's answer mid-stream:
    every reader keeps only the text after the last ``message_reset``, and a reset of a
    step's text (or of another turn) leaves the answer alone."""
    log = _Log()
    log.add("user_message", "t1", message_id="m1", text="Count")
    log.add("text_delta", "t1", delta="one ", step_id="s1")
    first = log.add("text_delta", "t1", delta="one ")
    log.add("text_delta", "t1", delta="two ")
    log.add("message_reset", "t1", message_id="m1", reason="takeover", from_seq=first)
    second = log.add("text_delta", "t1", delta="one ")
    log.add("message_reset", "t1", message_id="m1", reason="takeover", from_seq=second)
    log.add("message_reset", "t1", message_id="m1", reason="takeover", from_seq=1, step_id="s9")
    log.add("message_reset", "t2", message_id="m2", reason="takeover", from_seq=1)
    log.add("text_delta", "t1", delta="one two three")
    log.add("message_done", "t1", message_id="m1")

    assert abandoned(log.events) == {first, first + 1, second}
    assert answer_text(log.events) == "one two three"
    assert conversation(log.events) == [Message.user("Count"), Message.assistant("one two three")]
    assert history(log.events).messages[-1] == Message.assistant("one two three")


def test_conversation_is_the_whole_transcript_even_after_a_summary() -> None:
    log = _Log()
    log.turn("t1", "Hi", "Hello!")
    log.add("history_summarised", "t2", summary="They said hi.", up_to_seq=4)
    log.turn("t2", "Plan my week", None)  # still running: no answer yet
    log.add("text_delta", "t3", delta="step text", step_id="s1")  # step output is not an answer
    assert conversation(log.events) == [
        Message.user("Hi"),
        Message.assistant("Hello!"),
        Message.user("Plan my week"),
    ]
    assert conversation(log.events, exclude_turn="t2") == conversation(log.events)[:2]


def test_history_starts_from_the_latest_summary() -> None:
    log = _Log()
    for n in range(1, 5):
        log.turn(f"t{n}", f"question {n}", f"answer {n}")  # 4 events per turn
    log.add("history_summarised", None, summary="old summary", up_to_seq=4)
    log.add("history_summarised", None, summary="Q1 and Q2 answered.", up_to_seq=8)
    log.add("history_summarised", None, summary="not a summary event: no up_to_seq")
    view = history(log.events)
    assert view.summary == "Q1 and Q2 answered."
    assert view.up_to_seq == 8
    assert view.summarised == (
        Message.user("question 1"),
        Message.assistant("answer 1"),
        Message.user("question 2"),
        Message.assistant("answer 2"),
    )
    assert view.messages == [
        Message.user(
            "[Summary of the earlier conversation; the messages it covers are not shown]\n"
            "Q1 and Q2 answered."
        ),
        Message.user("question 3"),
        Message.assistant("answer 3"),
        Message.user("question 4"),
        Message.assistant("answer 4"),
    ]
    assert view.since_summary == 4
    assert view.split_seq(keep_last=2) == 12  # the answer to question 3
    assert view.split_seq(keep_last=4) is None


def test_history_without_a_summary_is_the_conversation() -> None:
    log = _Log()
    log.turn("t1", "Hi", "Hello!")
    view = history(log.events)
    assert view == History(
        entries=(
            HistoryEntry(message=Message.user("Hi"), seq=1),
            HistoryEntry(message=Message.assistant("Hello!"), seq=4),
        )
    )
    assert view.messages == conversation(log.events)


def test_fit_history_keeps_the_last_messages_verbatim() -> None:
    messages = [
        Message.user(f"Question {i}: " + "please consider this detail " * 30)
        if i % 2 == 0
        else Message.assistant(f"Answer {i}: " + "here is a long reply " * 40)
        for i in range(30)
    ]
    current = Message.user("And now?")
    fitted = fit_history(messages, 1_500, counter=COUNTER, keep_last=6, current=current)
    assert fitted.fill.used <= 1_500
    assert fitted.messages[-1] is current
    assert fitted.messages[-6:] == (*messages[-5:], current)
    assert all(a is b for a, b in zip(fitted.messages[-6:-1], messages[-5:], strict=True))
    first = fitted.messages[0]
    assert first.role == "user"
    assert first.text.startswith("[… ") and first.text.endswith(
        "earlier messages omitted to fit the context budget]"
    )
    abbreviated = [m for m in fitted.messages if m.text.endswith(" […]")]
    assert abbreviated  # older kept messages are shown short
    assert all(not m.text.startswith(("user: ", "assistant: ")) for m in abbreviated)
    actions = [c.action for c in fitted.fill.cuts]
    assert actions == ["abbreviated", "dropped"]


def test_fit_history_records_the_compression() -> None:
    log = _Log()
    for n in range(1, 5):
        log.turn(f"t{n}", f"question {n} " * 20, f"answer {n} " * 30)
    log.add("history_summarised", None, summary="Four questions, all answered.", up_to_seq=8)
    view = history(log.events)
    fitted = fit_history(view, 2_500, counter=COUNTER)
    assert fitted.messages == tuple(view.messages)
    (cut,) = fitted.fill.cuts
    assert cut.action == "compressed"
    assert cut.section == "conversation"
    assert cut.detail == "4 messages up to seq 8 summarised"
    assert cut.tokens_before > cut.tokens_after > 0


def test_a_single_huge_message_is_cut() -> None:
    huge = Message.user("word " * 5_000)
    fitted = fit_history([huge], 300, counter=COUNTER)
    (message,) = fitted.messages
    assert message.text.startswith("word word")
    assert "[… truncated " in message.text
    assert fitted.fill.used <= 300
    assert [c.action for c in fitted.fill.cuts] == ["truncated"]
