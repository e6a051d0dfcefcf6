"""One connection to an MCP server (``Link``): an owner task on the pool's I/O loop that
holds the ``Client`` open, lists the tools at connect time and again when the server says
they changed (a storm of notices is one relist), and closes on ``stop``. This module
imports the mcp SDK: ``tools._mcp`` imports it only when a toolset connects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import anyio
import structlog
from mcp import Client
from mcp.client import Transport
from mcp.client.subscriptions import ListenNotSupportedError
from mcp_types import (
    CallToolResult,
    Implementation,
    RequestParamsMeta,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

import telemetry
from egress import EgressRefused
from tools._mcp_listing import Overflow, capped
from tools._mcp_loop import IoLoop

_log = structlog.get_logger("bosun.mcp")

CLOSE_TIMEOUT_S = 10.0
MAX_PAGES = 20
RELIST_DELAY_S = 0.2
"""How long a change notice waits for more before the tools are listed again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """A server's tools as read, and how many more it listed past the cap (and the
    first of their names), left unread."""

    tools: list[Tool]
    cut: tuple[int, list[str]] = (0, [])


class Link:
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
        """Call a tool through ``client`` on the I/O loop (cancelled with the caller),
        carrying the caller's span in its ``_meta`` when tracing is on."""
        call = client.call_tool(name, args, read_timeout_seconds=timeout_s, meta=_trace_meta())
        return await self._io.run(call)

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


def _trace_meta() -> RequestParamsMeta | None:
    """The current span's ``traceparent`` (and ``tracestate``) for a request's ``_meta``
    (SEP-414): read here, in the caller's task, because the SDK sends from the
    connection's task, whose context names no call. ``None`` when tracing is off, so the
    request is what it was without tracing."""
    if telemetry.STATE.tracer is None:
        return None
    carrier: dict[str, str] = {}
    telemetry.inject(carrier)
    return cast("RequestParamsMeta", carrier) if carrier else None  # an open map of str


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
    if isinstance(exc, EgressRefused):  # the class of address only, already worded
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
