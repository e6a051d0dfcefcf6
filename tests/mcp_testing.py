"""Running the tests' MCP server (tests/tools/mcp_server.py) and reading what it did."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from conftest import free_port

SERVER = Path(__file__).parent / "tools" / "mcp_server.py"
SECRET_HEADER = "X-Api-Key"
STDIO_PROGRAMS = [sys.executable]
"""What the tests allow stdio toolsets to run (``mcp.stdio_commands``): the test server's
interpreter."""
ALLOW_STDIO_ENV = {"BOSUN_MCP__STDIO_COMMANDS": json.dumps(STDIO_PROGRAMS)}


def stdio_command(state: Path) -> list[str]:
    """The command a stdio toolset runs: the test server keeping its state in ``state``."""
    return [sys.executable, str(SERVER), "--state", str(state)]


def read_state(state: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(state.read_text()) if state.exists() else {}
    return loaded


def calls(state: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The tool calls the server ran (of ``tool`` only, if given), oldest first; its
    listings are counted as ``tools/list`` calls, returned only when asked for by name."""
    made: list[dict[str, Any]] = read_state(state).get("calls", [])
    if tool is None:
        return [c for c in made if c["tool"] != "tools/list"]
    return [c for c in made if c["tool"] == tool]


def kill_server(state: Path) -> int:
    """Kill the server process that last started on ``state`` (SIGKILL); its pid."""
    pid = int(read_state(state)["pid"])
    os.kill(pid, signal.SIGKILL)
    return pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_for(check: Any, timeout_s: float = 10.0) -> None:
    """Poll ``check()`` until it is true, or fail."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


class HttpMcpServer:
    """The test server over streamable HTTP on 127.0.0.1, requiring ``X-Api-Key: secret``;
    ``more``: more of its arguments (``--many-tools N``)."""

    def __init__(
        self, state: Path, secret: str, port: int | None = None, more: tuple[str, ...] = ()
    ) -> None:
        self.state = state
        self.secret = secret
        self.more = more
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> HttpMcpServer:
        command = [
            *stdio_command(self.state), "--http", str(self.port),
            "--require-header", f"{SECRET_HEADER}={self.secret}", *self.more,
        ]  # fmt: skip
        self._process = await asyncio.create_subprocess_exec(*command)
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                assert self._process.returncode is None, "the MCP test server exited"
                assert time.monotonic() < deadline, "the MCP test server did not start"
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return self

    async def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()

    async def __aenter__(self) -> HttpMcpServer:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.kill()
