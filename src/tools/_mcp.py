"""The worker's connections to its orgs' MCP servers: one per (org, toolset), opened on
first use, listed at connect time and again when the server says its tools changed.

A ``Client`` runs task groups that must be entered and left by one task, and a broken
transport cancels the task that entered it: so each connection has an owner task that
holds its ``Client`` open (``tools._mcp_link``, on an event loop of the pool's own, so
the SDK's work on a large listing never holds up the worker), and turns call tools from
their own tasks through it. A
connection that fails is down: its tools are withheld (a turn never waits on it) until a
retry, no sooner than a backoff of 1 s doubling to 60 s. Calls end in a result or a typed
``ToolError`` (``mcp_unavailable``, ``mcp_timeout``, ``mcp_error``, ``mcp_tool_error``),
never a crash. Secrets (header and environment values) never reach a log, an error or a
status: messages are redacted of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import anyio
import structlog

from egress import PUBLIC_ONLY, EgressPolicy, EgressRefused
from store import McpToolsetRecord, SecretsKeyError, Store, stdio_refusal, utcnow
from tools._mcp_loop import IoLoop, back_to
from tools._mcp_tools import MAX_TOOLS, Mapped, McpToolStatus, SkippedTool, map_tools
from tools._registry import ToolDef
from tools._runtime import ToolError

if TYPE_CHECKING:
    # The mcp SDK (about half a second to import) loads when a toolset first connects:
    # every `bosun serve` builds a pool, and most workers never connect one.
    from mcp import Client
    from mcp.client import Transport
    from mcp_types import CallToolResult

    from tools._mcp_link import Link, Listing

_log = structlog.get_logger("bosun.mcp")

State = Literal["connected", "down", "disabled", "not_connected"]
BACKOFF_S = (1.0, 60.0)
"""The first retry of a failed connection after 1 s, doubling to at most 60 s."""
LISTED_PER_TOOL = 2
"""A listing is read up to twice ``max_tools`` tools (room for skipped ones); the rest
are cut unread (``tools._mcp_listing``)."""
MAX_REASON_CHARS = 300
_UNAVAILABLE_HINT = "The tool's server is unreachable now; go on without it or try later"
_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


@dataclass(frozen=True, slots=True, kw_only=True)
class McpStatus:
    """What the pool knows of one toolset (``error``: why it is down, without secrets)."""

    name: str
    state: State
    error: str | None
    since: datetime | None
    tools: list[McpToolStatus]
    skipped: list[str]
    """The MCP names of the tools not offered (at most ``MAX_SKIPPED_SHOWN``)."""
    skipped_reasons: list[SkippedTool] = field(default_factory=list)
    """The same tools, each with why it was skipped."""
    skipped_count: int = 0
    """How many were skipped in all."""


_NOTHING = Mapped(tools=[], statuses=[], skipped=[])


@dataclass(kw_only=True, eq=False)
class _Entry:
    """What the pool knows of one toolset: the configuration it connected with, its state,
    its last listing, and when a failed connection may be tried again."""

    record: McpToolsetRecord
    state: State = "not_connected"
    error: str | None = None
    since: datetime | None = None
    mapped: Mapped = field(default_factory=lambda: Mapped(tools=[], statuses=[], skipped=[]))
    failures: int = 0
    retry_at: float = 0.0
    link: Link | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def status(self) -> McpStatus:
        mapped = self.mapped if self.state == "connected" else _NOTHING
        return McpStatus(
            name=self.record.name, state=self.state, error=self.error, since=self.since,
            tools=list(mapped.statuses), skipped=[s.mcp_name for s in mapped.skipped],
            skipped_reasons=list(mapped.skipped), skipped_count=mapped.skipped_count,
        )  # fmt: skip

    def set_state(self, state: State, error: str | None = None) -> None:
        if state != self.state or error != self.error:
            self.since = utcnow()
        self.state, self.error = state, error


class McpPool:
    """This worker's MCP connections, per (org, toolset). ``tools`` connects as needed;
    ``status`` never does. ``stdio_commands``: the programs stdio toolsets may run (none:
    stdio is off); ``max_tools``: tools offered per toolset; ``backoff_s``: the first retry
    delay and the longest."""

    def __init__(
        self,
        store: Store,
        *,
        stdio_commands: Iterable[str] = (),
        max_tools: int = MAX_TOOLS,
        connect_timeout_s: float = 10.0,
        backoff_s: tuple[float, float] = BACKOFF_S,
        egress: EgressPolicy = PUBLIC_ONLY,
    ) -> None:
        self._store = store
        self._egress = egress
        self._stdio_commands = frozenset(stdio_commands)
        self._max_tools = max_tools
        self._connect_timeout_s = connect_timeout_s
        self._backoff_s = backoff_s
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._io = IoLoop()

    async def tools(self, org_id: str, toolsets: Iterable[str]) -> list[ToolDef]:
        """The tools of the named toolsets, connecting where needed; a toolset that is
        down, disabled or unknown contributes none."""
        wanted = list(dict.fromkeys(toolsets))
        if not wanted:
            return []
        records = {r.name: r for r in await self._store.mcp_toolsets.list_for_org(org_id)}
        for name in wanted:
            if name not in records:
                self.forget(org_id, name)
        entries = await asyncio.gather(*(self._ready(records[n]) for n in wanted if n in records))
        return [
            tool for entry in entries if entry.state == "connected" for tool in entry.mapped.tools
        ]

    async def status(self, org_id: str, names: Iterable[str] | None = None) -> list[McpStatus]:
        """What the pool knows, without connecting: ``not_connected`` if never tried."""
        if names is None:
            return [e.status() for (org, _), e in sorted(self._entries.items()) if org == org_id]
        statuses = []
        for name in names:
            entry = self._entries.get((org_id, name))
            statuses.append(entry.status() if entry else _never_tried(name))
        return statuses

    async def refresh(self, org_id: str, name: str) -> McpStatus:
        """Reconnect now, whatever the backoff, and list the tools afresh."""
        record = await self._store.mcp_toolsets.get(org_id, name)
        if record is None:
            self.forget(org_id, name)
            return _never_tried(name)
        self.forget(org_id, name)
        return (await self._ready(record)).status()

    def forget(self, org_id: str, name: str) -> None:
        """Drop the toolset's connection (its configuration was replaced or deleted)."""
        entry = self._entries.pop((org_id, name), None)
        if entry is not None:
            self._drop_link(entry)

    async def aclose(self) -> None:
        """Close every connection (stdio servers stop): on shutdown."""
        for key in list(self._entries):
            self.forget(*key)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
        await self._io.aclose()

    # connecting

    async def _ready(self, record: McpToolsetRecord) -> _Entry:
        """The toolset's entry for ``record``, connected unless it is disabled, refused,
        or failed recently (then it waits out its backoff without a try)."""
        key = (record.org_id, record.name)
        entry = self._entries.get(key)
        if entry is None or (entry.record.id, entry.record.version) != (record.id, record.version):
            self.forget(*key)
            entry = self._entries[key] = _Entry(record=record)
        if not record.enabled:
            self._drop_link(entry)
            entry.set_state("disabled")
            return entry
        async with entry.lock:
            if entry.state != "connected" and time.monotonic() >= entry.retry_at:
                await self._connect(entry)
        return entry

    async def _connect(self, entry: _Entry) -> None:
        record = entry.record
        if record.transport == "stdio" and (
            refusal := stdio_refusal(record.command, self._stdio_commands)
        ):
            entry.retry_at = math.inf  # until the operator's setting changes (a restart)
            entry.set_state("down", refusal[:MAX_REASON_CHARS])
            return
        try:
            headers, env = await self._store.mcp_toolsets.secrets(record)
        except SecretsKeyError as exc:
            self._failed(entry, str(exc))
            return
        from tools._mcp_link import Link, describe  # the SDK, on the first connection

        redact = _redactor([*headers.values(), *env.values()])
        here = asyncio.get_running_loop()  # the link calls back from the I/O loop
        link = Link(
            _target(record, headers, env, redact, self._egress),
            io=self._io,
            on_tools=lambda tools: back_to(here)(self._listed(entry, link, tools)),
            on_lost=lambda reason: _soon(here, self._lost, entry, link, reason),
            redact=redact,
            list_timeout_s=self._connect_timeout_s,
            list_limit=LISTED_PER_TOOL * self._max_tools,
        )
        try:
            listed = await link.open(self._connect_timeout_s)
        except Exception as exc:
            self._failed(entry, redact(str(exc) or describe(exc)))
            return
        if self._entries.get((record.org_id, record.name)) is not entry:
            await link.close()  # forgotten while it connected
            return
        entry.link, entry.failures = link, 0
        await self._listed(entry, link, listed)
        entry.set_state("connected")
        _log.info("mcp.connected", org_id=record.org_id, toolset=record.name,
                  tools=len(entry.mapped.tools), skipped=entry.mapped.skipped_count)  # fmt: skip

    async def _listed(self, entry: _Entry, link: Link, listed: Listing) -> None:
        """Map a listing in a thread: a server listing thousands of tools must not hold
        up the event loop (every other request of this worker)."""
        if entry.link is not link:
            return  # a dropped connection's late listing
        record = entry.record
        key = (record.org_id, record.name)
        mapped = await asyncio.to_thread(
            map_tools, record, listed.tools, partial(self._call, key, record),
            max_tools=self._max_tools, cut=listed.cut,
        )  # fmt: skip
        if entry.link is link:
            entry.mapped = mapped

    def _lost(self, entry: _Entry, link: Link, reason: str) -> None:
        """The connection ``link`` ended on its own (or a call found it broken)."""
        if entry.link is link:
            self._failed(entry, reason)

    def _failed(self, entry: _Entry, reason: str) -> None:
        self._drop_link(entry)
        entry.failures += 1
        first, longest = self._backoff_s
        delay = min(longest, first * 2 ** (entry.failures - 1))
        entry.retry_at = time.monotonic() + delay
        entry.set_state("down", reason[:MAX_REASON_CHARS])
        _log.warning("mcp.down", org_id=entry.record.org_id, toolset=entry.record.name,
                     error=entry.error, retry_in_s=delay)  # fmt: skip

    def _drop_link(self, entry: _Entry) -> None:
        # Its tools go now: the closing link holds the entry a while (its callbacks).
        link, entry.link, entry.mapped = entry.link, None, _NOTHING
        if link is not None:
            task = asyncio.get_running_loop().create_task(link.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    # calling

    async def _call(
        self, key: tuple[str, str], record: McpToolsetRecord, mcp_name: str, args: dict[str, Any]
    ) -> CallToolResult:
        """Call ``mcp_name`` on the toolset's current connection (reconnecting first if it
        was lost and its backoff has passed), under the toolset's timeout."""
        entry = self._entries.get(key)
        if entry is not None and entry.record.version == record.version:
            if entry.state != "connected":
                entry = await self._ready(entry.record)
            client = entry.link.client if entry.link else None
            if entry.state == "connected" and client is not None:
                return await self._call_on(entry, client, mcp_name, args)
        raise ToolError(
            "mcp_unavailable", f"The MCP server of {record.name} is not connected",
            hint=_UNAVAILABLE_HINT,
        )  # fmt: skip

    async def _call_on(
        self, entry: _Entry, client: Client, mcp_name: str, args: dict[str, Any]
    ) -> CallToolResult:
        import httpx2  # all loaded already, with the SDK, when the link connected
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        from tools._mcp_link import describe

        record, link = entry.record, entry.link
        timeout_s = record.timeout_s
        where = f"{record.name}.{mcp_name}"
        try:
            with anyio.fail_after(timeout_s):
                assert link is not None, "a connected entry has its link"
                return await link.call_tool(client, mcp_name, args, timeout_s)
        except TimeoutError:
            raise _timed_out(where, timeout_s) from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise _timed_out(where, timeout_s) from None
            if exc.code != CONNECTION_CLOSED:
                message = f"{where}: the MCP server answered with error {exc.code}"
                raise ToolError("mcp_error", message, hint="Tell the user it failed") from None
            reason = "the connection closed during a call"
        except (*_LOST, httpx2.TransportError, EgressRefused) as exc:
            reason = describe(exc)
        except Exception as exc:  # a result the SDK refused: the connection is fine
            message = f"{where}: the MCP client failed with {type(exc).__name__}"
            raise ToolError("mcp_error", message, hint="Tell the user it failed") from None
        if link is not None:
            self._lost(entry, link, reason)
        raise ToolError(
            "mcp_unavailable", f"The MCP server of {record.name} went away during the call",
            hint="It may or may not have taken effect; check before trying again",
        )  # fmt: skip


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    """Call ``fn(*args)`` on ``loop`` from another thread; nothing once it has closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _timed_out(where: str, timeout_s: float) -> ToolError:
    return ToolError(
        "mcp_timeout", f"{where} did not answer within {timeout_s:g} s",
        hint="It may still take effect: check before trying again",
    )  # fmt: skip


def _target(
    record: McpToolsetRecord,
    headers: dict[str, str],
    env: dict[str, str],
    redact: Callable[[str], str],
    egress: EgressPolicy,
) -> Transport:
    """Where the client connects: a spawned command, or a URL sent the headers."""
    if record.transport == "stdio":
        from tools._mcp_stdio import StderrLog, stdio_transport

        stderr = StderrLog(redact, org_id=record.org_id, toolset=record.name)
        return stdio_transport(record.command or [""], env, stderr)
    assert record.url is not None, f"http toolset {record.name} has no url"
    return _http(record.url, headers, egress)


@asynccontextmanager
async def _http(url: str, headers: dict[str, str], egress: EgressPolicy) -> AsyncIterator[Any]:
    """Streamable HTTP with the toolset's headers on every request, every connection
    through the egress guard (the SDK follows only same-origin redirects, checked too)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from egress import httpx2_client

    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: an SSE read waits long
    async with (
        httpx2_client(egress, headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _redactor(secrets: list[str]) -> Callable[[str], str]:
    """Blank every secret value (of a useful length) out of a message."""
    values = sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)

    def redact(text: str) -> str:
        for value in values:
            text = text.replace(value, "[redacted]")
        return text

    return redact


def _never_tried(name: str) -> McpStatus:
    return McpStatus(name=name, state="not_connected", error=None, since=None, tools=[], skipped=[])
