"""A cap on tool listings, applied to the JSON-RPC responses before the SDK reads them.

The SDK checks and copies every listed tool with pydantic, in calls that hold the
interpreter (about a second for 10,000 tools, on any thread). So a listing is cut to a
bound as it arrives: the tools past it are counted and named, never parsed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.client import Transport
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCResponse

from tools._mcp_tools import MAX_SKIPPED_SHOWN


@dataclass(kw_only=True)
class Overflow:
    """The tools cut from the listings since ``clear``: how many, and the first names."""

    count: int = 0
    names: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.count, self.names = 0, []

    def cut(self, result: dict[str, Any], limit: int) -> None:
        tools = result.get("tools")
        if not isinstance(tools, list) or len(tools) <= limit:
            return
        rest = tools[limit:]
        result["tools"] = tools[:limit]
        self.count += len(rest)
        room = MAX_SKIPPED_SHOWN - len(self.names)
        self.names += [str(t.get("name")) if isinstance(t, dict) else "?" for t in rest[:room]]


@asynccontextmanager
async def capped(transport: Transport, limit: int, overflow: Overflow) -> AsyncIterator[Any]:
    """``transport``, its tool listings cut to ``limit`` tools each (into ``overflow``)."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def pump() -> None:
            async with send:
                async for item in read:
                    if isinstance(item, SessionMessage) and isinstance(
                        item.message, JSONRPCResponse
                    ):
                        overflow.cut(item.message.result, limit)
                    await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
