"""The pure chunk folding behind ``OpenAIModel``, including quirks of compatible servers."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from providers import Completion, ModelError, StreamItem, TextChunk, TokenUsage, ToolCall
from providers._openai_stream import StreamState, completion, fold


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> ChatCompletionChunk:
    """A chunk built the way the SDK builds it (without validation), so a loose server's
    missing fields, such as ``index``, read as None."""
    body: dict[str, Any] = {"model": "local-model", **extra}
    if delta is not None or finish is not None:
        body["choices"] = [{"delta": delta or {}, "finish_reason": finish}]
    else:
        body.setdefault("choices", [])
    return ChatCompletionChunk.model_construct(**body)


def run(*chunks: ChatCompletionChunk) -> list[StreamItem]:
    state = StreamState(source="test:model")
    items: list[StreamItem] = []
    for one in chunks:
        state, new = fold(state, one)
        items += new
    return [*items, completion(state, default_model="fallback")]


def call(
    index: int | None, *, id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    fragment: dict[str, Any] = {"function": {"arguments": args}}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment["id"] = id
    if name is not None:
        fragment["function"]["name"] = name
    return fragment


def test_fold_does_not_change_the_state_it_is_given() -> None:
    start = StreamState(source="test:model")
    state, items = fold(start, chunk({"tool_calls": [call(0, id="c1", name="t", args="{")]}))
    assert start == StreamState(source="test:model")
    assert items == []
    assert state.calls[0].arguments == "{"


def test_tool_calls_without_index_each_arrive_whole() -> None:
    """Ollama-style: no ``index``, each call whole with its own id, finished with ``stop``."""
    items = run(
        chunk({"role": "assistant", "content": ""}),
        chunk(
            {
                "tool_calls": [
                    call(None, id="a", name="first", args='{"x": 1}'),
                    call(None, id="b", name="second", args="{}"),
                ]
            }
        ),
        chunk(finish="stop"),
    )
    assert items == [
        ToolCall(id="a", name="first", input={"x": 1}),
        ToolCall(id="b", name="second", input={}),
        Completion(stop_reason="tool_use", usage=TokenUsage(), model="local-model"),
    ]


def test_repeated_names_and_missing_ids_and_empty_arguments() -> None:
    items = run(
        chunk({"tool_calls": [call(0, name="lookup", args='{"q"')]}),
        chunk({"tool_calls": [call(0, name="lookup", args=': "x"}')]}),
        chunk({"tool_calls": [call(1, name="ping")]}),
        chunk(finish="tool_calls"),
    )
    assert items == [
        ToolCall(id="call_0", name="lookup", input={"q": "x"}),
        ToolCall(id="call_1", name="ping", input={}),
        Completion(stop_reason="tool_use", usage=TokenUsage(), model="local-model"),
    ]


def test_refusal_text_is_streamed_and_ends_as_a_refusal() -> None:
    items = run(
        chunk({"refusal": "I can't help"}),
        chunk({"refusal": " with that."}),
        chunk(finish="stop"),
    )
    assert items == [
        TextChunk(text="I can't help"),
        TextChunk(text=" with that."),
        Completion(stop_reason="refusal", usage=TokenUsage(), model="local-model"),
    ]


def test_usage_on_the_finish_chunk_and_without_details() -> None:
    usage = {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}
    items = run(chunk({"content": "Hi"}), chunk(finish="stop", usage=usage))
    assert items == [
        TextChunk(text="Hi"),
        Completion(
            stop_reason="end_turn",
            usage=TokenUsage(input_tokens=30, output_tokens=4),
            model="local-model",
        ),
    ]


def test_unknown_finish_reason_is_an_end_and_missing_model_falls_back() -> None:
    state, _ = fold(StreamState(source="test:model"), chunk(finish="eos", model=None))
    assert completion(state, default_model="fallback") == Completion(
        stop_reason="end_turn", usage=TokenUsage(), model="fallback"
    )


def test_other_choices_are_ignored() -> None:
    items = run(
        chunk(
            choices=[
                {"index": 1, "delta": {"content": "other"}, "finish_reason": None},
                {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
            ]
        )
    )
    assert items == [
        TextChunk(text="mine"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="local-model"),
    ]


@pytest.mark.parametrize("arguments", ['{"path": "/etc/pass', "[1, 2]", "null"])
def test_arguments_that_are_not_a_json_object_fail_without_echoing_them(arguments: str) -> None:
    with pytest.raises(ModelError) as raised:
        run(chunk({"tool_calls": [call(0, id="c", name="read", args=arguments)]}, "length"))
    assert raised.value.code == "provider_unavailable"
    assert "'read'" in raised.value.message
    assert arguments not in raised.value.message


def test_a_tool_call_without_a_name_fails() -> None:
    with pytest.raises(ModelError) as raised:
        run(chunk({"tool_calls": [call(0, id="c", args="{}")]}, "tool_calls"))
    assert raised.value.code == "provider_unavailable"


def test_a_stream_without_a_finish_reason_fails() -> None:
    state, items = fold(StreamState(source="test:model"), chunk({"content": "Half"}))
    assert items == [TextChunk(text="Half")]
    with pytest.raises(ModelError) as raised:
        completion(state, default_model="fallback")
    assert raised.value.code == "provider_unavailable"
    assert raised.value.message.startswith("The test:model stream ended before the message")
