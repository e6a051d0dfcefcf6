"""``AnthropicModel`` through the real ``anthropic`` SDK against a local fake server.

Every reply is parsed by the SDK itself, from recorded-style SSE transcripts or from the
``_fake_anthropic`` helpers, so these tests catch both mapping bugs and SDK surprises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from structlog.testing import capture_logs

from providers import (
    Completion,
    Message,
    Model,
    ModelError,
    ModelRequest,
    StreamItem,
    SystemBlock,
    TextChunk,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from providers._anthropic import AnthropicModel, translate_error
from providers._config import ProviderConfig
from providers._fake_anthropic import (
    SSE_HEADERS,
    anthropic_error,
    anthropic_reply,
    anthropic_transcript,
)
from providers._fake_server import Exchange, FakeProvider, FakeServer, sse_frames
from providers._model import ResponseSchema
from providers._prices import cost_usd_micros

TRANSCRIPTS = Path(__file__).parent / "transcripts" / "anthropic"
SNAPSHOT = "claude-haiku-4-5-20251001"  # the model id the recorded transcripts report
HELLO = ModelRequest(messages=(Message.user("Say hello to Ana, born 1990-04-01"),))


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    # One server for the module: starting and stopping uvicorn costs ~0.2 s per test.
    with FakeServer(FakeProvider()) as started:
        yield started


@pytest.fixture
def provider(server: FakeServer) -> Iterator[FakeProvider]:
    fake = server.provider
    fake.reset()  # a failed test may leave its script behind
    yield fake
    assert fake.pending == 0, f"{fake.pending} scripted exchanges were never requested"


def config(server: FakeServer, **overrides: Any) -> ProviderConfig:
    settings: dict[str, Any] = {
        "anthropic_api_key": "test-key",
        "anthropic_base_url": server.url,
        "max_retries": 2,
    }
    return ProviderConfig(**(settings | overrides))


@pytest.fixture
async def model(server: FakeServer, provider: FakeProvider) -> AsyncIterator[AnthropicModel]:
    built = AnthropicModel("claude-haiku-4-5", config=config(server))
    yield built
    await built.aclose()


async def collect(model: Model, request: ModelRequest = HELLO) -> list[StreamItem]:
    return [item async for item in model.stream(request)]


async def collect_failure(
    model: Model, request: ModelRequest = HELLO
) -> tuple[list[StreamItem], ModelError]:
    """The items yielded before the stream failed, and the failure."""
    items: list[StreamItem] = []
    with pytest.raises(ModelError) as failure:
        async for item in model.stream(request):
            items.append(item)
    return items, failure.value


async def wait_for_disconnects(provider: FakeProvider, count: int) -> None:
    # The fake counts in its server thread: poll (for 3 s at most).
    for _ in range(300):
        if provider.disconnects >= count:
            break
        await asyncio.sleep(0.01)
    assert provider.disconnects == count


def transcript(name: str) -> Exchange:
    return anthropic_transcript(TRANSCRIPTS / name)


# --- replies -----------------------------------------------------------------------------


async def test_plain_text_stream(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(transcript("text.sse"))

    assert await collect(model) == [
        TextChunk(text="Hello"),
        TextChunk(text="! How can I"),
        TextChunk(text=" help you today?"),
        Completion(
            stop_reason="end_turn",
            usage=TokenUsage(input_tokens=21, output_tokens=12),
            model=SNAPSHOT,
        ),
    ]
    [sent] = provider.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.json == {
        "model": "claude-haiku-4-5",
        "max_tokens": 4096,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": HELLO.messages[0].text}]}
        ],
        "stream": True,
    }
    # anthropic 2.x sends the API key as a bearer token, not as x-api-key
    assert sent.headers["authorization"] == "Bearer test-key"
    assert "x-api-key" not in sent.headers


async def test_reply_helper_chunks_text(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(anthropic_reply(text="Hello", text_chunk_size=3))

    assert await collect(model) == [
        TextChunk(text="Hel"),
        TextChunk(text="lo"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="claude-haiku-4-5"),
    ]


async def test_single_tool_call(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(transcript("tool_call.sse"))

    assert await collect(model) == [
        TextChunk(text="I'll check the"),
        TextChunk(text=" weather in Paris."),
        ToolCall(
            id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            name="get_weather",
            input={"city": "Paris", "unit": "celsius"},
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=472, output_tokens=89),
            model=SNAPSHOT,
        ),
    ]


async def test_two_parallel_tool_calls(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(transcript("parallel_tool_calls.sse"))

    assert await collect(model) == [
        TextChunk(text="Let me look up"),
        TextChunk(text=" both cities."),
        ToolCall(id="toolu_01A09q90qw90lq917835lq9", name="get_weather", input={"city": "Paris"}),
        ToolCall(id="toolu_01VfqT4TDgCwTbrvR1AF6Pje", name="get_weather", input={"city": "Tokyo"}),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=510, output_tokens=143),
            model=SNAPSHOT,
        ),
    ]


async def test_arguments_split_inside_strings_and_escapes(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("split_arguments.sse"))

    assert await collect(model) == [
        ToolCall(
            id="toolu_01Sm5ZfyNB6mQ2j8PJfZDeLk",
            name="write_file",
            input={
                "path": 'C:\\Users\\ana\\notes "draft".txt',
                "content": "Line 1\nLine 2 — café ✓\t{not json}",
                "tags": ["a", "b,c"],
                "count": 3,
                "nested": {"ok": True, "ratio": 0.5, "none": None},
            },
        ),
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(input_tokens=388, output_tokens=96),
            model=SNAPSHOT,
        ),
    ]


async def test_one_character_json_fragments_and_empty_input(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    calls = (
        ToolCall(id="toolu_a", name="search", input={"q": 'say "hi"\\n', "n": [1, 2]}),
        ToolCall(id="toolu_b", name="now", input={}),
    )
    provider.enqueue(anthropic_reply(tool_calls=calls, json_chunk_size=1))

    assert await collect(model) == [
        *calls,
        Completion(stop_reason="tool_use", usage=TokenUsage(), model="claude-haiku-4-5"),
    ]


async def test_usage_with_cache_tokens_and_cost(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("cache_usage.sse"))

    *chunks, completion = await collect(model)

    assert chunks == [TextChunk(text="From the cached"), TextChunk(text=" context: yes.")]
    usage = TokenUsage(
        input_tokens=1_000, output_tokens=500, cache_read_tokens=10_000, cache_write_tokens=2_000
    )
    assert completion == Completion(stop_reason="end_turn", usage=usage, model=SNAPSHOT)
    # Haiku 4.5: 1,000 x $1 + 500 x $5 + 10,000 x $0.10 + 2,000 x $1.25 per million tokens
    assert cost_usd_micros(completion.model, completion.usage) == 7_000


async def test_one_hour_cache_writes_are_read_apart_and_priced_at_their_rate(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("cache_usage_1h.sse"))  # 2,000 written: 500 for 5m, 1,500 for 1h

    *_, completion = await collect(model)

    assert completion.usage == TokenUsage(
        input_tokens=1_000, output_tokens=500, cache_read_tokens=10_000,
        cache_write_tokens=2_000, cache_write_1h_tokens=1_500,
    )  # fmt: skip
    # Haiku 4.5: 1,000 x $1 + 500 x $5 + 10,000 x $0.10 + 500 x $1.25 + 1,500 x $2 per
    # million tokens; at the 5-minute rate it would be 7,000
    assert cost_usd_micros(completion.model, completion.usage) == 8_125


async def test_unfinished_stop_reason_is_reported_as_max_tokens(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_reply(text="Searching", stop_reason="pause_turn"))

    with capture_logs() as logs:
        items = await collect(model)

    assert items == [
        TextChunk(text="Searching"),
        Completion(stop_reason="max_tokens", usage=TokenUsage(), model="claude-haiku-4-5"),
    ]
    assert logs == [
        {
            "event": "anthropic.stop_reason_mapped",
            "stop_reason": "pause_turn",
            "reported_as": "max_tokens",
            "log_level": "warning",
        }
    ]


def _truncated_tool_stream(stop_reason: str) -> Exchange:
    """A tool call whose JSON input was cut short, ending with ``stop_reason``."""
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-haiku-4-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 9, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"text": "unfini'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 64},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Exchange(headers=SSE_HEADERS, chunks=sse_frames(events))


async def test_tool_input_cut_by_max_tokens_is_dropped(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(_truncated_tool_stream("max_tokens"))

    assert await collect(model) == [
        Completion(
            stop_reason="max_tokens",
            usage=TokenUsage(input_tokens=9, output_tokens=64),
            model="claude-haiku-4-5",
        )
    ]


async def test_invalid_tool_input_otherwise_fails(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(_truncated_tool_stream("tool_use"))

    items, error = await collect_failure(model)

    assert items == []
    assert error.code == "provider_unavailable"
    assert "'f'" in error.message
    assert "unfini" not in error.message


async def test_structured_output_via_forced_tool(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["ok", "reason"],
    }
    request = ModelRequest(
        messages=(Message.user("Is 2+2=4?"),),
        response_schema=ResponseSchema(name="verdict", schema=schema, description="The verdict"),
    )
    provider.enqueue(
        anthropic_reply(
            tool_calls=[
                ToolCall(id="toolu_v", name="verdict", input={"ok": True, "reason": "yes"})
            ],
            json_chunk_size=4,
            usage=TokenUsage(input_tokens=30, output_tokens=12),
        )
    )

    assert await collect(model, request) == [
        TextChunk(text='{"ok": true, "reason": "yes"}'),
        Completion(
            stop_reason="end_turn",
            usage=TokenUsage(input_tokens=30, output_tokens=12),
            model="claude-haiku-4-5",
        ),
    ]
    sent = provider.requests[0].json
    assert sent["tools"] == [
        {"name": "verdict", "description": "The verdict", "input_schema": schema}
    ]
    assert sent["tool_choice"] == {"type": "tool", "name": "verdict"}


# --- errors ------------------------------------------------------------------------------


async def test_rate_limited_then_success_retries_in_the_sdk(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_error(429, retry_after_ms=1), anthropic_reply(text="ok"))

    assert await collect(model) == [
        TextChunk(text="ok"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="claude-haiku-4-5"),
    ]
    assert [r.headers["x-stainless-retry-count"] for r in provider.requests] == ["0", "1"]
    assert provider.requests[0].json == provider.requests[1].json


async def test_overloaded_after_all_retries(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(*[anthropic_error(529, retry_after_ms=1)] * 3)

    items, error = await collect_failure(model)

    assert items == []
    assert (error.code, error.status, error.request_id) == (
        "provider_overloaded",
        529,
        "req_fake_3",
    )
    assert len(provider.requests) == 3  # max_retries=2: the SDK tried three times


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "provider_invalid_request"),
        (401, "provider_unauthorized"),
        (403, "provider_unauthorized"),
        (404, "provider_invalid_request"),
        (413, "provider_invalid_request"),
    ],
)
async def test_client_errors_are_not_retried(
    model: AnthropicModel, provider: FakeProvider, status: int, code: str
) -> None:
    provider.enqueue(anthropic_error(status, message="the API's own explanation"))

    items, error = await collect_failure(model)

    assert items == []
    assert (error.code, error.status, error.request_id) == (code, status, "req_fake_1")
    assert "the API's own explanation" in error.message
    assert "Ana" not in error.message  # never the user's prompt
    assert len(provider.requests) == 1


async def test_server_error_is_unavailable(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(*[anthropic_error(500, retry_after_ms=1)] * 3)

    _, error = await collect_failure(model)

    assert (error.code, error.status, error.request_id) == (
        "provider_unavailable",
        500,
        "req_fake_3",
    )


async def test_long_provider_messages_are_capped(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_error(400, message="x" * 2_000))

    _, error = await collect_failure(model)

    assert "x" * 497 + "..." in error.message
    assert "x" * 498 not in error.message


async def test_unauthorized_message(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(anthropic_error(401, message="invalid x-api-key"))

    _, error = await collect_failure(model)

    assert error.message == (
        "Anthropic returned HTTP 401 (authentication_error): invalid x-api-key; "
        "check ANTHROPIC_API_KEY (or anthropic_api_key in the config)"
    )


async def test_connection_cut_mid_message(model: AnthropicModel, provider: FakeProvider) -> None:
    # frames: message_start, content_block_start, ping, "Hello", " worl", "d", ...
    reply = anthropic_reply(text="Hello world", text_chunk_size=5)
    provider.enqueue(dataclasses.replace(reply, cut_after=5))

    items, error = await collect_failure(model)

    assert items == [TextChunk(text="Hello"), TextChunk(text=" worl")]
    assert error.code == "provider_unavailable"
    assert "RemoteProtocolError" in error.message
    assert len(provider.requests) == 1  # a stream that already started is not retried


async def test_stream_ending_without_message_stop(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("cut_off.sse"))

    items, error = await collect_failure(model)

    assert items == [TextChunk(text="Here is the"), TextChunk(text=" first part")]
    assert error.code == "provider_unavailable"
    assert "stream ended before the message was complete" in error.message


async def test_midstream_error_event_uses_its_type(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(transcript("midstream_overloaded.sse"))

    items, error = await collect_failure(model)

    assert items == [TextChunk(text="The answer"), TextChunk(text=" is")]
    assert (error.code, error.status, error.request_id) == (
        "provider_overloaded",
        None,
        "req_fake_1",
    )
    assert error.message == (
        "Anthropic reported overloaded_error in the middle of the reply stream: Overloaded; "
        "Anthropic is overloaded; retry later or pick another model"
    )
    assert len(provider.requests) == 1


async def test_read_timeout_mid_stream(server: FakeServer, provider: FakeProvider) -> None:
    slow = dataclasses.replace(anthropic_reply(text="late"), chunk_delay_s=0.3)
    provider.enqueue(slow)
    model = AnthropicModel("claude-haiku-4-5", config=config(server, timeout_s=0.05))
    try:
        _, error = await collect_failure(model)
    finally:
        await model.aclose()

    assert error.code == "provider_timeout"
    await wait_for_disconnects(provider, 1)  # so the slow reply does not outlive the test


async def test_unreachable_server(provider: FakeProvider) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = ProviderConfig(
        anthropic_api_key="k", anthropic_base_url=f"http://127.0.0.1:{port}", max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=settings)
    try:
        _, error = await collect_failure(model)
    finally:
        await model.aclose()

    assert (error.code, error.status) == ("provider_unavailable", None)
    assert error.message == "Anthropic could not be reached; retry the request later"


async def test_missing_api_key(server: FakeServer, provider: FakeProvider) -> None:
    model = AnthropicModel("claude-haiku-4-5", config=config(server, anthropic_api_key=None))
    try:
        _, error = await collect_failure(model)
    finally:
        await model.aclose()

    assert error.code == "provider_unauthorized"
    assert "ANTHROPIC_API_KEY" in error.message
    assert provider.requests == []


def test_sdk_timeout_and_connection_errors_translate() -> None:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")

    timeout = translate_error(anthropic.APITimeoutError(request))
    unreachable = translate_error(anthropic.APIConnectionError(request=request))

    assert (timeout.code, timeout.message) == (
        "provider_timeout",
        "Anthropic did not answer in time; retry, or raise timeout_s in the provider config",
    )
    assert unreachable.code == "provider_unavailable"


# --- cancellation ------------------------------------------------------------------------


def _slow_reply() -> Exchange:
    return dataclasses.replace(
        anthropic_reply(text="one two three four five six", text_chunk_size=4), chunk_delay_s=0.02
    )


async def test_closing_the_stream_early_closes_the_http_stream(
    server: FakeServer, provider: FakeProvider
) -> None:
    provider.enqueue(_slow_reply())
    responses: list[httpx2.Response] = []

    async def keep(response: httpx2.Response) -> None:
        responses.append(response)

    http = httpx2.AsyncClient(event_hooks={"response": [keep]})
    async with anthropic.AsyncAnthropic(
        api_key="k", base_url=server.url, http_client=http
    ) as client:
        async with contextlib.aclosing(AnthropicModel("m", client=client).stream(HELLO)) as items:
            first = await anext(items)
        # closed by the adapter itself, not later by a garbage-collection hook
        assert responses[0].is_closed

    assert first == TextChunk(text="one ")
    await wait_for_disconnects(provider, 1)


async def test_cancelling_the_consumer_closes_the_http_stream(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(_slow_reply())
    received: list[StreamItem] = []
    started = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(model.stream(HELLO)) as items:
            async for item in items:
                received.append(item)
                started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_for_disconnects(provider, 1)
    assert not any(isinstance(item, Completion) for item in received)


# --- the request -------------------------------------------------------------------------

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather in a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


async def test_request_shape(model: AnthropicModel, provider: FakeProvider) -> None:
    provider.enqueue(anthropic_reply(text="Tokyo too."))
    request = ModelRequest(
        system=(SystemBlock(text="You are terse."), SystemBlock(text="The user is Ana.")),
        messages=(
            Message.user("Weather in Paris?"),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Checking."),
                    ToolCall(id="toolu_1", name="get_weather", input={"city": "Paris"}),
                    ToolCall(id="toolu_2", name="get_weather", input={"city": "Lyon"}),
                ),
            ),
            Message(role="user", parts=(ToolResult(tool_use_id="toolu_1", content="18C"),)),
            Message(
                role="user",
                parts=(
                    ToolResult(tool_use_id="toolu_2", content="no such city", is_error=True),
                    TextPart(text="And Tokyo?"),
                ),
            ),
        ),
        tools=(WEATHER,),
        tool_choice="get_weather",
        max_tokens=256,
    )

    await collect(model, request)

    assert provider.requests[0].json == {
        "model": "claude-haiku-4-5",
        "max_tokens": 256,
        "stream": True,
        "system": [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "The user is Ana."},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "get_weather",
                        "input": {"city": "Lyon"},
                    },
                ],
            },
            {  # the two user messages are merged: Anthropic wants alternating roles
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "18C",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "no such city",
                        "is_error": True,
                    },
                    {"type": "text", "text": "And Tokyo?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather in a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    }


def cache_marked(body: Any, path: str = "") -> dict[str, Any]:
    """Every ``cache_control`` in a request body, by the path of the block holding it."""
    found: dict[str, Any] = {}
    if isinstance(body, dict):
        if "cache_control" in body:
            found[path] = body["cache_control"]
        for key, value in body.items():
            found |= cache_marked(value, f"{path}.{key}" if path else key)
    elif isinstance(body, list):
        for index, value in enumerate(body):
            found |= cache_marked(value, f"{path}[{index}]")
    return found


async def test_cache_breakpoints_on_the_wire_with_per_mark_ttls(
    server: FakeServer, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_reply(text="ok"))
    request = ModelRequest(
        system=(SystemBlock(text="Static rules.", cache=True), SystemBlock(text="Today: Monday")),
        messages=(
            Message(role="user", parts=(TextPart(text="a"), TextPart(text="b")), cache=True),
            Message.assistant("c"),
            Message.user("d"),
        ),
        tools=(WEATHER, dataclasses.replace(WEATHER, name="get_time")),
        cache_tools=True,
    )
    model = AnthropicModel("claude-haiku-4-5", config=config(server))  # the defaults
    try:
        await collect(model, request)
    finally:
        await model.aclose()

    one_hour, five_minutes = {"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}
    assert cache_marked(provider.requests[0].json) == {
        "tools[1]": one_hour,
        "system[0]": one_hour,
        "messages[0].content[1]": five_minutes,
    }
    assert "anthropic-beta" not in provider.requests[0].headers  # the TTL is GA


async def test_only_the_last_four_breakpoints_are_sent(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_reply(text="ok"))
    request = ModelRequest(
        system=(SystemBlock(text="s1", cache=True), SystemBlock(text="s2", cache=True)),
        messages=(
            Message(role="user", parts=(TextPart(text="u1"),), cache=True),
            Message(role="assistant", parts=(TextPart(text="a1"),), cache=True),
            Message(role="user", parts=(TextPart(text="u2"),), cache=True),
        ),
        tools=(WEATHER,),
        cache_tools=True,
    )

    await collect(model, request)

    five_minutes = {"type": "ephemeral", "ttl": "5m"}
    assert cache_marked(provider.requests[0].json) == {
        "system[1]": {"type": "ephemeral", "ttl": "1h"},
        "messages[0].content[0]": five_minutes,
        "messages[1].content[0]": five_minutes,
        "messages[2].content[0]": five_minutes,
    }


# --- construction --------------------------------------------------------------------------


async def test_key_and_url_fall_back_to_the_sdk_environment(
    server: FakeServer, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    provider.enqueue(anthropic_reply(text="ok"))
    model = AnthropicModel("claude-haiku-4-5")
    try:
        items = await collect(model)
    finally:
        await model.aclose()

    assert items[0] == TextChunk(text="ok")
    assert provider.requests[0].headers["authorization"] == "Bearer env-key"
    assert provider.requests[0].json["model"] == "claude-haiku-4-5"


async def test_an_explicit_api_key_overrides_the_configured_one(
    server: FakeServer, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_reply(text="ok"))
    model = AnthropicModel("claude-haiku-4-5", config=config(server), api_key="org-key")
    try:
        await collect(model)
    finally:
        await model.aclose()

    assert provider.requests[0].headers["authorization"] == "Bearer org-key"


async def test_a_shared_client_is_used_and_left_open(
    server: FakeServer, provider: FakeProvider
) -> None:
    provider.enqueue(anthropic_reply(text="ok"), anthropic_reply(text="again"))
    async with anthropic.AsyncAnthropic(api_key="shared", base_url=server.url) as client:
        model = AnthropicModel("claude-haiku-4-5", client=client)
        assert model.name == "anthropic:claude-haiku-4-5"
        assert isinstance(model, Model)
        await collect(model)
        await model.aclose()  # not ours to close: the client still works
        await collect(model)

    assert [r.headers["authorization"] for r in provider.requests] == ["Bearer shared"] * 2


async def test_misplaced_parts_fail_before_any_request(
    model: AnthropicModel, provider: FakeProvider
) -> None:
    request = ModelRequest(
        messages=(Message(role="user", parts=(ToolCall(id="t", name="f", input={}),)),)
    )

    _, error = await collect_failure(model, request)

    assert error.code == "provider_invalid_request"
    assert error.message == (
        "Message 0 is a 'user' message holding a ToolCall; "
        "move it to a message with role 'assistant'"
    )
    assert provider.requests == []


# --- the fakes themselves ----------------------------------------------------------------


@pytest.mark.parametrize(
    "exchange",
    [
        *[transcript(name) for name in ("text.sse", "tool_call.sse", "parallel_tool_calls.sse")],
        *[transcript(name) for name in ("split_arguments.sse", "cache_usage.sse")],
        anthropic_reply(
            text="Hi there",
            tool_calls=[
                ToolCall(id="toolu_1", name="f", input={"a": 1}),
                ToolCall(id="t2", name="g"),
            ],
            usage=TokenUsage(input_tokens=5, output_tokens=6, cache_read_tokens=7),
            text_chunk_size=2,
            json_chunk_size=3,
        ),
        anthropic_reply(),
    ],
)
async def test_fakes_pass_the_sdks_strict_validation(
    server: FakeServer, provider: FakeProvider, exchange: Exchange
) -> None:
    provider.enqueue(exchange)
    async with anthropic.AsyncAnthropic(
        api_key="k", base_url=server.url, _strict_response_validation=True
    ) as client:
        items = await collect(AnthropicModel("claude-haiku-4-5", client=client))

    assert isinstance(items[-1], Completion)


def test_error_helper_speaks_anthropics_error_format() -> None:
    exchange = anthropic_error(529, retry_after_ms=250)

    assert exchange.status == 529
    assert exchange.headers == (("content-type", "application/json"), ("retry-after-ms", "250"))
    assert json.loads(b"".join(exchange.chunks)) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "overloaded_error"},
    }


def test_transcripts_load_from_a_path_or_from_text() -> None:
    path = TRANSCRIPTS / "text.sse"

    from_path = anthropic_transcript(path)

    assert from_path == anthropic_transcript(str(path))
    assert from_path == anthropic_transcript(path.read_text(encoding="utf-8"))
    assert len(from_path.chunks) == 9  # one SSE frame per chunk
    assert from_path.headers == SSE_HEADERS
