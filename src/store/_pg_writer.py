"""The hot write path on PostgreSQL: one writer connection per process, one commit per batch.

Through the async engine every write job was a transaction of its own: a ``BEGIN`` and a
``COMMIT`` round trip around its statements, and a pool checkout. Here one task owns one
connection and runs the jobs queued while the previous batch committed in one transaction
(group commit, as ``store._writer`` does on SQLite): a batch of n jobs costs two round
trips beside its statements, not 2n. Should one job fail, the batch runs again with each
job in its own savepoint, so the failure undoes only that job. A caller hears back only
after the commit. Jobs commit in the order they were queued.

A job is a function of the connection (SQLAlchemy Core, run on it with ``run_sync``) or,
for the hottest writes, a coroutine of its asyncpg driver connection running fixed SQL
(``store._hot_pg``) whose writes are one statement. A batch of one such job runs with no
``BEGIN``: the statement is its own transaction (one round trip in all). The connection is
in autocommit, so ``BEGIN``/``COMMIT``/``SAVEPOINT`` are this module's, sent as simple
queries (one round trip each, no prepare).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")
MAX_BATCH = 256
"""Most jobs one transaction takes: a long queue still commits every so often."""

CONNECT_TRIES = 32
"""Pooled connections tried for a live one (the pool holds at most 30)."""
LONE_AT_MOST = 2
"""A batch of at most this many fixed-SQL jobs runs each as its own statement: n round trips
instead of n + 2 (``BEGIN``, ``COMMIT``); a longer one shares one transaction."""

RawJob = Callable[[Any], Awaitable[T]]
"""Fixed SQL on the asyncpg connection: one statement's writes (it may read after)."""


@dataclass(frozen=True, slots=True)
class _Job:
    fn: Callable[[Connection], Any] | None
    raw: RawJob[Any] | None
    future: asyncio.Future[Any]

    def settle(self, ok: bool, value: Any) -> None:
        if self.future.done():  # the caller was cancelled; the write stands all the same
            return
        if ok:
            self.future.set_result(value)
        else:
            self.future.set_exception(value)


class _JobFailed(Exception):
    """A job of an optimistic (savepoint-free) batch failed: run the batch again."""


class PgWriter:
    """Runs write jobs on one connection, committing them in batches."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._jobs: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._conn: AsyncConnection | None = None
        self._raw: Any = None
        self.batches = 0
        """Transactions (or lone statements) committed: what tests count."""

    def submit(
        self, fn: Callable[[Connection], T] | None, raw: RawJob[T] | None = None
    ) -> asyncio.Future[T]:
        """Queue the job now (jobs commit in the order they are queued); the future
        resolves once its transaction has committed. ``raw``, when given, runs instead of
        ``fn``: the same writes as fixed SQL on the driver connection."""
        assert fn is not None or raw is not None, "a job needs something to run"
        loop = asyncio.get_running_loop()
        if self._task is not None and self._task.get_loop() is not loop:
            # Used from another event loop (the first one ended): start afresh there.
            self._jobs, self._task, self._conn, self._raw = asyncio.Queue(), None, None, None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._serve(), name="bosun-pg-writer")
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put_nowait(_Job(fn, raw, future))
        return future

    async def close(self) -> None:
        """Finish the queued jobs, then give the connection back to the pool."""
        task, self._task = self._task, None
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return  # never started, or its loop has ended (its connection with it)
        if not task.done():
            self._jobs.put_nowait(None)
            await task
        await self._drop()

    async def _serve(self) -> None:
        while True:
            first = await self._jobs.get()
            if first is None:
                return
            batch, stop = self._take(first)
            await self._commit(batch)
            if stop:
                return

    def _take(self, first: _Job) -> tuple[list[_Job], bool]:
        batch = [first]
        while len(batch) < MAX_BATCH:
            try:
                job = self._jobs.get_nowait()
            except asyncio.QueueEmpty:
                break
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    async def _connection(self) -> tuple[AsyncConnection, Any]:
        """The writer's connection; a new one is pinged first (one round trip, once per
        connection), and a dead one left in the pool (the server restarted, or ended
        the pool's backends) is thrown away for the next."""
        for _ in range(CONNECT_TRIES - 1):
            if self._conn is not None:
                break
            conn = await self._engine.connect()
            self._conn, self._raw = conn, (await conn.get_raw_connection()).driver_connection
            try:
                await self._raw.execute(";")
            except Exception:
                await self._drop(broken=True)
        if self._conn is None:  # the last try: its failure is the batch's
            conn = await self._engine.connect()
            self._conn, self._raw = conn, (await conn.get_raw_connection()).driver_connection
        return self._conn, self._raw

    async def _drop(self, *, broken: bool = False) -> None:
        """Give the connection back (thrown away if it ``broke``): the next batch takes
        another."""
        conn, self._conn, self._raw = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                if broken:
                    await conn.invalidate()
                await conn.close()

    async def _commit(self, batch: list[_Job]) -> None:
        """Run ``batch`` in one transaction and settle every job once it committed."""
        try:
            conn, raw = await self._connection()
            if len(batch) <= LONE_AT_MOST and all(job.raw is not None for job in batch):
                done = [await _lone(raw, job) for job in batch]  # each its own transaction
            else:
                try:
                    done = await _run(conn, raw, batch, isolate=False, first_try=len(batch) > 1)
                except _JobFailed:  # rolled back: again, each job undoable on its own
                    done = await _run(conn, raw, batch, isolate=True, first_try=False)
        except Exception as exc:  # the commit failed (or the lone job): none of it stands
            if self._raw is None or self._raw.is_closed():
                await self._drop(broken=True)
            for job in batch:
                job.settle(False, exc)
            return
        if self._raw.is_closed():  # a lone job's connection broke: take another next time
            await self._drop(broken=True)
        self.batches += 1
        for job, ok, value in done:
            job.settle(ok, value)


async def _run(
    conn: AsyncConnection, raw: Any, batch: list[_Job], *, isolate: bool, first_try: bool
) -> list[tuple[_Job, bool, Any]]:
    """One transaction over ``batch``: each job in a savepoint when ``isolate``; on a
    ``first_try`` a failing job rolls it all back (``_JobFailed``); otherwise (one job) a
    failure fails the batch."""
    await raw.execute("BEGIN")
    try:
        done = []
        for job in batch:
            if isolate:
                done.append(await _attempt(conn, raw, job))
                continue
            try:
                done.append((job, True, await _call(conn, raw, job)))
            except Exception as exc:
                if first_try:
                    raise _JobFailed from exc
                raise
        await raw.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            await raw.execute("ROLLBACK")
        raise
    return done


async def _lone(raw: Any, job: _Job) -> tuple[_Job, bool, Any]:
    """A fixed-SQL job on its own: its one statement is its transaction."""
    assert job.raw is not None
    try:
        return job, True, await job.raw(raw)
    except Exception as exc:
        return job, False, exc


async def _attempt(conn: AsyncConnection, raw: Any, job: _Job) -> tuple[_Job, bool, Any]:
    """Run one job inside a savepoint, so its failure undoes only its work. (Savepoints
    are not released: the transaction ends soon, and a release costs a round trip.)"""
    await raw.execute("SAVEPOINT job")
    try:
        return job, True, await _call(conn, raw, job)
    except Exception as exc:
        await raw.execute("ROLLBACK TO SAVEPOINT job")
        return job, False, exc


async def _call(conn: AsyncConnection, raw: Any, job: _Job) -> Any:
    if job.raw is not None:
        return await job.raw(raw)
    assert job.fn is not None
    try:
        return await conn.run_sync(job.fn)
    finally:
        # End SQLAlchemy's own (autobegun) transaction: in autocommit it sends nothing.
        await conn.rollback()
