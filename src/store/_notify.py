"""Cross-worker wake-ups: PostgreSQL ``LISTEN``/``NOTIFY``.

Every append on PostgreSQL notifies ``bosun_events`` with the session id, and queuing a
run notifies ``bosun_runs``, each delivered when its transaction commits; each worker
listens on both channels on one dedicated connection and wakes its local log readers and
its run dispatcher. Both also poll (``LogNotifier.poll_s``, ``RunDispatcher.poll_s``), so
a notification lost while the listener reconnects delays a stream or a run by at most
that long, and never loses one; a reconnect wakes the dispatcher at once as well.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg  # type: ignore[import-untyped]  # the driver SQLAlchemy already uses
import structlog

from store._appends import NOTIFY_CHANNEL as CHANNEL
from store._appends import LogNotifier
from store._runs import RUNS_CHANNEL, RunWakes

RECONNECT_S = 1.0
_log = structlog.get_logger("bosun.store")


class PgListener:
    """Listens for appends and queued runs of any worker; wakes this process's readers
    and its dispatcher (``runs``)."""

    def __init__(self, url: str, notifier: LogNotifier, runs: RunWakes | None = None) -> None:
        self._dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
        self._notifier = notifier
        self._runs = runs
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="log-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, session_id: str) -> None:
        self._notifier.notify(session_id)

    def _on_run(self, _conn: Any, _pid: int, _channel: str, _payload: str) -> None:
        if self._runs is not None:
            self._runs()

    @staticmethod
    async def _until_lost(conn: Any) -> None:
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await lost.wait()

    async def _listen(self) -> None:
        while True:
            conn: Any = None
            try:
                conn = await asyncpg.connect(self._dsn)
                await conn.add_listener(CHANNEL, self._on_notify)
                if self._runs is not None:
                    await conn.add_listener(RUNS_CHANNEL, self._on_run)
                    self._runs()  # what was queued while no one listened
                await self._until_lost(conn)
            except (OSError, asyncpg.PostgresError) as exc:
                _log.warning("store.listener_reconnect", error_type=type(exc).__name__)
            finally:
                if conn is not None and not conn.is_closed():
                    await conn.close()
            await asyncio.sleep(RECONNECT_S)
