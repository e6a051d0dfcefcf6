"""The pure fold from Anthropic stream events to Bosun stream items."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from providers import Completion, StreamItem, TextChunk, TokenUsage, ToolCall
from providers._anthropic_stream import StreamState, fold, stop_reason

EVENT = TypeAdapter(RawMessageStreamEvent)


def run(events: list[dict[str, Any]], state: StreamState | None = None) -> list[StreamItem]:
    state = state or StreamState(model="fallback-model")
    items: list[StreamItem] = []
    for raw in events:
        state, new = fold(state, EVENT.validate_python(raw))
        items += new
    return items


def start(model: str = "claude-haiku-4-5", **usage: int) -> dict[str, Any]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0} | usage,
    }
    return {"type": "message_start", "message": message}


def delta(stop: str | None, **usage: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 0} | usage,
    }


STOP = {"type": "message_stop"}


def test_the_last_message_delta_usage_wins_and_fills_in_input_counts() -> None:
    items = run(
        [
            start(input_tokens=10, output_tokens=1, cache_read_input_tokens=5),
            delta(None, output_tokens=7),
            delta("end_turn", output_tokens=9, input_tokens=12, cache_creation_input_tokens=3),
            STOP,
        ]
    )

    assert items == [
        Completion(
            stop_reason="end_turn",
            usage=TokenUsage(
                input_tokens=12, output_tokens=9, cache_read_tokens=5, cache_write_tokens=3
            ),
            model="claude-haiku-4-5",
        )
    ]


def test_thinking_blocks_are_not_part_of_the_reply() -> None:
    items = run(
        [
            start(),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": "Yes"},
            },
            {"type": "content_block_stop", "index": 1},
            delta("end_turn"),
            STOP,
        ]
    )

    assert items == [
        TextChunk(text="Yes"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="claude-haiku-4-5"),
    ]


def test_nothing_after_message_stop_counts() -> None:
    late_text = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": "late"},
    }

    items = run([start(), delta("end_turn"), STOP, late_text, STOP])

    assert items == [
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="claude-haiku-4-5")
    ]


def test_tool_calls_are_yielded_whole_at_their_block_stop() -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}

    def piece(text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": text},
        }

    state = StreamState(model="m")
    seen: list[list[StreamItem]] = []
    for raw in [
        start(),
        {"type": "content_block_start", "index": 0, "content_block": tool},
        piece('{"a": '),
        piece("[1]}"),
        {"type": "content_block_stop", "index": 0},
    ]:
        state, items = fold(state, EVENT.validate_python(raw))
        seen.append(items)

    assert seen == [[], [], [], [], [ToolCall(id="toolu_1", name="f", input={"a": [1]})]]
    assert state.pending == {}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "max_tokens"),
        ("a_reason_from_the_future", "max_tokens"),
        (None, "max_tokens"),
    ],
)
def test_stop_reasons(raw: str | None, expected: str) -> None:
    assert stop_reason(raw) == expected
