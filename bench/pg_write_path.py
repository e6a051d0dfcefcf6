"""What a short background run costs the database: round trips, transactions, turn time.

In one process, for SQLite and for PostgreSQL: the real app (``build_app``) on uvicorn over
a fresh database, a scripted planner that answers simply and then "Done.", and ``--runs``
runs one after the other (each triggered over HTTP, waited for by reading the database
directly). Two passes on PostgreSQL: one through the counting proxy (``_pgtrace``: round
trips, ``BEGIN``s, NOTIFYs and the statement kinds per run) and one straight to the server
for the turn time (the turn row's ``finished_at - started_at``, median), printed with its
ratio to SQLite's in the same run. To compare with another checkout, run the same file
with ``PYTHONPATH=<that checkout>/src``.

    PYTHONPATH=src .venv/bin/python bench/pg_write_path.py --runs 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvicorn

from _pgtrace import WireCounter, WireCounts
from bosun.app import build_app
from bosun.log import configure_logging
from bosun.migrate import upgrade
from bosun.settings import Settings
from bosun_demo import toolset as demo_toolset
from providers import FunctionModel, ModelRequest, Reply
from store import Store
from stream import TokenConfig, mint_token
from turn import TurnModels

SECRET = "bench-secret-" + "x" * 32
ADMIN = os.environ.get(
    "BOSUN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres:postgres@127.0.0.1:5432/postgres"
)


def _models() -> TurnModels:
    async def planner(request: ModelRequest) -> Reply:
        return Reply(text=json.dumps({"strategy": "simple", "reasoning": "r"}))

    async def executor(request: ModelRequest) -> Reply:
        return Reply(text="Done.")

    return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _runs(url: str, runs: int, wire: WireCounter | None) -> tuple[list[float], list[Any]]:
    """Serve over ``url`` (through ``wire`` when given) and make ``runs`` short runs: turn
    times (ms) and wire counts."""
    settings = Settings(
        database_url=wire.url(url) if wire else url,
        jwt_secret=SECRET,
        limits={"requests_per_minute": 0},  # type: ignore[arg-type]
        toolsets=["bosun_demo:toolset"],
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(settings, models=_models()), log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
        await asyncio.sleep(0.01)
    org = f"bench-{uuid.uuid4().hex[:8]}"  # a pass of its own on a shared database
    token = mint_token(TokenConfig(SECRET), user="u", org=org, role="owner", ttl_s=3600)
    direct = await _direct(url)
    times, counts = [], []
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        ) as client:
            agent = {"handle": "bench", "name": "Bench", "runs_per_minute": 60}
            made = await client.post("/v1/agents", json=agent)
            assert made.status_code == 201, made.text
            for _ in range(runs):
                before = wire.counts() if wire else None
                queued = await client.post("/v1/agents/bench/runs", json={"task": "Hi"})
                took = await _finished(direct, queued.json()["run_id"])
                times.append(took)
                if wire and before:
                    counts.append(wire.counts() - before)
    finally:
        await direct.close()
        server.should_exit = True
        await serving
        sock.close()
    return times, counts


async def _direct(url: str) -> Any:
    if url.startswith("sqlite"):
        import aiosqlite

        return await aiosqlite.connect(url.removeprefix("sqlite+aiosqlite:///"))
    return await asyncpg.connect(_dsn(url))


_TURN = (
    "select t.status, t.started_at, t.finished_at from runs r join turns t on t.id = r.turn_id "
    "where r.id = {p}"
)


async def _finished(direct: Any, run_id: str) -> float:
    """Wait for the run's turn to end (read past the proxy); its duration in ms."""
    while True:
        if isinstance(direct, asyncpg.Connection):
            row = await direct.fetchrow(_TURN.format(p="$1"), run_id)
        else:
            async with direct.execute(_TURN.format(p="?"), (run_id,)) as cursor:
                row = await cursor.fetchone()
        if row is not None and row[0] not in ("running",):
            assert row[0] == "completed", row
            start, end = row[1], row[2]
            if isinstance(start, str):
                from datetime import datetime

                start, end = datetime.fromisoformat(start), datetime.fromisoformat(end)
            return (end - start).total_seconds() * 1000
        await asyncio.sleep(0.002)


async def _postgres() -> tuple[str, Any]:
    admin = await asyncpg.connect(_dsn(ADMIN))
    name = f"bosun_bench_{uuid.uuid4().hex[:10]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rsplit("/", 1)[0] + "/" + name
    return url, (admin, name)


async def _migrated(url: str) -> None:
    store = Store(url)
    try:
        await upgrade(store, toolsets=(demo_toolset(),))
    finally:
        await store.close()


def _summary(counts: list[WireCounts]) -> dict[str, Any]:
    steady = counts[1:] or counts
    kinds: dict[str, float] = {}
    for c in steady:
        for kind, n in c.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n / len(steady)
    return {
        "round_trips": statistics.median(c.round_trips for c in steady),
        "transactions": statistics.median(c.transactions for c in steady),
        "notifies": statistics.median(c.notifies for c in steady),
        "kinds": {k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
    }


async def main(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        sqlite = f"sqlite+aiosqlite:///{Path(folder) / 'bench.db'}"
        await _migrated(sqlite)
        sqlite_ms, _ = await _runs(sqlite, runs, None)
    url, (admin, name) = await _postgres()
    try:
        await _migrated(url)
        async with WireCounter.for_url(url) as wire:
            _, counts = await _runs(url, max(4, runs // 4), wire)
        pg_ms, _ = await _runs(url, runs, None)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    sqlite_p50, pg_p50 = statistics.median(sqlite_ms), statistics.median(pg_ms)
    return {
        "turn_ms_p50": {"sqlite": round(sqlite_p50, 2), "postgres": round(pg_p50, 2)},
        "postgres_over_sqlite": round(pg_p50 / sqlite_p50, 2),
        "postgres_per_run": _summary(counts),
        "loadavg": os.getloadavg(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per database (at most 60)")
    configure_logging(level="warning")  # stdout carries the JSON only
    print(json.dumps(asyncio.run(main(parser.parse_args().runs)), indent=1))
