"""bench/_pgwire.py's counting proxy against the real PostgreSQL: what asyncpg sends
through it (simple queries, prepared statements, transactions, pipelines, NOTIFYs) is
counted as PostgreSQL runs it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from pg_testing import dsn

sys.path.append(str(Path(__file__).parents[2] / "bench"))  # last: it shadows nothing
from _pgwire import PgCounter, PgCounts

pytestmark = pytest.mark.postgres


@pytest.fixture
async def counter(postgres_url: str) -> AsyncIterator[PgCounter]:
    parts = urlsplit(dsn(postgres_url))
    async with PgCounter(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        yield proxy


@pytest.fixture
async def conn(counter: PgCounter, postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection through the proxy (asyncpg's default ``prefer``: the proxy refuses SSL)."""
    parts = urlsplit(dsn(postgres_url))
    proxied = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{counter.port}")
    connection = await asyncpg.connect(proxied.geturl())
    await connection.execute("create table t (n int)")
    try:
        yield connection
    finally:
        await connection.close()


async def counted(counter: PgCounter, work: asyncio.Future[object] | object) -> PgCounts:
    before = counter.snapshot()
    await work  # type: ignore[misc]
    return counter.snapshot() - before


async def test_simple_query_is_one_round_trip_and_one_implicit_transaction(
    counter: PgCounter, conn: asyncpg.Connection
) -> None:
    assert await counted(counter, conn.execute("select 1")) == PgCounts(
        round_trips=1, statements=1, notifies=0, transactions=1, explicit=0
    )
    # Two statements in one Query: one round trip, one implicit transaction.
    assert await counted(counter, conn.execute("select 1; select 2")) == PgCounts(1, 1, 0, 1, 0)


async def test_explicit_transaction_with_a_cached_prepared_statement(
    counter: PgCounter, conn: asyncpg.Connection
) -> None:
    async def insert(n: int) -> None:
        async with conn.transaction():
            await conn.execute("insert into t values ($1)", n)

    first = await counted(counter, insert(1))
    # BEGIN; Parse + Describe + Flush; Bind + Execute + Sync; COMMIT.
    assert (first.round_trips, first.statements, first.transactions, first.explicit) == (4, 3, 1, 1)
    again = await counted(counter, insert(2))  # the statement is cached: no Parse round trip
    assert again == PgCounts(round_trips=3, statements=3, notifies=0, transactions=1, explicit=1)
    rolled_back = counter.snapshot()
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with conn.transaction():
            await conn.execute("select 1 / 0")
    assert (counter.snapshot() - rolled_back).explicit == 1  # BEGIN ... ROLLBACK
    assert await conn.fetchval("select count(*) from t") == 2


async def test_a_pipeline_is_one_round_trip_for_many_statements(
    counter: PgCounter, conn: asyncpg.Connection
) -> None:
    await conn.executemany("insert into t values ($1)", [(0,)])  # prepare it first
    done = await counted(
        counter, conn.executemany("insert into t values ($1)", [(i,) for i in range(50)])
    )
    assert done.statements == 50
    assert done.round_trips == 1
    assert (done.transactions, done.explicit) == (1, 0)  # the batch: one implicit transaction


async def test_notifies_are_counted_as_run_and_reach_a_listener(
    counter: PgCounter, conn: asyncpg.Connection, postgres_url: str
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(dsn(postgres_url))  # direct: not counted
    await listener.add_listener("bench", lambda *args: heard.put_nowait(args[3]))
    try:
        before = counter.snapshot()
        await conn.execute("NOTIFY bench, 'a'")
        await conn.execute("select pg_notify($1, $2)", "bench", "b")
        await conn.execute("select pg_notify($1, $2)", "bench", "c")  # Bind of a cached statement
        await conn.execute("select 'message_notify_user', 'notify me'")  # not a NOTIFY
        done = counter.snapshot() - before
        got = [await asyncio.wait_for(heard.get(), 5) for _ in range(3)]
    finally:
        await listener.close()
    assert done.notifies == 3
    assert got == ["a", "b", "c"]


async def test_messages_split_across_reads_are_counted_once(
    counter: PgCounter, conn: asyncpg.Connection
) -> None:
    text = "x" * 300_000  # several reads of the proxy's 64 KiB chunks
    before = counter.snapshot()
    assert await conn.fetchval(f"select length('{text}')") == len(text)
    assert await conn.fetchval("select length($1::text)", text) == len(text)
    done = counter.snapshot() - before
    # Each: Parse + Describe + Flush, then Bind + Execute + Sync (fetchval prepares).
    assert done == PgCounts(round_trips=4, statements=2, notifies=0, transactions=2, explicit=0)
    # A large answer goes back whole (the client reads it slower than it comes).
    assert await conn.fetchval("select repeat('y', 5000000)") == "y" * 5_000_000
