"""The event loop the MCP clients live on: a thread of its own per pool.

The SDK parses and checks a server's tool listing synchronously (about a second for
10,000 tools); on the worker's loop that would hold up every request it serves. On this
loop it only shares the interpreter, so ``/healthz`` and turns go on meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_JOIN_TIMEOUT_S = 5.0


class IoLoop:
    """Runs coroutines on a loop in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mcp-io", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``await coro`` on the I/O loop; cancelling the caller cancels it there."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._running()))

    def call(self, fn: Callable[..., object], *args: object) -> None:
        """Call ``fn(*args)`` soon on the I/O loop (from any thread)."""
        self._running().call_soon_threadsafe(fn, *args)

    async def aclose(self) -> None:
        """Cancel what still runs there, then stop the loop and its thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        await self.run(_cancel_the_rest())
        self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, _JOIN_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()


async def _cancel_the_rest() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def back_to(loop: asyncio.AbstractEventLoop) -> Callable[[Coroutine[Any, Any, T]], Any]:
    """``await back_to(loop)(coro)`` from the I/O loop runs ``coro`` on ``loop``."""

    def run(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    return run
