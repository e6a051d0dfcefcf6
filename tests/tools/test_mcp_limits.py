"""A large or noisy MCP server cannot hold up a worker: at most ``max_tools`` tools per
toolset (the rest skipped, with why, and no model built for them), mapping off the event
loop, a storm of change notices relisted once, and a replaced listing's tools freed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from mcp_types import Tool
from structlog.testing import capture_logs

from conftest import migrate
from mcp_testing import STDIO_PROGRAMS, calls, stdio_command, wait_for
from store import McpToolsetRecord, McpToolsetSpec, Store, utcnow
from tools import McpPool, ToolContext, _mcp_tools
from tools._mcp_tools import MAX_SKIPPED_SHOWN, SkippedTool, map_tools

real_tool_def = _mcp_tools._tool_def

OWN_TOOLS = 8
"""The test server's own tools (``9lives`` among them: an invalid name)."""


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[Store]:
    await migrate(sqlite_url)
    made = Store(sqlite_url, secrets_key=Fernet.generate_key().decode())
    try:
        yield made
    finally:
        await made.close()


async def _put(store: Store, state: Path) -> None:
    spec = McpToolsetSpec(transport="stdio", command=stdio_command(state))
    await store.mcp_toolsets.put("acme", "tickets", spec)


def _record() -> McpToolsetRecord:
    return McpToolsetRecord(
        id="mcp_1", org_id="acme", name="big", transport="http", url="http://127.0.0.1:9/",
        command=None, header_names=[], env_names=[], default_category=None,
        tool_categories={}, timeout_s=30.0, enabled=True, version=1,
        created_at=utcnow(), updated_at=utcnow(),
    )  # fmt: skip


async def _never_called(name: str, args: object) -> object:
    raise AssertionError("mapping calls no tool")


def test_ten_thousand_tools_map_quickly_capped_with_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    listed = [Tool(name=f"tool_{i}", input_schema=schema) for i in range(10_000)]
    listed[1:1] = [Tool(name="tool_0", input_schema=schema), Tool(name="9x", input_schema=schema)]
    listed.insert(3, Tool(name="bad_schema", input_schema={"type": "array"}))
    built: list[str] = []  # the costly part is a tool's model: only those offered get one
    monkeypatch.setattr(_mcp_tools, "_tool_def", lambda *a: built.append(a[2]) or real_tool_def(*a))

    mapped = map_tools(_record(), listed, _never_called, max_tools=500)

    assert len(built) == 501  # the 500 offered and the one whose schema is refused
    assert [t.name for t in mapped.tools[:2]] == ["big.tool_0", "big.tool_1"]
    assert len(mapped.tools) == len(mapped.statuses) == 500
    assert mapped.skipped[:4] == [
        SkippedTool("tool_0", "duplicate_name"),
        SkippedTool("9x", "invalid_name"),
        SkippedTool("bad_schema", "invalid_schema"),
        SkippedTool("tool_500", "too_many_tools"),
    ]
    assert len(mapped.skipped) == MAX_SKIPPED_SHOWN
    assert mapped.skipped_count == 10_003 - 500


async def test_a_toolset_offers_at_most_max_tools_and_says_why_the_rest_are_skipped(
    store: Store, tmp_path: Path
) -> None:
    await _put(store, tmp_path / "s.json")
    pool = McpPool(store, stdio_commands=STDIO_PROGRAMS, max_tools=3)
    try:
        tools = await pool.tools("acme", ["tickets"])
        [status] = await pool.status("acme", ["tickets"])
    finally:
        await pool.aclose()

    assert len(tools) == len(status.tools) == 3
    reasons = {s.mcp_name: s.reason for s in status.skipped_reasons}
    assert reasons["9lives"] == "invalid_name"
    assert list(reasons.values()).count("too_many_tools") == OWN_TOOLS - 1 - 3
    assert status.skipped == [s.mcp_name for s in status.skipped_reasons]
    assert status.skipped_count == OWN_TOOLS - 3


async def test_a_storm_of_change_notices_is_relisted_a_few_times(
    store: Store, tmp_path: Path
) -> None:
    state = tmp_path / "s.json"
    await _put(store, state)
    pool = McpPool(store, stdio_commands=STDIO_PROGRAMS)
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="owner")
    try:
        [storm] = [t for t in await pool.tools("acme", ["tickets"]) if t.name == "tickets.storm"]
        assert storm.handler is not None
        with capture_logs() as logs:
            before = len(calls(state, "tools/list"))
            await storm.handler(storm.input_model.model_validate({"count": 100}), ctx)
            await wait_for(lambda: len(calls(state, "tools/list")) > before)
            await asyncio.sleep(1.0)  # what else the storm would cause
        [status] = await pool.status("acme", ["tickets"])
        relisted = len(calls(state, "tools/list")) - before
    finally:
        await pool.aclose()
    relists = [log for log in logs if log["event"] == "mcp.relisted"]

    assert 1 <= relisted <= 3, relisted  # one per notice (100 of each kind) without coalescing
    assert len(relists) == relisted
    assert status.state == "connected" and len(status.tools) == OWN_TOOLS - 1


async def test_a_refreshed_or_deleted_toolsets_tools_are_freed(
    store: Store, tmp_path: Path
) -> None:
    await _put(store, tmp_path / "s.json")
    pool = McpPool(store, stdio_commands=STDIO_PROGRAMS)
    try:
        tools = await pool.tools("acme", ["tickets"])
        first = [weakref.ref(t) for t in tools] + [weakref.ref(t.input_model) for t in tools]
        del tools
        await pool.refresh("acme", "tickets")
        second = [weakref.ref(t) for t in await pool.tools("acme", ["tickets"])]
        await asyncio.sleep(0)
        gc.collect()
        after_refresh = [ref for ref in first if ref() is not None]
        pool.forget("acme", "tickets")  # as DELETE does
        await asyncio.sleep(0)
        gc.collect()
        after_delete = [ref for ref in second if ref() is not None]
    finally:
        await pool.aclose()

    assert after_refresh == [] and after_delete == []
