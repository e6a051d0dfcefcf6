"""What a short background run costs PostgreSQL, counted on the wire (bench/_pgtrace.py)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from conftest import ServerFactory
from pg_testing import dsn
from providers import FunctionModel, ModelRequest, Reply
from turn import TurnModels

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from _pgtrace import WireCounter, WireCounts

pytestmark = pytest.mark.postgres


@pytest.fixture
async def wire(postgres_url: str) -> AsyncIterator[WireCounter]:
    async with WireCounter.for_url(postgres_url) as counter:
        yield counter


@pytest.fixture
def db_url(wire: WireCounter, postgres_url: str) -> str:
    """The test's database, through the counting proxy."""
    return wire.url(postgres_url)


def short_run() -> TurnModels:
    """A planner that answers simply, then the answer: the shortest background run."""

    async def planner(request: ModelRequest) -> Reply:
        return Reply(text=json.dumps({"strategy": "simple", "reasoning": "r"}))

    async def executor(request: ModelRequest) -> Reply:
        return Reply(text="Done.")

    return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


async def finished(conn: asyncpg.Connection, run_id: str) -> str:
    """Wait for the run's turn to end, reading past the proxy (the wait costs no count)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        status = await conn.fetchval(
            "select t.status from runs r join turns t on t.id = r.turn_id where r.id = $1", run_id
        )
        if status not in (None, "running"):
            return str(status)
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id!r} did not finish")


async def test_a_short_run_costs_few_round_trips(
    make_server: ServerFactory, wire: WireCounter, postgres_url: str
) -> None:
    """A planner call and an answer: the turn's writes are single statements (no
    ``BEGIN``/``COMMIT`` of their own) and reads need no transaction. Before: about 100
    round trips and 26 transactions a run; the rest now is mostly the dispatcher's polling
    and claim, the trigger's and the run's notice."""
    direct = await asyncpg.connect(dsn(postgres_url))
    try:
        async with make_server(short_run()) as server:
            made = await server.client.post(
                "/v1/agents",
                json={"handle": "bench", "name": "Bench", "runs_per_minute": 60},
                headers=server.auth(role="owner"),
            )
            assert made.status_code == 201, made.text
            per_run: list[WireCounts] = []
            for _ in range(4):
                before = wire.counts()
                queued = await server.client.post(
                    "/v1/agents/bench/runs", json={"task": "Hi"}, headers=server.auth(role="staff")
                )
                assert queued.status_code == 202, queued.text
                assert await finished(direct, queued.json()["run_id"]) == "completed"
                per_run.append(wire.counts() - before)
    finally:
        await direct.close()
    steady = sorted(per_run[1:], key=lambda c: c.round_trips)[1]  # the median of the last 3

    # The turn: opened, two appends (one closing it), each one statement with its NOTIFY;
    # so is the run's notice (with its webhook deliveries).
    # the claim opens the turn (WITH UPDATE runs), then two appends
    assert steady.kinds["WITH UPDATE runs"] == 1, steady.kinds
    assert steady.kinds["WITH UPDATE sessions"] == 2, steady.kinds
    written_alone = {"UPDATE sessions", "INSERT events", "INSERT turns", "INSERT notices"}
    assert not written_alone & set(steady.kinds), steady.kinds
    assert steady.kinds["SELECT pg_notify"] <= 1, steady.kinds  # the queued run wakes workers
    # The self block's subscriptions: read by the first run, remembered by the next ones.
    assert per_run[0].kinds["SELECT agent_subscriptions"] == 1, per_run[0].kinds
    assert steady.kinds["SELECT agent_subscriptions"] == 0, steady.kinds
    assert steady.transactions <= 4, steady
    assert steady.round_trips <= 30, steady.kinds  # issue 29: at most 30 (about 100 before)
