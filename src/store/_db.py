"""Engines and transactions, with the SQLite settings that make concurrent appends safe.

SQLite: WAL, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions (a deferred
``BEGIN`` that reads then writes fails with "database is locked" under load; see
FIELD-NOTES.md). In-process writers also share one connection, so they queue on the pool
instead of spinning on the file lock. PostgreSQL uses one asyncpg pool for both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_engine(url: str, *, begin: str, pool_size: int) -> AsyncEngine:
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, pool_timeout=120)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so we can say BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

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
        elif url.startswith("postgresql"):
            self.dialect = "postgresql"
            self.writer = create_async_engine(url, pool_size=10, max_overflow=20)
            self.reader = self.writer
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

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self.reader.begin() as conn:
            yield conn

    async def close(self) -> None:
        await self.writer.dispose()
        if self.reader is not self.writer:
            await self.reader.dispose()
