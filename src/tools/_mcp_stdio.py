"""Spawning a stdio MCP server: only a program the operator allowed, resolved on the
server's own ``PATH``, with an environment of its own (never the server's: no
``BOSUN_JWT_SECRET``, no database URL), and its stderr logged line by line, redacted
of the toolset's secrets and bounded, instead of written raw to the worker's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client

_log = structlog.get_logger("bosun.mcp")

INHERITED_ENV = ("PATH", "HOME", "LANG")
"""What a stdio server gets of the server's environment, under the toolset's own ``env``.
(The SDK adds its fixed list of harmless names: ``LOGNAME``, ``SHELL``, ``TERM``, ``USER``.)"""
MAX_STDERR_LINE = 500
MAX_STDERR_LINES = 200
"""Lines of a server's stderr logged per connection; later ones are only counted."""
_CHUNK = 65_536


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The stdio server's environment: a few harmless names of ours, then its own."""
    inherited = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    return inherited | env


def resolve_program(program: str) -> str:
    """The program's path, a bare name looked up on the *server's* ``PATH`` (a toolset's
    own ``PATH`` must not choose which file an allowed name runs); ``FileNotFoundError``."""
    if os.sep in program:
        return program
    found = shutil.which(program)
    if found is None:
        raise FileNotFoundError(f"the program {program!r} is not on this server's PATH")
    return found


class StderrLog:
    """A stdio server's stderr as ``mcp.stderr`` log lines: redacted, cut to
    ``MAX_STDERR_LINE`` characters, at most ``MAX_STDERR_LINES`` per connection."""

    def __init__(self, redact: Callable[[str], str], **context: str) -> None:
        self._redact = redact
        self._context = context
        self.logged = 0
        self.dropped = 0

    def line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip()
        if not text:
            return
        if self.logged >= MAX_STDERR_LINES:
            self.dropped += 1
            return
        self.logged += 1
        _log.info("mcp.stderr", **self._context, line=self._redact(text)[:MAX_STDERR_LINE])

    def close(self) -> None:
        if self.dropped:
            _log.info("mcp.stderr_dropped", **self._context, lines=self.dropped)


async def _pump(pipe: Any, sink: StderrLog) -> None:
    """Read the pipe to its end (so the server never blocks on a full pipe), line by line;
    a line longer than a chunk is logged in pieces."""
    reader = asyncio.StreamReader(limit=_CHUNK)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), pipe
    )
    try:
        pending = b""
        while chunk := await reader.read(_CHUNK):
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) >= _CHUNK:
                lines, pending = [*lines, pending], b""
            for line in lines:
                sink.line(line)
        sink.line(pending)
    finally:
        transport.close()  # closes the pipe
        sink.close()


@asynccontextmanager
async def stdio_transport(
    command: list[str], env: dict[str, str], stderr: StderrLog
) -> AsyncIterator[Any]:
    """The SDK's stdio transport for ``command``, its stderr through ``stderr`` (the SDK
    would pass the worker's own stderr to the child)."""
    params = StdioServerParameters(
        command=resolve_program(command[0]), args=command[1:], env=child_env(env)
    )
    read_fd, write_fd = os.pipe()
    pump = asyncio.create_task(_pump(os.fdopen(read_fd, "rb", buffering=0), stderr))
    try:
        with os.fdopen(write_fd, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                errlog.close()  # the child has its copy: the pipe ends when it exits
                yield streams
    finally:
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(pump), 2.0)
        if not pump.done():
            pump.cancel()
