"""The pure request mapping of the Anthropic adapter: tool choice, roles, cache breakpoints."""

from __future__ import annotations

from typing import Any

import pytest

from providers import (
    Message,
    ModelError,
    ModelRequest,
    SystemBlock,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from providers._anthropic_request import build_params
from providers._model import ResponseSchema

TOOL = ToolSpec(name="lookup", description="Look a word up", input_schema={"type": "object"})
FIVE_MINUTES = {"type": "ephemeral", "ttl": "5m"}


def build(**fields: Any) -> dict[str, Any]:
    fields.setdefault("messages", (Message.user("hi"),))
    return dict(build_params(ModelRequest(**fields), model="claude-haiku-4-5"))


def cached(params: dict[str, Any]) -> list[str]:
    """The blocks carrying ``cache_control``, named ``section[i]`` or ``messages[i][j]``."""
    names = [f"tools[{i}]" for i, t in enumerate(params.get("tools", [])) if "cache_control" in t]
    names += [
        f"system[{i}]" for i, b in enumerate(params.get("system", [])) if "cache_control" in b
    ]
    for i, message in enumerate(params["messages"]):
        names += [
            f"messages[{i}][{j}]" for j, b in enumerate(message["content"]) if "cache_control" in b
        ]
    return names


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("any", {"type": "any"}),
        ("none", {"type": "none"}),
        ("lookup", {"type": "tool", "name": "lookup"}),
    ],
)
def test_tool_choice(choice: str, expected: dict[str, str]) -> None:
    params = build(tools=(TOOL,), tool_choice=choice)

    assert params["tool_choice"] == expected
    assert params["tools"] == [
        {"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object"}}
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto", "disable_parallel_tool_use": True}),
        ("any", {"type": "any", "disable_parallel_tool_use": True}),
        ("none", {"type": "none"}),  # allows no call at all: the flag does not apply
        ("lookup", {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True}),
    ],
)
def test_one_tool_call_per_reply(choice: str, expected: dict[str, object]) -> None:
    params = build(tools=(TOOL,), tool_choice=choice, parallel_tool_calls=False)

    assert params["tool_choice"] == expected


def test_no_tools_means_no_tools_and_no_tool_choice() -> None:
    params = build(tool_choice="any", system=())

    assert params == {
        "model": "claude-haiku-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }


def test_empty_description_is_left_out() -> None:
    params = build(tools=(ToolSpec(name="now", description="", input_schema={"type": "object"}),))

    assert params["tools"] == [{"name": "now", "input_schema": {"type": "object"}}]


def test_structured_output_adds_and_forces_the_schema_tool() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

    params = build(
        tools=(TOOL,),
        tool_choice="none",
        response_schema=ResponseSchema(name="count", schema=schema),
    )

    assert params["tools"][1] == {
        "name": "count",
        "description": "Give your final answer as this tool's input.",
        "input_schema": schema,
    }
    assert params["tool_choice"] == {"type": "tool", "name": "count"}


def test_consecutive_roles_merge_and_empty_text_is_dropped() -> None:
    params = build(
        system=(SystemBlock(text=""), SystemBlock(text="rules")),
        messages=(
            Message.user("a"),
            Message.user(""),
            Message.user("b"),
            Message.assistant("c"),
            Message(role="assistant", parts=(TextPart(text=""), ToolCall(id="t1", name="lookup"))),
            Message(role="user", parts=(ToolResult(tool_use_id="t1", content="found"),)),
        ),
    )

    assert params["system"] == [{"type": "text", "text": "rules"}]
    assert params["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "c"},
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "found", "is_error": False}
            ],
        },
    ]


def test_a_tool_result_in_an_assistant_message_is_refused() -> None:
    message = Message(role="assistant", parts=(ToolResult(tool_use_id="t", content="x"),))

    with pytest.raises(ModelError) as failure:
        build(messages=(Message.user("hi"), message))

    assert failure.value.code == "provider_invalid_request"
    assert failure.value.message == (
        "Message 1 is a 'assistant' message holding a ToolResult; "
        "move it to a message with role 'user'"
    )


# --- prompt-cache breakpoints ----------------------------------------------------------


def test_nothing_marked_means_no_breakpoints() -> None:
    assert cached(build(tools=(TOOL,), system=(SystemBlock(text="s"),))) == []


def test_breakpoints_go_on_the_last_tool_marked_system_blocks_and_message_ends() -> None:
    params = build(
        tools=(TOOL, ToolSpec(name="other", description="", input_schema={"type": "object"})),
        cache_tools=True,
        system=(SystemBlock(text="static", cache=True), SystemBlock(text="dynamic")),
        messages=(
            Message(role="user", parts=(TextPart(text="a"), TextPart(text="b")), cache=True),
            Message.assistant("c"),
        ),
    )

    assert cached(params) == ["tools[1]", "system[0]", "messages[0][1]"]
    assert params["tools"][1]["cache_control"] == FIVE_MINUTES


def test_a_marked_message_merged_into_another_marks_its_own_last_block() -> None:
    params = build(
        messages=(
            Message(role="user", parts=(ToolResult(tool_use_id="t", content="r"),), cache=True),
            Message.user("next question"),
        ),
    )

    assert len(params["messages"]) == 1
    assert cached(params) == ["messages[0][0]"]  # the tool_result, not the merged text


def test_cache_tools_without_tools_places_nothing() -> None:
    assert cached(build(cache_tools=True)) == []


def test_more_than_four_marks_keep_the_last_four_in_prompt_order() -> None:
    params = build(
        tools=(TOOL,),
        cache_tools=True,
        system=(SystemBlock(text="s0", cache=True), SystemBlock(text="s1", cache=True)),
        messages=(
            Message(role="user", parts=(TextPart(text="u0"),), cache=True),
            Message(role="assistant", parts=(TextPart(text="a0"),), cache=True),
            Message(role="user", parts=(TextPart(text="u1"),), cache=True),
        ),
    )

    assert cached(params) == ["system[1]", "messages[0][0]", "messages[1][0]", "messages[2][0]"]


def test_ttl_is_the_configured_one() -> None:
    request = ModelRequest(
        messages=(Message(role="user", parts=(TextPart(text="q"),), cache=True),)
    )

    params: dict[str, Any] = dict(build_params(request, model="m", cache_ttl="1h"))

    assert params["messages"][0]["content"][0]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }
