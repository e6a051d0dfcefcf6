"""``OpenAIModel`` through the real ``openai`` SDK against a local fake server.

Recorded-style transcripts and ``openai_reply`` exchanges are served over 127.0.0.1, so
the SDK's own HTTP, SSE and retry code runs; assertions cover whole item sequences and
whole request bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from providers import (
    Completion,
    Message,
    ModelError,
    ModelRequest,
    StopReason,
    StreamItem,
    SystemBlock,
    TextChunk,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from providers._config import ProviderConfig
from providers._fake_openai import openai_error, openai_reply, openai_transcript
from providers._fake_server import Exchange, FakeProvider, FakeServer, sse_frames
from providers._model import ResponseSchema
from providers._openai import OpenAIModel
from providers._prices import cost_usd_micros

TRANSCRIPTS = Path(__file__).parent / "transcripts" / "openai"
SNAPSHOT = "gpt-4.1-mini-2025-04-14"  # the model the transcripts report
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def transcript(name: str) -> Exchange:
    return openai_transcript(TRANSCRIPTS / f"{name}.sse")


def ask(text: str = "hello", **fields: Any) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), **fields)


async def collect(model: OpenAIModel, request: ModelRequest | None = None) -> list[StreamItem]:
    return [item async for item in model.stream(request or ask())]


async def collect_until_error(
    model: OpenAIModel, request: ModelRequest | None = None
) -> tuple[list[StreamItem], ModelError]:
    """The items yielded before the stream failed, and the failure."""
    items: list[StreamItem] = []
    with pytest.raises(ModelError) as raised:
        async for item in model.stream(request or ask()):
            items.append(item)
    return items, raised.value


@pytest.fixture(scope="module")
def running_server() -> Iterator[FakeServer]:
    """One server for the module: starting and stopping uvicorn costs ~0.2 s a test."""
    with FakeServer(FakeProvider(request_id_header="x-request-id")) as running:
        yield running


@pytest.fixture
def server(running_server: FakeServer) -> Iterator[FakeServer]:
    """The shared server, reset for this test; fails the test if a reply went unused."""
    provider = running_server.provider
    provider.reset()
    yield running_server
    assert provider.pending == 0, f"{provider.pending} scripted replies were never requested"


@pytest.fixture
def provider(server: FakeServer) -> FakeProvider:
    return server.provider


@pytest.fixture
async def model(server: FakeServer) -> AsyncIterator[OpenAIModel]:
    config = ProviderConfig(
        openai_api_key="test-key", openai_base_url=server.url + "/v1", max_retries=2
    )
    opened = OpenAIModel("gpt-4.1-mini", config=config)
    yield opened
    await opened.aclose()


# Replies


async def test_plain_text(model: OpenAIModel, provider: FakeProvider) -> None:
    provider.enqueue(transcript("text"))
    assert await collect(model) == [
        *(
            TextChunk(text=t)
            for t in ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]
        ),
        Completion(
            stop_reason="end_turn",
            usage=TokenUsage(input_tokens=19, output_tokens=10),
            model=SNAPSHOT,
        ),
    ]
    assert model.name == "openai:gpt-4.1-mini"


async def test_single_tool_call(model: OpenAIModel, provider: FakeProvider) -> None:
    provider.enqueue(transcript("tool_call"))
    assert await collect(model) == [
        ToolCall(
            id="call_Qm3vX8pL2sT9kR4wN7yB1cZe",
            name="get_weather",
            input={"city": "Paris", "unit": "celsius"},
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=84, output_tokens=19),
            model=SNAPSHOT,
        ),
    ]


async def test_parallel_tool_calls_with_interleaved_fragments(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("parallel_tool_calls"))
    assert await collect(model) == [
        ToolCall(id="call_A1b2C3d4E5f6G7h8I9j0K1l2", name="get_weather", input={"city": "Paris"}),
        ToolCall(
            id="call_M3n4O5p6Q7r8S9t0U1v2W3x4", name="get_time", input={"timezone": "Europe/Paris"}
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=96, output_tokens=52),
            model=SNAPSHOT,
        ),
    ]


async def test_arguments_split_across_many_chunks(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("split_arguments"))
    assert await collect(model) == [
        ToolCall(
            id="call_Z9y8X7w6V5u4T3s2R1q0P9o8",
            name="write_file",
            input={
                "path": "notes/todo.md",
                "content": 'Line 1: "quoted"\nLine 2:\ttab \\ backslash café ✓',
            },
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=131, output_tokens=44),
            model=SNAPSHOT,
        ),
    ]


async def test_cached_tokens_are_not_input_tokens(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("cache_usage"))
    items = await collect(model)
    completion = items[-1]
    assert completion == Completion(
        stop_reason="end_turn",
        usage=TokenUsage(input_tokens=2_000, output_tokens=1_000, cache_read_tokens=10_000),
        model=SNAPSHOT,
    )
    # 2,000 x $0.40 + 10,000 x $0.10 + 1,000 x $1.60 per million tokens
    assert cost_usd_micros(completion.model, completion.usage) == 3_400
    assert "".join(i.text for i in items if isinstance(i, TextChunk)) == (
        "The contract renews on 1 March 2026."
    )


async def test_openai_reply_helper_round_trips(model: OpenAIModel, provider: FakeProvider) -> None:
    calls = (
        ToolCall(id="call_1", name="search", input={"q": 'a "b"\n', "n": 3}),
        ToolCall(id="call_2", name="noop", input={}),
    )
    usage = TokenUsage(input_tokens=5, output_tokens=7, cache_read_tokens=11)
    provider.enqueue(
        openai_reply(
            text="Let me look.",
            tool_calls=calls,
            usage=usage,
            text_chunk_size=5,
            args_chunk_size=3,
        )
    )
    assert await collect(model) == [
        TextChunk(text="Let m"),
        TextChunk(text="e loo"),
        TextChunk(text="k."),
        *calls,
        Completion(stop_reason="tool_use", usage=usage, model="gpt-4.1-mini"),
    ]


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
async def test_finish_reasons(
    model: OpenAIModel, provider: FakeProvider, finish_reason: str, stop_reason: StopReason
) -> None:
    provider.enqueue(openai_reply(text="Partial", finish_reason=finish_reason))
    assert await collect(model) == [
        TextChunk(text="Partial"),
        Completion(stop_reason=stop_reason, usage=TokenUsage(), model="gpt-4.1-mini"),
    ]


async def test_fake_output_passes_strict_sdk_validation(server: FakeServer) -> None:
    """The transcripts and ``openai_reply`` match the SDK's own chunk models."""
    client = openai.AsyncOpenAI(
        api_key="test-key", base_url=server.url + "/v1", _strict_response_validation=True
    )
    strict = OpenAIModel("gpt-4.1-mini", client=client)
    names = ["text", "tool_call", "parallel_tool_calls", "split_arguments", "cache_usage"]
    server.provider.enqueue(*(transcript(n) for n in names))
    server.provider.enqueue(
        openai_reply(text="hi", tool_calls=(ToolCall(id="c", name="t", input={"a": 1}),))
    )
    try:
        for _ in range(len(names) + 1):
            items = await collect(strict)
            assert isinstance(items[-1], Completion)
    finally:
        await client.close()


# Failures


async def test_cut_off_transcript_fails_after_the_chunks_already_yielded(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("cut_off"))  # no finish_reason and no [DONE]
    items, error = await collect_until_error(model)
    assert items == [TextChunk(text=t) for t in ["Here", " is", " the", " first", " part"]]
    assert error.code == "provider_unavailable"
    assert "ended before the message was complete" in error.message


async def test_connection_dropped_mid_message(model: OpenAIModel, provider: FakeProvider) -> None:
    provider.enqueue(dataclasses.replace(transcript("cut_off"), cut_after=3))
    items, error = await collect_until_error(model)
    assert items == [TextChunk(text="Here"), TextChunk(text=" is")]
    assert (error.code, error.request_id) == ("provider_unavailable", "req_fake_1")
    assert "broke off before the message was complete" in error.message
    assert len(provider.requests) == 1  # a half-streamed reply is never retried


async def test_connection_dropped_after_usage_only_loses_done(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    whole = transcript("tool_call")
    provider.enqueue(dataclasses.replace(whole, cut_after=len(whole.chunks) - 1))
    assert await collect(model) == [
        ToolCall(
            id="call_Qm3vX8pL2sT9kR4wN7yB1cZe",
            name="get_weather",
            input={"city": "Paris", "unit": "celsius"},
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=84, output_tokens=19),
            model=SNAPSHOT,
        ),
    ]


async def test_rate_limit_is_retried_by_the_sdk(model: OpenAIModel, provider: FakeProvider) -> None:
    provider.enqueue(
        openai_error(429, "requests", "Rate limit reached", retry_after_ms=1),
        openai_reply(text="ok"),
    )
    assert await collect(model) == [
        TextChunk(text="ok"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="gpt-4.1-mini"),
    ]
    assert len(provider.requests) == 2
    assert provider.requests[1].headers["x-stainless-retry-count"] == "1"


@pytest.mark.parametrize(
    ("status", "error_type", "code", "attempts"),
    [
        (529, "overloaded_error", "provider_overloaded", 3),
        (500, "server_error", "provider_unavailable", 3),
        (429, "requests", "provider_rate_limited", 3),
        (400, "invalid_request_error", "provider_invalid_request", 1),
        (404, "invalid_request_error", "provider_invalid_request", 1),
        # OpenAI labels a bad key invalid_request_error: the status decides.
        (401, "invalid_request_error", "provider_unauthorized", 1),
        (403, "permission_error", "provider_unauthorized", 1),
    ],
)
async def test_http_errors(
    model: OpenAIModel,
    provider: FakeProvider,
    status: int,
    error_type: str,
    code: str,
    attempts: int,
) -> None:
    provider.enqueue(
        *[openai_error(status, error_type, "Something failed", retry_after_ms=1)] * attempts
    )
    items, error = await collect_until_error(model, ask("my secret prompt"))
    assert items == []
    assert (error.code, error.status, error.request_id) == (code, status, f"req_fake_{attempts}")
    assert error.message == f"openai:gpt-4.1-mini answered HTTP {status}: Something failed"
    assert len(provider.requests) == attempts
    assert provider.pending == 0


async def test_unauthorized_keeps_the_request_id(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(
        openai_error(
            401,
            "invalid_request_error",
            "Incorrect API key provided: test-key.",
            code="invalid_api_key",
        )
    )
    _, error = await collect_until_error(model)
    assert (error.code, error.status, error.request_id) == (
        "provider_unauthorized",
        401,
        "req_fake_1",
    )


async def test_error_event_inside_the_stream(model: OpenAIModel, provider: FakeProvider) -> None:
    reply = openai_reply(text="Hi")
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    provider.enqueue(
        dataclasses.replace(reply, chunks=(*reply.chunks[:2], *sse_frames([(None, error)])))
    )
    items, raised = await collect_until_error(model)
    assert items == [TextChunk(text="Hi")]
    assert (raised.code, raised.status, raised.request_id) == (
        "provider_unavailable",
        None,
        "req_fake_1",
    )
    assert raised.message == (
        "openai:gpt-4.1-mini sent an error inside the stream (server_error): "
        "The server had an error"
    )


async def test_non_json_event_is_a_provider_failure(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    reply = openai_reply(text="Hi")
    provider.enqueue(dataclasses.replace(reply, chunks=sse_frames([(None, "<html>oops")])))
    _, error = await collect_until_error(model)
    assert error.code == "provider_unavailable"
    assert "not JSON" in error.message


async def test_read_timeout(server: FakeServer) -> None:
    config = ProviderConfig(
        openai_api_key="test-key",
        openai_base_url=server.url + "/v1",
        max_retries=0,
        timeout_s=0.1,
    )
    slow = OpenAIModel("gpt-4.1-mini", config=config)
    server.provider.enqueue(dataclasses.replace(openai_reply(text="late"), chunk_delay_s=0.3))
    try:
        _, error = await collect_until_error(slow)
    finally:
        await slow.aclose()
    assert (error.code, error.request_id) == ("provider_timeout", "req_fake_1")
    await _wait_for_disconnect(server.provider)  # the client gave up on the stream


async def test_connection_refused() -> None:
    config = ProviderConfig(
        openai_api_key="test-key", openai_base_url="http://127.0.0.1:9/v1", max_retries=0
    )
    unreachable = OpenAIModel("gpt-4.1-mini", config=config)
    try:
        _, error = await collect_until_error(unreachable)
    finally:
        await unreachable.aclose()
    assert error.code == "provider_unavailable"
    assert error.message.startswith("Could not reach openai:gpt-4.1-mini at 127.0.0.1:9")


def test_missing_api_key_fails_at_construction() -> None:
    with pytest.raises(ModelError) as raised:
        OpenAIModel("gpt-4.1-mini")  # the conftest removes OPENAI_API_KEY
    assert raised.value.code == "provider_unauthorized"
    assert "OPENAI_API_KEY" in raised.value.message


# Request shape


async def test_request_body(model: OpenAIModel, provider: FakeProvider) -> None:
    provider.enqueue(openai_reply(text="ok"))
    request = ModelRequest(
        system=(
            SystemBlock(text="You are Bosun.", cache=True),
            SystemBlock(text="The user is Alice."),
        ),
        messages=(
            Message.user("Weather in Paris?"),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Checking."),
                    ToolCall(id="call_1", name="get_weather", input={"city": "Paris"}),
                ),
            ),
            Message(
                role="user",
                parts=(
                    ToolResult(tool_use_id="call_1", content="18°C, sunny"),
                    TextPart(text="And tomorrow?"),
                ),
                cache=True,
            ),
        ),
        tools=(WEATHER, ToolSpec(name="noop", description="", input_schema={"type": "object"})),
        tool_choice="any",
        max_tokens=512,
        cache_tools=True,
    )
    await collect(model, request)
    sent = provider.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.json == {
        "model": "gpt-4.1-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 512,
        "messages": [
            {"role": "system", "content": "You are Bosun.\n\nThe user is Alice."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER.input_schema,
                },
            },
            {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
        ],
        "tool_choice": "required",
    }


@pytest.mark.parametrize(
    ("tool_choice", "sent"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("any", "required"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
async def test_tool_choice(
    model: OpenAIModel, provider: FakeProvider, tool_choice: str, sent: object
) -> None:
    provider.enqueue(openai_reply(text="ok"))
    await collect(model, ask(tools=(WEATHER,), tool_choice=tool_choice))
    assert provider.requests[0].json["tool_choice"] == sent


async def test_one_tool_call_per_reply_is_asked_only_when_wanted(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(*(openai_reply(text="ok") for _ in range(3)))
    await collect(model, ask(tools=(WEATHER,), tool_choice="any", parallel_tool_calls=False))
    await collect(model, ask(tools=(WEATHER,), tool_choice="any"))
    await collect(model, ask(parallel_tool_calls=False))  # no tools: nothing to say
    sent = [r.json for r in provider.requests]
    assert sent[0]["parallel_tool_calls"] is False and sent[0]["tool_choice"] == "required"
    assert "parallel_tool_calls" not in sent[1] and "parallel_tool_calls" not in sent[2]


async def test_no_tools_sends_neither_tools_nor_tool_choice(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    provider.enqueue(openai_reply(text="ok"))
    await collect(model, ask(tool_choice="any"))
    assert provider.requests[0].json == {
        "model": "gpt-4.1-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 4096,
        "messages": [{"role": "user", "content": "hello"}],
    }


async def test_tool_result_round_trip(model: OpenAIModel, provider: FakeProvider) -> None:
    """A streamed call, sent back with its result, arrives as OpenAI expects it."""
    provider.enqueue(transcript("split_arguments"), openai_reply(text="Saved."))
    first = ask("Write my notes", tools=(WEATHER,))
    items = await collect(model, first)
    call = items[0]
    assert isinstance(call, ToolCall)
    follow_up = dataclasses.replace(
        first,
        messages=(
            *first.messages,
            Message(role="assistant", parts=(call,)),
            Message(
                role="user",
                parts=(ToolResult(tool_use_id=call.id, content="disk full", is_error=True),),
            ),
        ),
    )
    assert await collect(model, follow_up) == [
        TextChunk(text="Saved."),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="gpt-4.1-mini"),
    ]
    assistant, tool = provider.requests[1].json["messages"][1:]
    arguments = assistant["tool_calls"][0]["function"].pop("arguments")
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call.id, "type": "function", "function": {"name": "write_file"}}],
    }
    assert json.loads(arguments) == call.input
    assert tool == {"role": "tool", "tool_call_id": call.id, "content": "Error: disk full"}


async def test_structured_output(model: OpenAIModel, provider: FakeProvider) -> None:
    strict_schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
        "required": ["answer", "confidence"],
        "additionalProperties": False,
    }
    loose_schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    document = '{"answer": "42", "confidence": 0.9}'
    provider.enqueue(
        openai_reply(text=document, text_chunk_size=8), openai_reply(text='{"answer": "42"}')
    )
    schema = ResponseSchema(name="verdict", schema=strict_schema, description="The verdict.")
    items = await collect(model, ask(response_schema=schema))
    assert json.loads("".join(i.text for i in items if isinstance(i, TextChunk))) == {
        "answer": "42",
        "confidence": 0.9,
    }
    await collect(model, ask(response_schema=ResponseSchema(name="loose", schema=loose_schema)))
    assert [r.json["response_format"] for r in provider.requests] == [
        {
            "type": "json_schema",
            "json_schema": {
                "name": "verdict",
                "schema": strict_schema,
                "strict": True,
                "description": "The verdict.",
            },
        },
        {
            "type": "json_schema",
            "json_schema": {"name": "loose", "schema": loose_schema, "strict": False},
        },
    ]


# OpenAI-compatible servers


async def test_openai_compatible_server_without_usage(server: FakeServer) -> None:
    compatible = OpenAIModel(
        "llama3.1",
        base_url=server.url + "/ollama/v1",
        api_key="unused",
        provider="openai-compatible",
    )
    server.provider.enqueue(openai_reply(text="Hi!", model="llama3.1", include_usage=False))
    try:
        items = await collect(compatible, ask(max_tokens=300))
    finally:
        await compatible.aclose()
    assert compatible.name == "openai-compatible:llama3.1"
    assert items == [
        TextChunk(text="Hi!"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="llama3.1"),
    ]
    sent = server.provider.requests[0]
    assert sent.path == "/ollama/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer unused"
    assert sent.json["max_tokens"] == 300  # what every compatible server understands
    assert "max_completion_tokens" not in sent.json


# Cancellation


async def _wait_for_disconnect(provider: FakeProvider) -> None:
    for _ in range(200):
        if provider.disconnects:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the fake server never saw the client go away")


async def test_closing_the_stream_early_closes_the_http_stream(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    slow = openai_reply(text="one two three four five six", text_chunk_size=4)
    provider.enqueue(dataclasses.replace(slow, chunk_delay_s=0.05))
    received: list[StreamItem] = []
    async with contextlib.aclosing(model.stream(ask())) as items:
        async for item in items:
            received.append(item)
            if len(received) == 2:
                break
    assert received == [TextChunk(text="one "), TextChunk(text="two ")]
    await _wait_for_disconnect(provider)
    assert provider.disconnects == 1


async def test_cancelling_the_consumer_closes_the_http_stream(
    model: OpenAIModel, provider: FakeProvider
) -> None:
    slow = openai_reply(text="one two three four five six", text_chunk_size=4)
    provider.enqueue(dataclasses.replace(slow, chunk_delay_s=0.05))
    first = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(model.stream(ask())) as items:
            async for _ in items:
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_for_disconnect(provider)
    assert provider.disconnects == 1
