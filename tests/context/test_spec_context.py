"""Context per the trainer spec §4: messages in §4.3's order (consecutive user messages
merged, text that arrives while a tool result is due placed after it), per-source token
budgets with their cuts reported, and the user-data block's XML (§4.4)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from context import (
    Source,
    SourceLoad,
    SourceRegistry,
    SourceRequest,
    SourceScope,
    TokenCounter,
    UserData,
    history,
    load_sources,
    order_messages,
)
from executors._replay import repair_transcript
from providers import Message, TextPart, ToolCall, ToolResult
from store import StoredEvent

COUNTER = TokenCounter("claude-haiku-4-5")
SCOPE = SourceScope(org_id="acme", user_id="mem_sam", session_id="s")
CALL = ToolCall(id="c1", name="generate_workout", input={})
RESULT = ToolResult(tool_use_id="c1", content='{"id":"art_1"}')
ARTIFACT = '<artifact type="workout" id="art_1">\nChest, 4 exercises\n</artifact>'


# --- §4.3: message order ------------------------------------------------------------


def test_consecutive_user_messages_are_merged_into_one() -> None:
    messages = [Message.user("Give me a chest workout"), Message.user("Make it quick")]

    [merged] = order_messages(messages)

    assert merged.role == "user"
    assert [p.text for p in merged.parts if isinstance(p, TextPart)] == [
        "Give me a chest workout",
        "Make it quick",
    ]


def test_text_arriving_while_a_result_is_due_goes_after_that_result() -> None:
    messages = [
        Message.user("Give me a chest workout"),
        Message(role="assistant", parts=(CALL,)),
        Message.user(ARTIFACT),  # the artifact event is logged before the tool result
        Message(role="user", parts=(RESULT,)),
    ]

    ordered = order_messages(messages)

    assert [m.role for m in ordered] == ["user", "assistant", "user"]
    assert ordered[2].parts == (RESULT, TextPart(text=ARTIFACT))
    assert not repair_transcript(ordered).changed  # a valid transcript for the provider


def test_held_text_waits_for_every_result_of_the_message() -> None:
    second = ToolCall(id="c2", name="log_workout", input={})
    messages = [
        Message(role="assistant", parts=(CALL, second)),
        Message(role="user", parts=(RESULT,)),
        Message.user('<knowledge source="profile">\nkg\n</knowledge>'),
        Message(role="user", parts=(ToolResult(tool_use_id="c2", content="ok"),)),
    ]

    [_, user] = order_messages(messages)

    kinds = [type(p).__name__ for p in user.parts]
    assert kinds == ["ToolResult", "ToolResult", "TextPart"]


def test_an_ordered_transcript_comes_back_as_the_same_objects() -> None:
    messages = [
        Message.user("hi"),
        Message(role="assistant", parts=(CALL,)),
        Message(role="user", parts=(RESULT, TextPart(text=ARTIFACT))),
        Message.assistant("Here it is."),
    ]

    ordered = order_messages(messages)

    assert all(a is b for a, b in zip(ordered, messages, strict=True))


def _event(seq: int, kind: str, turn: str, **data: Any) -> StoredEvent:
    return StoredEvent(
        seq=seq, session_id="s", turn_id=turn, type=kind, data={"type": kind, **data},
        created_at=datetime.now(UTC),
    )  # fmt: skip


def test_history_merges_a_turn_that_got_no_answer_into_the_next_message() -> None:
    events = [
        _event(1, "user_message", "t1", message_id="m1", text="Give me a workout"),
        _event(2, "error", "t1", code="provider_overloaded", message="x", trace_id="t"),
        _event(3, "user_message", "t2", message_id="m2", text="Chest, please"),
        _event(4, "text_delta", "t2", delta="Done."),
        _event(5, "message_done", "t2", message_id="m2", stop_reason="end_turn"),
    ]

    view = history(events)

    assert [m.role for m in view.messages] == ["user", "assistant"]
    assert view.messages[0].text == "Give me a workout\n\nChest, please"


# --- per-source budgets -------------------------------------------------------------


def _source(name: str, text: str, **kwargs: Any) -> Source:
    async def fetch(_request: SourceRequest) -> str:
        return text

    return Source(name=name, description=name, fetch=fetch, **kwargs)


async def test_a_source_over_its_own_budget_is_cut_and_the_cut_reported() -> None:
    big = "Tuesday yoga at 18:00 with Ana. " * 80
    registry = SourceRegistry(
        [_source("schedule", big, budget_tokens=60), _source("notes", "Sam prefers kg.")]
    )
    loads = [SourceLoad(name="schedule"), SourceLoad(name="notes")]

    loaded = await load_sources(registry, loads, scope=SCOPE, counter=COUNTER, budget_tokens=2_000)

    schedule, notes = loaded.results
    assert schedule.truncated and schedule.budget == 60 and 0 < schedule.tokens <= 60
    [cut] = schedule.cuts
    assert cut.action == "truncated" and cut.tokens_before > 60 >= cut.tokens_after
    assert cut.detail.startswith("source schedule over its own budget of 60 tokens")
    assert loaded.fill.cuts[0] == cut  # the section's fill reports it, first
    assert not notes.truncated and notes.cuts == () and "Sam prefers kg." in notes.text


async def test_without_an_own_budget_a_source_shares_the_section() -> None:
    big = "Tuesday yoga at 18:00 with Ana. " * 80
    registry = SourceRegistry([_source("schedule", big)])

    loaded = await load_sources(
        registry, [SourceLoad(name="schedule")], scope=SCOPE, counter=COUNTER, budget_tokens=2_000
    )

    assert not loaded.results[0].truncated and loaded.fill.cuts == ()


# --- §4.4: the user-data block ------------------------------------------------------


def _user_data(registry: SourceRegistry, *names: str, allocation: int = 300) -> UserData:
    return UserData(
        registry=registry, names=names, scope=SCOPE, counter=COUNTER, allocation=allocation
    )


async def test_the_user_data_block_is_xml_per_source_and_cut_per_source() -> None:
    registry = SourceRegistry(
        [
            _source("unit_preferences", "Weight: kg\nDistance: km", user_data=True),
            _source("body.stats", "Notes: " + "strong " * 200, user_data=True, budget_tokens=40),
        ]
    )

    fill = await _user_data(registry, "unit_preferences", "body.stats").load()

    assert fill.text.startswith("<user_data>\n<unit_preferences>\nWeight: kg\nDistance: km\n")
    assert "</unit_preferences>\n\n<body_stats>\n" in fill.text
    assert fill.text.endswith("</body_stats>\n</user_data>")
    assert fill.name == "profile" and 0 < fill.used <= fill.allocated == 300
    assert fill.used == COUNTER.count(fill.text)
    [cut] = fill.cuts
    assert cut.section == "profile" and "source body.stats over its own budget of 40" in cut.detail


async def test_a_failing_user_data_source_is_left_out() -> None:
    async def broken(_request: SourceRequest) -> str:
        raise RuntimeError("database down")

    registry = SourceRegistry(
        [
            Source(name="settings", description="d", fetch=broken, user_data=True),
            _source("units", "Weight: kg", user_data=True),
        ]
    )

    fill = await _user_data(registry, "settings", "units").load()

    assert "<units>" in fill.text and "<settings>" not in fill.text


def test_user_data_sources_are_not_offered_to_the_planner() -> None:
    registry = SourceRegistry(
        [_source("schedule", "x"), _source("members.profile", "y", user_data=True)]
    )

    assert registry.names() == ["schedule"]
    assert registry.user_data_names() == ["members.profile"]
    assert "members.profile" not in registry.describe()
