"""An OpenAPI tool call carries the turn's trace to the host's API (``traceparent``), so a
host's own tracing continues the trace Bosun's caller started."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_mcp_turns import call, status
from test_openapi_turns import SEEDED, register, scribe, secrets_key

from conftest import Server, ServerFactory
from helpers import Frame, stream_turn
from openapi_testing import notes_host
from providers import Reply
from telemetry_testing import Spans, tracing

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def host() -> Iterator[tuple[Any, str]]:
    with notes_host() as (notes, url):
        notes.notes["acme"] = {"n0": dict(SEEDED)}
        yield notes, url


@pytest.fixture
def spans() -> Iterator[Spans]:
    with tracing() as exported:
        yield exported


async def test_an_openapi_call_carries_the_trace_to_the_host(
    make_server: ServerFactory, host: tuple[Any, str], spans: Spans
) -> None:
    notes, url = host
    models = scribe(look=[call("tu_list", "notes_list_notes", q="Groc"), Reply(text="One note.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url)
        headers = {**server.auth(user="olga", role="owner"), "traceparent": TRACEPARENT}
        body = {"message": "look at the notes", "agent": "scribe"}
        frames = await chat_with(server, body, headers)

    assert status(frames) == "completed"
    [sent] = notes.traceparents
    assert sent is not None
    _version, trace_id, parent_id, _flags = sent.split("-")
    tool_span = spans.one("execute_tool notes.list_notes")
    assert trace_id == CALLER_TRACE == f"{tool_span.context.trace_id:032x}"
    assert parent_id == f"{tool_span.context.span_id:016x}"  # the host's parent is the call


async def test_with_tracing_off_no_traceparent_leaves(
    make_server: ServerFactory, host: tuple[Any, str]
) -> None:
    notes, url = host
    models = scribe(look=[call("tu_list", "notes_list_notes", q="Groc"), Reply(text="One note.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url)
        headers = {**server.auth(user="olga", role="owner"), "traceparent": TRACEPARENT}
        frames = await chat_with(
            server, {"message": "look at the notes", "agent": "scribe"}, headers
        )

    assert status(frames) == "completed" and notes.traceparents == [None]


async def chat_with(server: Server, body: dict[str, Any], headers: dict[str, str]) -> list[Frame]:
    return await stream_turn(server.client, body, headers)
