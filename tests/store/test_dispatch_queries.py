"""The dispatcher's queries read partial indexes, so they do not grow with finished runs;
a run's claim opens its turn in the same transaction, so no claim is ever without its
turn; migration 0023 gives claims an older version left without a turn back to the queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, insert, select, text
from sqlalchemy.exc import IntegrityError

from bosun.migrate import upgrade
from events import SessionStarted, UserMessage
from store import RunTakenError, Store, TurnOpening
from store._models import SessionRow, TurnRow, utcnow
from store._runs import RunRow

FINISHED = 3000  # enough finished rows that a full scan is the costlier plan on PostgreSQL


def run_row(run_id: str, session_id: str, **values: Any) -> dict[str, Any]:
    return {
        "id": run_id, "org_id": "acme", "agent": "coach", "agent_version": 1,
        "session_id": session_id, "user_id": "ada", "role": "staff", "trigger": "api",
        "task": "t", **values,
    }  # fmt: skip


async def finished_history(store: Store, n: int) -> None:
    """``n`` finished runs, each with its session and its completed turn (no API)."""
    now = utcnow()
    ids = [(f"run_old_{i}", f"s-old-{i}", f"t-old-{i}") for i in range(n)]
    await store.sessions.create(org_id="acme", user_id="ada", session_id="s-first", title="t")
    async with store.db.write() as conn:
        await conn.execute(
            insert(SessionRow),
            [{"id": s, "org_id": "acme", "user_id": "ada", "created_at": now} for _, s, _ in ids],
        )
        await conn.execute(
            insert(TurnRow),
            [
                {"id": t, "session_id": s, "trace_id": "x", "status": "completed",
                 "started_at": now, "finished_at": now}
                for _, s, t in ids
            ],
        )  # fmt: skip
        await conn.execute(
            insert(RunRow),
            [run_row(r, s, turn_id=t, claimed_at=now, created_at=now) for r, s, t in ids],
        )


async def a_run(store: Store, session_id: str | None = None) -> str:
    """Queue a run in a session of its own (or ``session_id``); its id."""
    session_id = session_id or str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title="t")
    run, _ = await store.runs.create(**run_row(f"run_{uuid.uuid4().hex}", session_id))
    return run.id


def opening(session_id: str, worker_id: str = "w1") -> TurnOpening:
    turn_id = str(uuid.uuid4())
    events = [
        SessionStarted(session_id=session_id, turn_id=turn_id),
        UserMessage(message_id="msg_1", text="t"),
    ]
    return TurnOpening(
        session_id=session_id, turn_id=turn_id, trace_id="tr", events=events,
        worker_id=worker_id, lease_until=utcnow() + timedelta(seconds=60), job={"org_id": "acme"},
    )  # fmt: skip


@contextmanager
def statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """The SQL the store sends (each statement and its parameters), while open."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    engines = {store.db.writer.sync_engine, store.db.reader.sync_engine}
    for thread in (store.db._hot, store.db._hot_reads):  # SQLite's writer and reader threads
        if thread is not None:
            engines.add(thread._engine)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)


async def plan(store: Store, statement: str, params: Any) -> str:
    """The planner's plan of ``statement``, as one text (index scans only on PostgreSQL:
    the index must be usable at all, which is what a bound ``status`` would prevent)."""
    async with store.db.write() as conn:
        if store.dialect == "postgresql":
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            rows = await conn.exec_driver_sql(f"EXPLAIN {statement}", params)
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)
        return "\n".join(str(row[-1]) for row in rows)


async def plans_of(store: Store, call: Callable[[], Awaitable[object]], table: str) -> list[str]:
    """The plans of the SELECTs on ``table`` that ``call`` sends."""
    with statements(store) as seen:
        await call()
    reads = [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT") and table in s]
    assert reads, seen
    return [await plan(store, s, p) for s, p in reads]


async def test_the_dispatchers_queries_read_the_partial_indexes(store: Store) -> None:
    await finished_history(store, FINISHED)
    await a_run(store)
    running = await store.runs.get("acme", await a_run(store))
    assert running is not None
    await store.runs.open_claimed(running.id, opening(running.session_id))
    if store.dialect == "postgresql":  # SQLite plans with no statistics, as it runs
        async with store.db.write() as conn:
            await conn.execute(text("ANALYZE"))

    queued = await plans_of(store, lambda: store.runs.queued(limit=100), "FROM runs")
    counts = await plans_of(store, store.runs.running_counts, "FROM runs")
    holders = await plans_of(store, lambda: store.leases.holders("w2"), "FROM turns")
    expired = await plans_of(store, lambda: store.leases.claim_expired("w2", 15), "FROM turns")

    assert "ix_runs_unclaimed" in queued[0], queued
    for plans in (counts, holders, expired):
        assert any(name in plans[0] for name in ("ix_turns_running", "uq_turns_one_running"))
    assert "ix_runs_turn" in counts[0], counts  # runs looked up by turn, not all scanned
    assert "ix_runs_org_agent_created" not in counts[0], counts
    assert "ix_turns_running" in holders[0], holders


async def test_a_claim_opens_its_turn_in_the_same_transaction(store: Store) -> None:
    run_id = await a_run(store)
    run = await store.runs.get("acme", run_id)
    assert run is not None and run.status == "queued"
    turn = opening(run.session_id)
    await store.runs.open_claimed(run_id, turn)
    with pytest.raises(RunTakenError):  # a second worker's claim: nothing written
        await store.runs.open_claimed(run_id, opening(run.session_id, "w2"))
    # A run whose turn cannot open (its session has a running turn) is not claimed either.
    blocked = await a_run(store, session_id=run.session_id)
    with pytest.raises(IntegrityError):
        await store.runs.open_claimed(blocked, opening(run.session_id, "w2"))

    claimed = await store.runs.get("acme", run_id)
    still = await store.runs.get("acme", blocked)
    events = await store.log.read(run.session_id, turn_id=turn.turn_id)
    assert claimed is not None and (claimed.turn_id, claimed.status) == (turn.turn_id, "running")
    assert await store.leases.holder(turn.turn_id) == ("w1", turn.lease_until)
    assert [e.type for e in events] == ["session_started", "user_message"]
    assert still is not None and (still.turn_id, still.claimed_at, still.status) == (
        None,
        None,
        "queued",
    )
    assert [r.id for r in await store.runs.queued(limit=10)] == [blocked]


async def test_queued_leaves_out_paused_agents_without_reading_every_agent(store: Store) -> None:
    for handle, profile in (("coach", {"name": "C"}), ("sleepy", {"name": "S", "paused": True})):
        await store.agents.save("acme", handle, profile, by="t", create=True)
    await store.agents.save("acme", "capped", {"name": "K"}, by="t", create=True)
    async with store.db.write() as conn:
        await conn.execute(
            text("UPDATE agents SET paused_at = CURRENT_TIMESTAMP WHERE handle = 'capped'")
        )
    ids = {}
    for handle in ("sleepy", "capped", "coach"):
        session_id = str(uuid.uuid4())
        await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title="t")
        run, _ = await store.runs.create(**run_row(f"run_{handle}", session_id, agent=handle))
        ids[handle] = run.id

    waiting = await store.runs.queued(limit=1)  # the paused ones come first, yet one is found

    assert [r.id for r in waiting] == [ids["coach"]]


async def test_0023_requeues_old_claims_that_never_opened_their_turn(db_url: str) -> None:
    store = Store(db_url)
    try:
        await upgrade(store, "0022")
        now = utcnow()
        old = now - timedelta(minutes=5)
        async with store.db.write() as conn:
            await conn.execute(
                sa.text("INSERT INTO orgs (id, tier, created_at) VALUES ('acme', 'lite', :at)"),
                {"at": now},
            )  # 0022's columns
            await conn.execute(
                insert(SessionRow), [{"id": "s1", "org_id": "acme", "user_id": "ada"}]
            )
            await conn.execute(
                insert(RunRow),
                [
                    run_row("run_dead", "s1", turn_id="t-never", claimed_at=old, created_at=old),
                    run_row("run_fresh", "s1", turn_id="t-soon", claimed_at=now, created_at=now),
                ],
            )
        await upgrade(store)
        async with store.db.read() as conn:
            rows = dict((await conn.execute(select(RunRow.id, RunRow.turn_id))).all())
            indexes = await conn.run_sync(
                lambda c: {
                    i["name"] for t in ("runs", "turns") for i in sa.inspect(c).get_indexes(t)
                }
            )
    finally:
        await store.close()

    assert rows == {"run_dead": None, "run_fresh": "t-soon"}  # a live old worker's is kept
    assert {"ix_runs_unclaimed", "ix_runs_turn", "ix_turns_running"} <= indexes
    assert "ix_runs_queued" not in indexes
