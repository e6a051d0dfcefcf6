"""PostgreSQL's writer connection (store/_pg_writer.py): writes queued together commit in
one transaction, a failing one fails alone, and an append is one statement; counted on
the wire (bench/_pgtrace.py), so the counts hold on a loaded machine."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from conftest import migrate
from events import TextDelta
from pg_testing import dsn
from store import Store
from store._appends import SessionNotFoundError, StaleOwnerError

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from _pgtrace import WireCounter

pytestmark = pytest.mark.postgres


@pytest.fixture
async def wire(postgres_url: str) -> AsyncIterator[WireCounter]:
    async with WireCounter.for_url(postgres_url) as counter:
        yield counter


@pytest.fixture
async def pg_store(postgres_url: str, wire: WireCounter) -> AsyncIterator[Store]:
    await migrate(postgres_url)
    opened = Store(wire.url(postgres_url))
    yield opened
    await opened.close()


async def _sessions(store: Store, n: int) -> list[str]:
    ids = [f"s{i}" for i in range(n)]
    await asyncio.gather(
        *(store.sessions.create(org_id="o", user_id="u", session_id=s, title=None) for s in ids)
    )
    return ids


async def test_appends_queued_together_share_one_transaction(
    pg_store: Store, wire: WireCounter
) -> None:
    sessions = await _sessions(pg_store, 20)
    wire.reset()
    stored = await asyncio.gather(
        *(pg_store.log.append(s, [TextDelta(delta="a"), TextDelta(delta="b")]) for s in sessions)
    )
    counts = wire.counts()
    read = [await pg_store.log.read(s) for s in sessions]

    assert [[e.seq for e in batch] for batch in stored] == [[1, 2]] * 20
    assert [[(e.seq, e.data["delta"]) for e in events] for events in read] == [
        [(1, "a"), (2, "b")]
    ] * 20
    # One statement per append (counter, events, NOTIFY together), one transaction for
    # the batch: today's path made 20 transactions of 5 statements.
    assert counts.kinds["WITH UPDATE sessions"] == 20, counts.kinds
    assert counts.transactions <= 2 and counts.round_trips <= 20 + 2 * 2, counts


async def test_a_lone_append_is_one_round_trip(pg_store: Store, wire: WireCounter) -> None:
    [session] = await _sessions(pg_store, 1)
    wire.reset()
    await pg_store.log.append(session, [TextDelta(delta="a")])
    counts = wire.counts()

    assert (counts.round_trips, counts.transactions, counts.notifies) == (1, 0, 1), counts


def _fails(conn: Connection) -> None:
    conn.execute(text("INSERT INTO orgs (id, tier, created_at) VALUES ('o-bad', 'lite', now())"))
    raise ValueError("fails after its insert")


async def test_a_failing_job_fails_alone_and_the_batch_commits(
    pg_store: Store, wire: WireCounter
) -> None:
    sessions = await _sessions(pg_store, 4)
    opened, _ = await pg_store.log.open_turn(
        sessions[0], [TextDelta(delta="open")], turn_id="t1", trace_id="tr"
    )
    wire.reset()
    results: list[Any] = await asyncio.gather(
        pg_store.log.append(sessions[1], [TextDelta(delta="ok")]),
        pg_store.log.append("missing", [TextDelta(delta="x")]),
        pg_store.log.append(sessions[0], [TextDelta(delta="stale")], turn_id="t1", epoch=7),
        pg_store.db.run_write(_fails),
        pg_store.log.append(sessions[2], [TextDelta(delta="ok")]),
        pg_store.log.append(sessions[0], [TextDelta(delta="owner")], turn_id="t1", epoch=0),
        return_exceptions=True,
    )
    counts = wire.counts()
    async with pg_store.db.read() as conn:
        bad_org = await conn.scalar(text("SELECT count(*) FROM orgs WHERE id = 'o-bad'"))

    assert [type(r).__name__ for r in results] == [
        "list", "SessionNotFoundError", "StaleOwnerError", "ValueError", "list", "list",
    ]  # fmt: skip
    assert isinstance(results[1], SessionNotFoundError)
    assert isinstance(results[2], StaleOwnerError)
    assert bad_org == 0  # the failing job's insert was undone
    assert [e.data["delta"] for e in await pg_store.log.read(sessions[0])] == ["open", "owner"]
    assert [e.seq for e in results[5]] == [opened[0].seq + 1]
    assert [e.data["delta"] for e in await pg_store.log.read(sessions[2])] == ["ok"]
    assert counts.transactions == 2  # the batch, then its retry with savepoints


async def test_an_append_finishing_a_turn_closes_it_under_its_epoch(pg_store: Store) -> None:
    [session] = await _sessions(pg_store, 1)
    await pg_store.log.open_turn(session, [TextDelta(delta="open")], turn_id="t1", trace_id="tr")

    with pytest.raises(StaleOwnerError):
        await pg_store.log.append(
            session, [TextDelta(delta="late")], turn_id="t1", epoch=3, finish="completed"
        )
    async with pg_store.db.read() as conn:
        still = (await conn.execute(text("SELECT status FROM turns WHERE id = 't1'"))).scalar()
    await pg_store.log.append(
        session, [TextDelta(delta="end")], turn_id="t1", epoch=0, finish="completed"
    )
    async with pg_store.db.read() as conn:
        row = (
            await conn.execute(
                text("SELECT status, worker_id, finished_at FROM turns WHERE id = 't1'")
            )
        ).one()

    assert still == "running"
    assert row.status == "completed" and row.worker_id is None and row.finished_at is not None
    assert [e.data["delta"] for e in await pg_store.log.read(session)] == ["open", "end"]


async def test_the_writer_takes_a_new_connection_when_its_own_is_lost(
    pg_store: Store, postgres_url: str
) -> None:
    [session] = await _sessions(pg_store, 1)
    await pg_store.log.append(session, [TextDelta(delta="a")])
    admin = await asyncpg.connect(dsn(postgres_url))
    try:  # every backend of the store (the writer's among them) is killed
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    lost = await asyncio.gather(
        pg_store.log.append(session, [TextDelta(delta="b")]), return_exceptions=True
    )
    await pg_store.log.append(session, [TextDelta(delta="c")])

    deltas = [e.data["delta"] for e in await pg_store.log.read(session)]
    assert deltas in (["a", "c"], ["a", "b", "c"]), (deltas, lost)
