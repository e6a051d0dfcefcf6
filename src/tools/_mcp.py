"""The worker's connections to its orgs' MCP servers: one per (org, toolset), opened on
first use, listed at connect time and again when the server says its tools changed.

A ``Client`` runs task groups that must be entered and left by one task, and a broken
transport cancels the task that entered it: so each connection has an owner task that
holds its ``Client`` open, and turns call tools from their own tasks through it. A
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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Literal

import anyio
import httpx2
import structlog
from mcp import Client
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from store import McpToolsetRecord, SecretsKeyError, Store, stdio_refusal, utcnow
from tools._mcp_listing import Overflow, capped
from tools._mcp_loop import IoLoop, back_to
from tools._mcp_stdio import StderrLog, stdio_transport
from tools._mcp_tools import MAX_TOOLS, Mapped, McpToolStatus, SkippedTool, map_tools
from tools._registry import ToolDef
from tools._runtime import ToolError

_log = structlog.get_logger("bosun.mcp")

State = Literal["connected", "down", "disabled", "not_connected"]
BACKOFF_S = (1.0, 60.0)
"""The first retry of a failed connection after 1 s, doubling to at most 60 s."""
CLOSE_TIMEOUT_S = 10.0
MAX_PAGES = 20
LISTED_PER_TOOL = 2
"""A listing is read up to twice ``max_tools`` tools (room for skipped ones); the rest
are cut unread (``tools._mcp_listing``)."""
RELIST_DELAY_S = 0.2
"""How long a change notice waits for more before the tools are listed again."""
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """A server's tools as read, and how many more it listed past the cap (and the
    first of their names), left unread."""

    tools: list[Tool]
    cut: tuple[int, list[str]] = (0, [])


class _Link:
    """One open ``Client``, held by its owner task on the pool's I/O loop until closed or
    lost. ``on_tools`` gets each new listing; ``on_lost`` why the connection ended if it
    was not closed (both called on the I/O loop). ``open``, ``stop`` and ``close`` are
    called from the worker's loop."""

    def __init__(
        self,
        target: Transport,
        *,
        io: IoLoop,
        on_tools: Callable[[Listing], Awaitable[None]],
        on_lost: Callable[[str], None],
        redact: Callable[[str], str],
        list_timeout_s: float,
        list_limit: int,
    ) -> None:
        self._target = target
        self._io = io
        self._list_limit = list_limit
        self._overflow = Overflow()
        self._list_timeout_s = list_timeout_s
        self._on_tools = on_tools
        self._on_lost = on_lost
        self._redact = redact
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.client: Client | None = None

    async def open(self, timeout_s: float) -> Listing:
        """Connect and list the tools, or raise ``ConnectionError`` with the reason."""
        return await self._io.run(self._open(timeout_s))

    def stop(self) -> None:
        """Ask the owner task to close the connection (without waiting for it)."""
        self._closing = True
        self._io.call(self._inbox.put_nowait, "stop")

    async def close(self) -> None:
        self._closing = True
        await self._io.run(self._close())

    async def call_tool(
        self, client: Client, name: str, args: dict[str, Any], timeout_s: float
    ) -> CallToolResult:
        """Call a tool through ``client`` on the I/O loop (cancelled with the caller)."""
        return await self._io.run(client.call_tool(name, args, read_timeout_seconds=timeout_s))

    # on the I/O loop

    async def _open(self, timeout_s: float) -> Listing:
        ready: asyncio.Future[Listing] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(ready), name="mcp-connection")
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except TimeoutError:
            ready.cancel()  # the owner must not report an outcome nobody waits for
            await self._close()
            raise ConnectionError(f"no answer within {timeout_s:g} s") from None
        except BaseException:
            ready.cancel()
            await self._close()
            raise

    async def _close(self) -> None:
        self._closing = True
        self._inbox.put_nowait("stop")
        task = self._task
        if task is None or task.done():
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _own(self, ready: asyncio.Future[Listing]) -> None:
        try:
            async with Client(
                capped(self._target, self._list_limit, self._overflow),
                message_handler=self._on_message,
                cache=None,  # a listing is fetched afresh, when the server says it changed
                client_info=Implementation(name="bosun", version="1"),
            ) as client:
                listed = await self._list(client)
                self.client = client
                ready.set_result(listed)
                await self._serve(client)
        except (Exception, asyncio.CancelledError, BaseExceptionGroup) as exc:
            # The owner task ends here, whatever ended the connection.
            reason = self._redact(describe(exc))
            if not ready.done():
                ready.set_exception(ConnectionError(reason))
            elif not self._closing:
                self._on_lost(reason)
        finally:
            self.client = None

    async def _serve(self, client: Client) -> None:
        """Relist on every change notice until stopped or lost (raises)."""
        listener = None
        capability = client.server_capabilities.tools
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        if capability and capability.list_changed and modern:
            listener = asyncio.create_task(self._listen(client), name="mcp-listen")
        try:
            while (message := await self._next()) == "changed":
                with anyio.fail_after(self._list_timeout_s):  # a stuck relist is a lost server
                    listed = await self._list(client)
                _log.info("mcp.relisted", tools=len(listed.tools) + listed.cut[0])
                await self._on_tools(listed)
            if message != "stop":
                raise ConnectionError(message)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener

    async def _list(self, client: Client) -> Listing:
        """The tools as listed now, and what the cap cut from the listing unread."""
        self._overflow.clear()
        tools = await _list_tools(client)
        return Listing(tools=tools, cut=(self._overflow.count, list(self._overflow.names)))

    async def _next(self) -> str:
        """The next message, a ``changed`` one with every notice that comes within
        ``RELIST_DELAY_S`` behind it: a storm of them is one relist, and a ``stop`` or a
        lost stream among them wins."""
        message = await self._inbox.get()
        if message == "changed" and not self._closing:
            await asyncio.sleep(RELIST_DELAY_S)
        while message == "changed" and not self._inbox.empty():
            message = self._inbox.get_nowait()
        return message

    async def _listen(self, client: Client) -> None:
        """A 2026-07-28 server tells of changes on a listen stream; its loss is the
        connection's (the stream ends when the server goes away)."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._inbox.put_nowait("changed")
            self._inbox.put_nowait("the server ended its event stream")
        except ListenNotSupportedError:
            return
        except Exception as exc:
            self._inbox.put_nowait(describe(exc))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):  # servers before 2026-07-28
            self._inbox.put_nowait("changed")


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
    link: _Link | None = None
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
    ) -> None:
        self._store = store
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
        redact = _redactor([*headers.values(), *env.values()])
        here = asyncio.get_running_loop()  # the link calls back from the I/O loop
        link = _Link(
            _target(record, headers, env, redact),
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

    async def _listed(self, entry: _Entry, link: _Link, listed: Listing) -> None:
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

    def _lost(self, entry: _Entry, link: _Link, reason: str) -> None:
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
        except (*_LOST, httpx2.TransportError) as exc:
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
) -> Transport:
    """Where the client connects: a spawned command, or a URL sent the headers."""
    if record.transport == "stdio":
        stderr = StderrLog(redact, org_id=record.org_id, toolset=record.name)
        return stdio_transport(record.command or [""], env, stderr)
    assert record.url is not None, f"http toolset {record.name} has no url"
    return _http(record.url, headers)


@asynccontextmanager
async def _http(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """Streamable HTTP with the toolset's headers on every request."""
    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: an SSE read waits long
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


async def _list_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if (cursor := page.next_cursor) is None:
            break
    return tools


def describe(exc: BaseException) -> str:
    """A short reason for a failure: the first real error inside any exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, asyncio.CancelledError):
        return "the connection was lost"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
