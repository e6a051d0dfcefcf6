"""The run dispatcher is event-driven: a run queued by another worker (PostgreSQL
``NOTIFY``) or ending here starts the next at once with no poll in sight; a dispatcher
fills its room from one queue read even when other workers win some claims; a run whose
start fails stays queued, never claimed without its turn."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import update
from test_schedules import queue_a_run
from test_triggers import quick

from conftest import Server, ServerFactory
from fleet import RunDispatcher
from store import RunRecord, Store
from store._models import utcnow
from store._runs import RunRow
from turn import new_session

POSTGRES_ONLY = [pytest.param("postgres", marks=pytest.mark.postgres)]


def dispatcher(server: Server) -> RunDispatcher:
    runs: RunDispatcher = server.app.state["services"].runs
    return runs


async def until_done(server: Server, run_ids: list[str], within_s: float = 10) -> list[str]:
    """The runs' statuses once all finished (or as they are after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        statuses = [
            (await server.client.get(f"/v1/runs/{run_id}", headers=server.auth())).json()["status"]
            for run_id in run_ids
        ]
        if all(s in ("completed", "failed") for s in statuses) or time.monotonic() > deadline:
            return statuses
        await asyncio.sleep(0.05)


async def queue_elsewhere(store: Store, agent: str = "coach") -> str:
    """Queue a run as another worker's ``RunDispatcher.submit`` does: its own store."""
    session_id = await new_session(
        store, org_id="acme", user_id="alice", first_message="hi", agent=agent
    )
    run, _ = await store.runs.create(
        id=f"run_{uuid.uuid4().hex}", org_id="acme", agent=agent, agent_version=1,
        session_id=session_id, user_id="alice", role="owner", trigger="api", task="hi",
        context=None, idempotency_key=None,
    )  # fmt: skip
    return run.id


@pytest.mark.parametrize("db_url", POSTGRES_ONLY, indirect=True)
async def test_a_run_queued_by_another_worker_starts_here_with_no_poll(
    make_server: ServerFactory,
) -> None:
    """Worker A polls once an hour and has room for one run at a time; worker B (its own
    store, no dispatcher) queues three: A starts each at once, the first woken by B's
    NOTIFY, the others by the run before them ending."""
    async with make_server(quick()) as server:
        await queue_a_run(server)  # the agent, and a first run (from A itself)
        runs = dispatcher(server)
        await runs.stop()
        runs.poll_s, runs.per_worker = 3600.0, 1
        runs.start()
        await asyncio.sleep(0.2)  # the loop's first round is over: now it waits an hour
        other = Store(server.settings.database_url)
        try:
            ids = [await queue_elsewhere(other) for _ in range(3)]
        finally:
            await other.close()
        statuses = await until_done(server, ids)

    assert statuses == ["completed"] * 3


async def test_a_dispatcher_fills_its_room_when_other_workers_win_some_claims(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        runs = dispatcher(server)
        await runs.stop()  # this test dispatches by hand
        runs.per_agent = 10
        first = await queue_a_run(server)
        ids = [first] + [await queue_elsewhere(server.store) for _ in range(5)]
        taken = False

        async def take_two() -> None:
            """Another worker claims the two oldest runs after our queue read."""
            nonlocal taken
            if not taken:
                taken = True
                async with server.store.db.write() as conn:
                    await conn.execute(
                        update(RunRow)
                        .where(RunRow.id.in_(ids[:2]))
                        .values(turn_id=RunRow.id, claimed_at=utcnow())
                    )

        read, read_all = server.store.runs.queued, server.store.runs.dispatchable

        async def raced(limit: int) -> list[RunRecord]:
            found = await read(limit)
            await take_two()
            return found

        reads = 0

        async def raced_all(limit: int) -> tuple[list[RunRecord], dict[Any, int]]:
            nonlocal reads
            reads += 1
            found = await read_all(limit)
            await take_two()
            return found

        server.store.runs.queued = raced  # type: ignore[method-assign]
        server.store.runs.dispatchable = raced_all  # type: ignore[method-assign]
        started = await runs.dispatch()
        await until_done(server, started)

    assert sorted(started) == sorted(ids[2:6])  # its whole room (4), not the 2 left of a round
    assert reads == 1  # the lost claims went on to the next runs of that read, not a new one


async def test_a_run_that_fails_to_start_stays_queued_unclaimed(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        runs = dispatcher(server)
        await runs.stop()
        run_id = await queue_a_run(server)
        resolve = runs._models.resolve_offered

        async def broken(**_: Any) -> Any:
            raise RuntimeError("injected")

        runs._models.resolve_offered = broken  # type: ignore[method-assign]
        failed = await runs.dispatch()
        row = await server.store.runs.get("acme", run_id)
        waiting = await server.store.runs.queued(limit=10)
        runs._models.resolve_offered = resolve  # type: ignore[method-assign]
        again = await runs.dispatch()  # at once: it waits RETRY_S, not retried every round

    assert failed == [] and again == []
    assert row is not None and (row.status, row.turn_id, row.claimed_at) == ("queued", None, None)
    assert [run.id for run in waiting] == [run_id]


async def test_schedules_are_read_on_the_poll_not_on_every_wake(
    make_server: ServerFactory,
) -> None:
    """Runs queued and ending wake the dispatcher several times; the schedules (every
    agent of every org) are read once per ``poll_s`` all the same."""
    async with make_server(quick()) as server:
        runs = dispatcher(server)
        await runs.stop()
        runs.poll_s = 3600.0
        fire, fired = runs.fire_schedules, 0

        async def counted(now: Any = None) -> list[str]:
            nonlocal fired
            fired += 1
            return await fire(now)

        runs.fire_schedules = counted  # type: ignore[method-assign]
        runs.start()
        ids = [await queue_a_run(server)] + [await queue_elsewhere(server.store) for _ in range(2)]
        statuses = await until_done(server, ids)

    assert statuses == ["completed"] * 3
    assert fired == 1
