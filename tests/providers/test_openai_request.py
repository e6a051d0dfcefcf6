"""The pure request mapping behind ``OpenAIModel`` (the wire shape is tested in test_openai)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from providers import Message, ModelError, ModelRequest, TextPart, ToolCall, ToolResult
from providers._openai_request import chat_messages, is_strict_compatible


def test_messages_without_system_and_with_several_text_parts() -> None:
    request = ModelRequest(
        messages=(
            Message(role="user", parts=(TextPart(text="Hello "), TextPart(text="there"))),
            Message.assistant("Hi."),
        )
    )
    assert chat_messages(request) == [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi."},
    ]


def test_several_tool_results_each_become_a_tool_message() -> None:
    request = ModelRequest(
        messages=(
            Message(
                role="user",
                parts=(
                    ToolResult(tool_use_id="a", content="1"),
                    ToolResult(tool_use_id="b", content="nope", is_error=True),
                ),
            ),
        )
    )
    assert chat_messages(request) == [
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "Error: nope"},
    ]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            Message(role="user", parts=(ToolCall(id="c", name="t"),)),
            "A user message holds a tool call ('t', id 'c')",
        ),
        (
            Message(role="assistant", parts=(ToolResult(tool_use_id="c", content="x"),)),
            "An assistant message holds a tool result (for id 'c')",
        ),
    ],
)
def test_misplaced_parts_are_invalid_requests(message: Message, expected: str) -> None:
    with pytest.raises(ModelError) as raised:
        chat_messages(ModelRequest(messages=(message,)))
    assert raised.value.code == "provider_invalid_request"
    assert raised.value.message.startswith(expected)


STRICT_NESTED = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "owner": {"$ref": "#/$defs/person"},
    },
    "required": ["items", "owner"],
    "additionalProperties": False,
    "$defs": {
        "person": {
            "type": "object",
            "properties": {"email": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["email"],
            "additionalProperties": False,
        }
    },
}


def _with(path: list[str], **changes: Any) -> dict[str, Any]:
    """A deep copy of STRICT_NESTED with one nested schema changed."""
    schema: dict[str, Any] = copy.deepcopy(STRICT_NESTED)
    node = schema
    for key in path:
        node = node[key]
    node.update(changes)
    return schema


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        (STRICT_NESTED, True),
        ({"type": "object", "properties": {}, "additionalProperties": False}, True),
        (_with([], additionalProperties=True), False),
        (_with(["properties", "items", "items"], required=[]), False),
        (_with(["$defs", "person"], additionalProperties={"type": "string"}), False),
        ({"type": "array", "items": {"type": "string"}}, False),  # the root must be an object
        ({"type": "object", "properties": {"a": {"type": "string"}}}, False),
    ],
)
def test_strict_compatibility(schema: dict[str, Any], strict: bool) -> None:
    assert is_strict_compatible(schema) is strict
