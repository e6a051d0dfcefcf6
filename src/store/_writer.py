"""The hot write path on SQLite: one writer thread per process, one commit per batch.

The async engine costs 8-12 thread hand-offs and ~1 ms of Python per transaction. Here
one thread owns a synchronous connection (SQLAlchemy Core: the same tables, types and
compiled-statement cache) and runs write jobs, each a plain function of the connection.
Jobs that queue up while a batch commits share the next transaction (group commit across
every turn of the process); should one of them fail, the batch runs again with each job in
its own savepoint, so one job's failure undoes only that job. A job's caller hears back
only after the commit: nothing reaches a client before it is durable. SQLite allows one
writer at a time anyway; the async engine's cold writes and other processes wait on the
database lock (``busy_timeout``) as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import StaticPool

T = TypeVar("T")
MAX_BATCH = 256
"""Most jobs one transaction takes: a long queue still commits every so often."""


@dataclass(frozen=True, slots=True)
class _Job:
    fn: Callable[[Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop

    def settle(self, ok: bool, value: Any) -> None:
        # A closed loop (RuntimeError) means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_resolve, self.future, ok, value)


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller was cancelled; the write stands all the same
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class SqliteThread:
    """Runs write jobs on one thread and connection, committing them in batches.

    With ``begin="BEGIN"`` and no savepoints it serves reads the same way: the jobs queued
    together share one read transaction (one snapshot, taken after each was queued, so a
    read sees every write its caller awaited before it)."""

    def __init__(
        self,
        url: str,
        configure: Callable[[Any], None],
        *,
        begin: str = "BEGIN IMMEDIATE",
        savepoints: bool = True,
    ) -> None:
        self._engine = _sync_engine(url, configure, begin)
        self._savepoints = savepoints
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a write transaction (shared with other queued jobs, in its own
        savepoint) and return its result once that transaction has committed."""
        return await self.submit(fn)

    def submit(self, fn: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn`` now (jobs run in the order they are queued); the future resolves
        once its transaction has committed."""
        self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, future, loop))
        return future

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._serve, name="bosun-sqlite-writer", daemon=True
                    )
                    self._thread.start()

    async def close(self) -> None:
        """Finish the queued jobs, then stop the thread and close the connection."""
        if self._thread is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        self._engine.dispose()

    def _serve(self) -> None:
        with self._engine.connect() as conn:
            while True:
                first = self._jobs.get()
                if first is None:
                    return
                batch, stop = self._take(first)
                self._commit(conn, batch, savepoints=self._savepoints)
                if stop:
                    return

    def _take(self, first: _Job) -> tuple[list[_Job], bool]:
        """``first`` and whatever else is queued now, up to ``MAX_BATCH``."""
        batch = [first]
        while len(batch) < MAX_BATCH:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    @staticmethod
    def _commit(conn: Connection, batch: list[_Job], *, savepoints: bool) -> None:
        """Run ``batch`` in one transaction and settle every job once it committed.

        A batch of several writes runs first without savepoints (two statements per job
        saved, which is most of a small job's cost). Should one of its jobs fail, that
        transaction is rolled back and the batch runs again with each job in its own
        savepoint, so the failure undoes only that job's work (the jobs are functions of
        the connection alone, so running one again does what it would have done)."""
        isolate = savepoints and len(batch) > 1
        try:
            try:
                done = _run(conn, batch, isolate=False, first_try=isolate)
            except _JobFailed:  # rolled back: again, each job undoable on its own
                done = _run(conn, batch, isolate=True, first_try=False)
        except Exception as exc:  # the commit itself failed: none of the batch was written
            for job in batch:
                job.settle(False, exc)
            return
        for job, ok, value in done:
            job.settle(ok, value)


class _JobFailed(Exception):
    """A job of an optimistic (savepoint-free) batch failed: run the batch again."""


def _run(
    conn: Connection, batch: list[_Job], *, isolate: bool, first_try: bool
) -> list[tuple[_Job, bool, Any]]:
    """One transaction over ``batch``: each job in a savepoint when ``isolate``; on a
    ``first_try`` a failing job rolls it all back (``_JobFailed``); otherwise (one job, or
    a read-only batch) a failure fails the whole batch."""
    with conn.begin():
        if isolate:
            return [_attempt(conn, job) for job in batch]
        done = []
        for job in batch:
            try:
                done.append((job, True, job.fn(conn)))
            except Exception as exc:
                if first_try:
                    raise _JobFailed from exc
                raise
        return done


def _attempt(conn: Connection, job: _Job) -> tuple[_Job, bool, Any]:
    """Run one job of a batch of writes inside a savepoint, so its failure undoes only
    its work."""
    try:
        with conn.begin_nested():
            return job, True, job.fn(conn)
    except Exception as exc:
        return job, False, exc


def _sync_engine(url: str, configure: Callable[[Any], None], begin: str) -> Engine:
    """A synchronous engine on the same file (``sqlite+aiosqlite`` becomes ``sqlite``)
    with one connection, set up as the async engines are, opening ``begin``."""
    sync_url = make_url(url).set(drivername="sqlite")
    engine = create_engine(
        sync_url, poolclass=StaticPool, connect_args={"check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        configure(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    return engine
