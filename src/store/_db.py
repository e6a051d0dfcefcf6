"""Engines and transactions, with the SQLite settings that make concurrent appends safe.

SQLite: WAL, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions (a deferred
``BEGIN`` that reads then writes fails with "database is locked" under load; see
FIELD-NOTES.md). In-process writers also share one connection, so they queue on the pool
instead of spinning on the file lock. PostgreSQL uses one asyncpg pool for both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from store._writer import SqliteThread

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _configure_sqlite(dbapi_connection: Any) -> None:
    # Take transaction control away from the driver so we can say BEGIN IMMEDIATE.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_engine(url: str, *, begin: str, pool_size: int) -> AsyncEngine:
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, pool_timeout=120)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        _configure_sqlite(dbapi_connection)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    return engine


class Database:
    """A writer and a reader engine over one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite"):
            self.dialect = "sqlite"
            self.writer = _sqlite_engine(url, begin="BEGIN IMMEDIATE", pool_size=1)
            self.reader = _sqlite_engine(url, begin="BEGIN", pool_size=8)
            self._hot: SqliteThread | None = SqliteThread(url, _configure_sqlite)
            self._hot_reads: SqliteThread | None = SqliteThread(
                url, _configure_sqlite, begin="BEGIN", savepoints=False
            )
        elif url.startswith("postgresql"):
            self.dialect = "postgresql"
            self.writer = create_async_engine(url, pool_size=10, max_overflow=20)
            self.reader = self.writer
            self._hot = self._hot_reads = None
        else:
            raise ValueError(
                f"Unsupported database URL {url!r}: use sqlite+aiosqlite:///PATH "
                "or postgresql+asyncpg://USER:PASSWORD@HOST/DB"
            )

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction, committed on normal exit and rolled back on error."""
        async with self.writer.begin() as conn:
            yield conn

    async def run_write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` (a plain function of a connection) in a write transaction and return
        its result once committed: the hot path. On SQLite the process's writer thread
        runs it, batched with other writes in one commit; on PostgreSQL it runs on the
        async engine (``run_sync``), one transaction each."""
        if self._hot is not None:
            return await self._hot.run(fn)
        async with self.writer.begin() as conn:
            return await conn.run_sync(fn)

    @property
    def writes_in_order(self) -> bool:
        """Whether ``write_soon`` queues at once: then a write queued later commits no
        earlier, and its caller need not wait (SQLite's writer thread)."""
        return self._hot is not None

    def write_soon(self, fn: Callable[[Connection], T]) -> Awaitable[T]:
        """``run_write``, queued now when ``writes_in_order`` (the result is a future);
        on PostgreSQL the transaction runs when the result is awaited."""
        if self._hot is not None:
            return self._hot.submit(fn)
        return self.run_write(fn)

    async def run_read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a read transaction: the hot reads. On SQLite a reader thread runs
        it (queued reads share one snapshot); on PostgreSQL the async engine does."""
        if self._hot_reads is not None:
            return await self._hot_reads.run(fn)
        async with self.reader.begin() as conn:
            return await conn.run_sync(fn)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self.reader.begin() as conn:
            yield conn

    async def close(self) -> None:
        if self._hot is not None:
            await self._hot.close()
        if self._hot_reads is not None:
            await self._hot_reads.close()
        await self.writer.dispose()
        if self.reader is not self.writer:
            await self.reader.dispose()
