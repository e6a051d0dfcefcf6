"""stdio MCP servers are safe by default: only programs on the operator's list run, on the
server's own PATH, without the server's environment, their stderr logged redacted."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from structlog.testing import capture_logs

from conftest import migrate
from mcp_testing import STDIO_PROGRAMS, stdio_command, wait_for
from store import McpToolsetSpec, Store
from tools import McpPool, ToolContext

TOKEN = "env-secret-7f3a-value"
SERVER_SECRET = "server-jwt-secret-canary-0123456789"


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[Store]:
    await migrate(sqlite_url)
    made = Store(sqlite_url, secrets_key=Fernet.generate_key().decode())
    try:
        yield made
    finally:
        await made.close()


async def _put(store: Store, command: list[str], **env: str) -> None:
    spec = McpToolsetSpec(transport="stdio", command=command, env={"TICKETS_TOKEN": TOKEN, **env})
    await store.mcp_toolsets.put("acme", "tickets", spec)


async def _call(pool: McpPool, store: Store, name: str, args: dict[str, Any]) -> Any:
    """Call a read-only MCP tool straight through its handler (no turn, no record)."""
    [tool] = [t for t in await pool.tools("acme", ["tickets"]) if t.name == name]
    assert tool.handler is not None and tool.category == "read"
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="owner")
    return await tool.handler(tool.input_model.model_validate(args), ctx)


async def test_a_stored_toolset_whose_program_is_not_allowed_is_never_started(
    store: Store, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    await _put(store, stdio_command(state))
    for allowed in ([], ["/usr/bin/other-server"]):
        pool = McpPool(store, stdio_commands=allowed)
        try:
            assert await pool.tools("acme", ["tickets"]) == []
            [status] = await pool.status("acme", ["tickets"])
        finally:
            await pool.aclose()
        assert status.state == "down" and "mcp.stdio_commands" in (status.error or "")
    assert not state.exists()  # the program never ran


async def test_the_server_environment_never_reaches_a_stdio_server(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOSUN_JWT_SECRET", SERVER_SECRET)
    monkeypatch.setenv("MCP_SERVER_CANARY", SERVER_SECRET)
    monkeypatch.setenv("LANG", "C.UTF-8")
    await _put(store, stdio_command(tmp_path / "s.json"), MCP_TEST_REPORT_ENV="1",
               MCP_TEST_CANARY="toolset-value")  # fmt: skip
    pool = McpPool(store, stdio_commands=STDIO_PROGRAMS)
    try:
        reported = await _call(pool, store, "tickets.report_env", {})
    finally:
        await pool.aclose()

    names = set(reported["names"])
    assert "BOSUN_JWT_SECRET" not in names and "MCP_SERVER_CANARY" not in names
    assert SERVER_SECRET not in json.dumps(reported)
    assert reported["canary"] == "toolset-value"  # the toolset's own env arrives
    harmless = {"PATH", "HOME", "LANG", "LOGNAME", "SHELL", "TERM", "USER"}
    toolset = {"TICKETS_TOKEN", "MCP_TEST_REPORT_ENV", "MCP_TEST_CANARY"}
    assert names - toolset <= harmless | {"LC_CTYPE"}  # LC_CTYPE: Python's own locale coercion


async def test_an_allowed_name_runs_from_the_servers_path_not_the_toolsets(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, decoy = tmp_path / "real", tmp_path / "decoy"
    for where, marker in ((real, "real"), (decoy, "decoy")):
        where.mkdir()
        program = where / "tickets-mcp"
        state = tmp_path / f"{marker}.json"
        program.write_text(f"#!/bin/sh\nexec {sys.executable} {stdio_command(state)[1]} "
                           f"--state {state}\n")  # fmt: skip
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{real}{os.pathsep}{os.environ['PATH']}")
    await _put(store, ["tickets-mcp"], PATH=str(decoy))
    pool = McpPool(store, stdio_commands=["tickets-mcp"])
    try:
        tools = await pool.tools("acme", ["tickets"])
    finally:
        await pool.aclose()

    assert tools, "the allowed program did not start"
    assert (tmp_path / "real.json").exists() and not (tmp_path / "decoy.json").exists()


async def test_a_stdio_servers_stderr_is_logged_redacted(
    store: Store, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    await _put(store, stdio_command(tmp_path / "s.json"), MCP_TEST_STDERR="1")
    pool = McpPool(store, stdio_commands=STDIO_PROGRAMS)
    with capture_logs() as logs:
        try:
            assert await pool.tools("acme", ["tickets"])
            await wait_for(lambda: any(log["event"] == "mcp.stderr" for log in logs))
        finally:
            await pool.aclose()
    lines = [log for log in logs if log["event"] == "mcp.stderr"]

    assert any("token=[redacted]" in log["line"] for log in lines), lines
    assert all(log["toolset"] == "tickets" and log["org_id"] == "acme" for log in lines)
    assert TOKEN not in json.dumps(logs, default=str)
    out, err = capfd.readouterr()
    assert TOKEN not in out + err  # nothing raw on the worker's own stderr
