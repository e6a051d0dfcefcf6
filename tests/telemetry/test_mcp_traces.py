"""An MCP tool call carries the turn's trace to the MCP server in its request's
``params._meta.traceparent`` (SEP-414), over stdio and streamable HTTP alike: the
server's own tracing can continue the call's span. Bosun puts it there itself, whatever
the process's global propagator (which the MCP SDK's own injection uses); with tracing
off the request carries none.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from opentelemetry import propagate
from opentelemetry.propagators.composite import CompositePropagator

from conftest import Server, ServerFactory
from helpers import stream_turn
from mcp_testing import ALLOW_STDIO_ENV, SECRET_HEADER, HttpMcpServer, calls, stdio_command
from providers import ScriptedModel
from store import McpToolsetSpec
from telemetry_testing import Spans, tracing
from turn import TurnModels

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"
GOAL = "Search the printer tickets"
HELPDESK = {"handle": "helpdesk", "name": "Helpdesk", "tools": ["tickets.search_tickets"]}


@pytest.fixture(autouse=True)
def _stdio_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ALLOW_STDIO_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def spans() -> Iterator[Spans]:
    with tracing() as exported:
        yield exported


@pytest.fixture
def no_global_propagator() -> Iterator[None]:
    """The process's global propagator propagating nothing, as ``OTEL_PROPAGATORS=none``
    (or an embedder's own choice) leaves it."""
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([]))
    try:
        yield
    finally:
        propagate.set_global_textmap(before)


def models() -> TurnModels:
    """One step that searches the tickets once (the model plans and executes)."""
    step = {"id": "s1", "goal": GOAL, "tools": ["tickets.search_tickets"], "max_tool_calls": 2}
    plan = {"reasoning": "r", "strategy": "tool", "steps": [step]}
    search = {"id": "tu_search", "name": "tickets_search_tickets", "input": {"query": "printer"}}
    model = ScriptedModel([
        {"match": "User request:", "text": json.dumps(plan)},
        {"match": GOAL, "tool_calls": [search]},
        {"match": GOAL, "text": "No printer tickets."},
        {"match": "Write a short title", "text": "Printer"},
    ])  # fmt: skip
    return TurnModels(planner=model, executor=model)


@asynccontextmanager
async def tickets(server: Server, transport: str, state: Path) -> AsyncIterator[None]:
    """The org's ``tickets`` toolset, the test MCP server over ``transport``, granted to
    the ``helpdesk`` agent."""
    spec = McpToolsetSpec(transport="stdio", command=stdio_command(state))
    http = None
    if transport == "http":
        secret = "sk-mcp-" + uuid.uuid4().hex
        http = await HttpMcpServer(state, secret).start()
        spec = McpToolsetSpec(transport="http", url=http.url, headers={SECRET_HEADER: secret})
    try:
        await server.store.mcp_toolsets.put("acme", "tickets", spec)
        made = await server.client.post(
            "/v1/agents", json=HELPDESK, headers=server.auth(role="owner")
        )
        assert made.status_code == 201, made.text
        yield
    finally:
        if http is not None:
            await http.kill()


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only: what an MCP call carries does not depend on the database (CI time)."""
    return sqlite_url


async def searched_once(make_server: ServerFactory, transport: str, state: Path) -> dict[str, Any]:
    """A turn (under the caller's ``traceparent``) that searches the tickets once; the
    call as the server recorded it."""
    headers = {"traceparent": TRACEPARENT}
    body = {"message": "any printer tickets?", "agent": "helpdesk"}
    async with (
        make_server(models(), secrets_key=Fernet.generate_key().decode()) as server,
        tickets(server, transport, state),
    ):
        frames = await stream_turn(server.client, body, {**server.auth(role="owner"), **headers})
    assert frames[-1].data["status"] == "completed"
    [searched] = calls(state, "search_tickets")
    return searched


def assert_parent_is_the_call(traceparent: str, spans: Spans) -> None:
    """``traceparent`` names the turn's trace and its ``execute_tool`` span."""
    version, trace_id, parent_id, flags = traceparent.split("-")
    [root] = spans.named("invoke_agent helpdesk")
    tool_span = spans.one("execute_tool tickets.search_tickets")
    assert trace_id == f"{root.context.trace_id:032x}" == CALLER_TRACE  # the turn's trace
    assert parent_id == f"{tool_span.context.span_id:016x}"  # the server's parent is the call
    assert (version, flags) == ("00", "01")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_mcp_call_carries_its_span_in_the_requests_meta(
    make_server: ServerFactory, spans: Spans, transport: str, tmp_path: Path
) -> None:
    searched = await searched_once(make_server, transport, tmp_path / "state.json")
    assert_parent_is_the_call(searched["traceparent"], spans)


async def test_an_mcp_call_carries_its_span_whatever_the_global_propagator(
    make_server: ServerFactory, spans: Spans, no_global_propagator: None, tmp_path: Path
) -> None:
    # Like an OpenAPI call's header: Bosun sends the W3C pair itself, not through the
    # process's propagator (the one the MCP SDK's own injection uses).
    searched = await searched_once(make_server, "stdio", tmp_path / "state.json")
    assert_parent_is_the_call(searched["traceparent"], spans)


async def test_with_tracing_off_an_mcp_call_carries_no_traceparent(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    searched = await searched_once(make_server, "stdio", tmp_path / "state.json")
    assert searched == {"tool": "search_tickets", "args": {"query": "printer"}}
