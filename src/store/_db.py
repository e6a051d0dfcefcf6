"""Engines and transactions, with the SQLite settings that make concurrent appends safe.

SQLite: WAL, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions (a deferred
``BEGIN`` that reads then writes fails with "database is locked" under load; see
FIELD-NOTES.md). In-process writers also share one connection, so they queue on the pool
instead of spinning on the file lock. PostgreSQL uses one asyncpg pool for both; its
reads run in autocommit (under READ COMMITTED each statement reads its own snapshot
anyway, so a ``BEGIN``/``COMMIT`` around a read buys nothing and costs two round trips),
and its hot writes go through one writer connection (``store._pg_writer``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from store._pg_writer import PgWriter, RawJob
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
        self._pg: PgWriter | None = None
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
            self.reader = self.writer.execution_options(isolation_level="AUTOCOMMIT")
            self._hot = self._hot_reads = None
            self._pg = PgWriter(self.writer)
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

    async def run_write(self, fn: Callable[[Connection], T], *, pg: RawJob[T] | None = None) -> T:
        """Run ``fn`` (a plain function of a connection) in a write transaction and return
        its result once committed: the hot path. The process's writer runs it, batched
        with other writes in one commit: SQLite's writer thread, PostgreSQL's writer
        connection, which runs ``pg`` instead when given (the same writes as fixed SQL on
        the asyncpg connection, in one statement: ``store._hot_pg``)."""
        return await self.write_soon(fn, pg=pg)

    async def run_pg(self, job: RawJob[T]) -> T:
        """``run_write`` of a write that exists only as PostgreSQL's fixed SQL."""
        assert self._pg is not None, "run_pg is PostgreSQL's"
        return await self._pg.submit(None, job)

    def insert(self, table: type[Any]) -> PgInsert | SqliteInsert:
        """``INSERT`` into ``table`` in this database's dialect: the one with ``ON
        CONFLICT`` (``on_conflict_do_nothing``/``_do_update``) both databases speak."""
        make = pg_insert if self.dialect == "postgresql" else sqlite_insert
        return make(table)

    @property
    def writes_in_order(self) -> bool:
        """Whether ``write_soon`` queues at once: then a write queued later commits no
        earlier, and its caller need not wait (both writers queue at once)."""
        return True

    def write_soon(
        self, fn: Callable[[Connection], T], *, pg: RawJob[T] | None = None
    ) -> Awaitable[T]:
        """``run_write``, queued now (the result is a future)."""
        if self._hot is not None:
            return self._hot.submit(fn)
        assert self._pg is not None
        return self._pg.submit(fn, pg)

    async def run_read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a read transaction: the hot reads. On SQLite a reader thread runs
        it (queued reads share one snapshot); on PostgreSQL the async engine does, in
        autocommit."""
        if self._hot_reads is not None:
            return await self._hot_reads.run(fn)
        async with self.reader.begin() as conn:
            return await conn.run_sync(fn)

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose every statement commits on its own (PostgreSQL: no
        ``BEGIN``/``COMMIT`` round trips), for writes that need no atomicity together; on
        SQLite a write transaction (its one writer commits them together anyway)."""
        if self._pg is None:
            async with self.write() as conn:
                yield conn
            return
        async with self.reader.connect() as conn:
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self.reader.begin() as conn:
            yield conn

    async def close(self) -> None:
        if self._hot is not None:
            await self._hot.close()
        if self._hot_reads is not None:
            await self._hot_reads.close()
        if self._pg is not None:
            await self._pg.close()
        await self.writer.dispose()
        if self.reader is not self.writer and self._pg is None:  # SQLite: its own pool
            await self.reader.dispose()
