"""The MCP connection pool against a real MCP server (tests/tools/mcp_server.py), over
stdio and streamable HTTP: listing and mapping, calls through the tool runner, typed
errors, a server killed mid-call, backoff and reconnection, list-changed refreshes."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from mcp_types import Tool, ToolAnnotations
from sqlalchemy import select
from structlog.testing import capture_logs

from conftest import migrate
from egress import EgressPolicy
from mcp_testing import (
    SECRET_HEADER,
    STDIO_PROGRAMS,
    HttpMcpServer,
    alive,
    calls,
    kill_server,
    read_state,
    stdio_command,
    wait_for,
)
from store import McpToolsetRecord, McpToolsetSpec, Store
from store._models import AuditLogRow
from tools import McpPool, ToolCallRequest, ToolContext, ToolRegistry, ToolRunner
from tools._mcp_tools import bosun_action, category_of, summary_of
from tools._runner import MAX_RESULT_CHARS

FAST_BACKOFF = (0.3, 1.0)


@dataclass
class Rig:
    store: Store
    pool: McpPool
    state: Path
    session_id: str
    ctx: ToolContext

    async def stdio(self, name: str = "tickets", **fields: Any) -> McpToolsetRecord:
        return await self.store.mcp_toolsets.put(
            "acme",
            name,
            McpToolsetSpec(
                transport="stdio",
                command=stdio_command(self.state),
                env={"TICKETS_TOKEN": "env-secret-value"},
                **fields,
            ),
        )

    async def runner(self, *toolsets: str) -> ToolRunner:
        return ToolRunner(ToolRegistry(await self.pool.tools("acme", toolsets)), self.store)

    async def run(
        self, runner: ToolRunner, name: str, args: dict[str, Any], tool_use_id: str = "tu_1"
    ) -> Any:
        call = ToolCallRequest(
            tool_use_id=tool_use_id, name=name, input=args,
            session_id=self.session_id, turn_id="turn_1",
        )  # fmt: skip
        return await runner.run(call, self.ctx)


@pytest.fixture
async def rig(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    await migrate(sqlite_url)
    store = Store(sqlite_url, secrets_key=Fernet.generate_key().decode())
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    pool = McpPool(
        store,
        stdio_commands=STDIO_PROGRAMS,
        backoff_s=FAST_BACKOFF,
        egress=EgressPolicy(allow_loopback=True),
    )
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="owner")
    try:
        yield Rig(store, pool, tmp_path / "state.json", session_id, ctx)
    finally:
        await pool.aclose()
        await store.close()


async def test_a_stdio_toolset_is_listed_mapped_and_called_through_the_runner(rig: Rig) -> None:
    await rig.stdio(tool_categories={"always_fails": "write"})
    runner = await rig.runner("tickets")
    tools = {t.name: t for t in runner.registry}
    made = await rig.run(runner, "tickets_create_ticket", {"title": "Printer on fire"})
    found = await rig.run(runner, "tickets.search_tickets", {"query": "printer"}, "tu_2")
    [status] = await rig.pool.status("acme")
    async with rig.store.db.read() as conn:
        audit = (await conn.execute(select(AuditLogRow.action, AuditLogRow.tool_use_id))).all()

    assert sorted(tools) == [
        "tickets.add_extras", "tickets.always_fails", "tickets.create_ticket",
        "tickets.delete_ticket", "tickets.search_tickets", "tickets.slow_echo", "tickets.storm",
    ]  # fmt: skip
    assert (tools["tickets.search_tickets"].category, tools["tickets.create_ticket"].category) == (
        "read", "write",
    )  # fmt: skip
    assert tools["tickets.delete_ticket"].needs_confirmation  # destructiveHint
    assert tools["tickets.always_fails"].category == "write"  # the owner's override
    assert tools["tickets.search_tickets"].summary == "Search tickets by words in their title."
    schema = tools["tickets.create_ticket"].input_schema()
    assert schema["required"] == ["title"] and "title" not in schema["properties"]["title"]
    assert tools["tickets.create_ticket"].describe("full") == (
        "tickets.create_ticket(title: str, priority?: int) [write]: Open a ticket."
    )
    assert made.ok and made.output == {"id": "T-1", "title": "Printer on fire", "priority": 3}
    assert found.ok and found.output == {"tickets": [made.output]}
    assert (status.name, status.state, status.skipped) == ("tickets", "connected", ["9lives"])
    assert {t.mcp_name for t in status.tools} >= {"slowEcho", "create_ticket"}
    assert audit == [("mcp.tickets.create_ticket", "tu_1")]  # the write, not the read
    assert read_state(rig.state)["pid"] > 0


async def test_bad_input_is_refused_at_the_gate_and_server_errors_are_typed(rig: Rig) -> None:
    await rig.stdio(timeout_s=0.5)
    runner = await rig.runner("tickets")
    invalid = await rig.run(runner, "tickets.create_ticket", {"title": 7, "priority": "high"})
    failed = await rig.run(runner, "tickets.always_fails", {}, "tu_2")
    slow = await rig.run(runner, "tickets.slow_echo", {"text": "hi", "seconds": 3}, "tu_3")
    after = await rig.run(runner, "tickets.search_tickets", {"query": "x"}, "tu_4")
    big = await rig.run(runner, "tickets.slow_echo", {"text": "x" * 20_000, "seconds": 0}, "tu_5")

    assert invalid.error.code == "invalid_input"
    assert "title: must satisfy type=" in invalid.error.message and "7" not in invalid.error.message
    assert calls(rig.state, "create_ticket") == []  # refused before anything ran
    assert failed.error.code == "mcp_tool_error"
    assert "the ticket system is in maintenance" in failed.error.message
    assert slow.error.code == "mcp_timeout" and "0.5 s" in slow.error.message
    assert after.ok  # a timeout leaves the connection up
    assert big.ok and len(big.as_result_text()) == MAX_RESULT_CHARS  # fitted like any result


async def test_a_server_killed_mid_call_is_a_typed_error_then_down_then_back(rig: Rig) -> None:
    await rig.stdio()
    runner = await rig.runner("tickets")
    first_pid = read_state(rig.state)["pid"]

    async def kill_when_called() -> None:
        await wait_for(lambda: calls(rig.state, "slowEcho"))
        kill_server(rig.state)

    killer = asyncio.create_task(kill_when_called())
    with capture_logs() as logs:
        outcome = await rig.run(runner, "tickets.slow_echo", {"text": "hi", "seconds": 30})
    await killer
    [down] = await rig.pool.status("acme", ["tickets"])
    withheld = await rig.pool.tools("acme", ["tickets"])  # in backoff: no try, no tools
    await wait_for(lambda: not alive(first_pid))
    await asyncio.sleep(FAST_BACKOFF[0] + 0.1)
    runner = await rig.runner("tickets")
    again = await rig.run(runner, "tickets.search_tickets", {"query": "x"}, "tu_2")

    assert outcome.error.code == "mcp_unavailable"
    assert (down.state, down.tools) == ("down", []) and down.error and down.since
    assert withheld == []
    assert again.ok and read_state(rig.state)["pid"] != first_pid  # a new server process
    assert any(log["event"] == "mcp.down" for log in logs)
    assert "env-secret-value" not in repr(logs)


async def test_a_failing_server_is_retried_only_after_its_backoff(rig: Rig, tmp_path: Path) -> None:
    command = [sys.executable, str(tmp_path / "no-such-script.py")]  # exits at once
    await rig.store.mcp_toolsets.put(
        "acme", "broken", McpToolsetSpec(transport="stdio", command=command)
    )
    assert await rig.pool.tools("acme", ["broken"]) == []
    [first] = await rig.pool.status("acme", ["broken"])
    assert await rig.pool.tools("acme", ["broken"]) == []  # within the backoff: not tried
    [same] = await rig.pool.status("acme", ["broken"])
    await asyncio.sleep(FAST_BACKOFF[0] + 0.1)
    await rig.pool.tools("acme", ["broken"])
    [retried] = await rig.pool.status("acme", ["broken"])

    assert first.state == "down" and first.error
    assert same.since == first.since
    assert retried.state == "down"


async def test_an_http_toolset_sends_its_secret_header(rig: Rig, tmp_path: Path) -> None:
    secret = "sk-mcp-" + uuid.uuid4().hex
    async with HttpMcpServer(rig.state, secret) as server:
        with capture_logs() as logs:
            await rig.store.mcp_toolsets.put(
                "acme",
                "remote",
                McpToolsetSpec(transport="http", url=server.url, headers={SECRET_HEADER: secret}),
            )
            await rig.store.mcp_toolsets.put(
                "acme",
                "nokey",
                McpToolsetSpec(
                    transport="http", url=server.url, headers={SECRET_HEADER: secret + "-wrong"}
                ),
            )
            runner = await rig.runner("remote", "nokey")
            made = await rig.run(runner, "remote.create_ticket", {"title": "Over HTTP"})
            statuses = await rig.pool.status("acme")

    assert made.ok and made.output["title"] == "Over HTTP"
    assert {t.router for t in runner.registry} == {"remote"}
    nokey = next(s for s in statuses if s.name == "nokey")
    assert nokey.state == "down" and nokey.error
    assert secret not in repr(statuses) and secret not in repr(logs)


async def test_a_list_changed_notice_refreshes_the_tools(rig: Rig) -> None:
    await rig.stdio()
    runner = await rig.runner("tickets")
    await rig.run(runner, "tickets.add_extras", {})

    async def listed() -> set[str]:
        [status] = await rig.pool.status("acme", ["tickets"])
        return {t.name for t in status.tools}

    for _ in range(100):
        if "tickets.count_tickets" in await listed():
            break
        await asyncio.sleep(0.05)
    tools = {t.name: t for t in await rig.pool.tools("acme", ["tickets"])}

    assert tools["tickets.count_tickets"].category == "read"


async def test_settings_disabled_stdio_and_new_versions(rig: Rig) -> None:
    refusing = McpPool(rig.store)  # no stdio_commands: stdio is off
    await rig.stdio()
    try:
        assert await refusing.tools("acme", ["tickets"]) == []
        [refused] = await refusing.status("acme", ["tickets"])
    finally:
        await refusing.aclose()
    assert refused.state == "down" and "stdio" in (refused.error or "")
    assert not rig.state.exists()  # never started

    assert await rig.pool.tools("acme", ["tickets"])
    first_pid = read_state(rig.state)["pid"]
    await rig.stdio(enabled=False)
    assert await rig.pool.tools("acme", ["tickets"]) == []
    [disabled] = await rig.pool.status("acme", ["tickets"])
    await wait_for(lambda: not alive(first_pid))  # its server was stopped
    await rig.stdio(default_category="destructive")  # a new version: a new connection
    tools = await rig.pool.tools("acme", ["tickets", "unknown"])
    [never] = await rig.pool.status("acme", ["elsewhere"])
    second_pid = read_state(rig.state)["pid"]
    await rig.pool.aclose()

    assert disabled.state == "disabled"
    assert {t.category for t in tools} == {"destructive"}
    assert second_pid != first_pid
    assert never.state == "not_connected"
    await wait_for(lambda: not alive(second_pid))  # aclose stops stdio servers


def _tool(name: str, **hints: Any) -> Tool:
    annotations = ToolAnnotations(**hints) if hints else None
    return Tool(name=name, input_schema={"type": "object"}, annotations=annotations)


def test_names_categories_and_summaries_are_mapped_by_bosun_rules() -> None:
    names = ["searchTickets", "search-tickets", "HTTPServer.get", "list tickets", "snake_ok"]
    record = McpToolsetRecord(
        id="mcp_1", org_id="acme", name="t", transport="stdio", url=None, command=["x"],
        header_names=[], env_names=[], default_category=None,
        tool_categories={"owned": "read"}, timeout_s=30, enabled=True, version=1,
        created_at=None, updated_at=None,  # type: ignore[arg-type]
    )  # fmt: skip
    both = _tool("both", read_only_hint=True, destructive_hint=True)

    assert [bosun_action(n) for n in names] == [
        "search_tickets", "search_tickets", "http_server_get", "list_tickets", "snake_ok",
    ]  # fmt: skip
    assert category_of(_tool("plain"), record) == "write"  # not marked read-only: a write
    assert category_of(_tool("ro", read_only_hint=True), record) == "read"
    assert category_of(_tool("d", destructive_hint=True), record) == "destructive"
    assert category_of(both, record) == "destructive"  # contradictory hints: the safer
    assert category_of(_tool("owned", destructive_hint=True), record) == "read"
    titled = Tool(name="x", title="Find things", input_schema={"type": "object"})
    assert summary_of(titled) == "Find things" and summary_of(_tool("bare")) == "bare"
    assert len(summary_of(Tool(name="x", description="y" * 500, input_schema={}))) == 200


async def test_an_http_server_killed_mid_call_then_restarted(rig: Rig) -> None:
    secret = "sk-mcp-" + uuid.uuid4().hex
    server = await HttpMcpServer(rig.state, secret).start()
    restarted = HttpMcpServer(rig.state, secret, port=server.port)
    try:
        await rig.store.mcp_toolsets.put(
            "acme",
            "remote",
            McpToolsetSpec(transport="http", url=server.url, headers={SECRET_HEADER: secret}),
        )
        runner = await rig.runner("remote")

        async def kill_when_called() -> None:
            await wait_for(lambda: calls(rig.state, "slowEcho"))
            await server.kill()

        killer = asyncio.create_task(kill_when_called())
        outcome = await rig.run(runner, "remote.slow_echo", {"text": "hi", "seconds": 30})
        await killer
        [down] = await rig.pool.status("acme", ["remote"])
        await restarted.start()
        await asyncio.sleep(FAST_BACKOFF[0] + 0.1)
        again = await rig.run(
            await rig.runner("remote"), "remote.search_tickets", {"query": "x"}, "tu_2"
        )
    finally:
        await server.kill()
        await restarted.kill()

    assert outcome.error.code == "mcp_unavailable", outcome
    assert down.state == "down" and secret not in (down.error or "")
    assert again.ok
