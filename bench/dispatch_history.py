"""Do the run dispatcher's queries cost more the more runs have finished?

``python bench/dispatch_history.py --help`` for the flags. Two databases side by side per
dialect: **empty** (the baseline: only what is waiting and running) and **loaded** (the
same, plus ``--sizes`` finished runs, each with its session and its ended turn, one in 50
cancelled while it waited, bulk-inserted: ``executemany`` on SQLite, ``COPY`` on
PostgreSQL, then ``ANALYZE`` on PostgreSQL; SQLite plans with no statistics, as it runs).
Both hold the same 20 queued runs (5 orgs), 4 runs running on one worker and the 5 orgs'
agents. At each size the queries a dispatcher and a keeper send each round are timed on
both databases in turn (``--rounds`` rounds of ``--reps`` calls each), so the ratio
loaded / empty is measured under the same machine load:

- ``runs.queued``: the unclaimed runs, oldest first (and their agents' pauses);
- ``runs.running_counts``: running runs per (org, agent);
- ``leases.holders``: the other workers holding running turns;
- ``leases.claim_expired``: the keeper's takeover query (nothing to take over);
- ``claim + open turn``: claiming a queued run and opening its turn (one transaction
  here; the older code's ``runs.claim`` then ``log.open_turn``), a fresh run each call.

Run it with another checkout's code first on ``PYTHONPATH`` (e.g. ``/work/main/src``) to
measure that code the same way. Issue 29 asks for at most 1.5x at 200,000 finished runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import create_engine, insert, text, update

from bosun.migrate import upgrade
from events import SessionStarted, UserMessage
from store import Store
from store._models import SessionRow, TurnRow
from store._runs import RunRow

TARGET = 1.5
ORGS = [f"org-{i}" for i in range(5)]
QUEUED, RUNNING, CHUNK = 20, 4, 20_000
CANCELLED = 50  # one finished run in 50 was cancelled while it waited
WORKER, OTHER = "bench-worker", "bench-other"
QUERIES = (
    "runs.queued",
    "runs.running_counts",
    "leases.holders",
    "leases.claim_expired",
    "claim + open turn",
)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Db:
    """One benchmark database: its store, and how to bulk-load history into it."""

    url: str
    store: Store
    loaded: int = 0
    made: list[str] = field(default_factory=list)  # PostgreSQL databases to drop


async def queue_run(store: Store, org: str) -> Any:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=org, user_id="ada", session_id=session_id, title="t")
    run, _ = await store.runs.create(
        id=f"run_{uuid.uuid4().hex}", org_id=org, agent="coach", agent_version=1,
        session_id=session_id, user_id="ada", role="staff", trigger="api", task="t",
        context=None, idempotency_key=None,
    )  # fmt: skip
    return run


async def claim(store: Store, run: Any) -> None:
    """Claim ``run`` and open its turn as this code's dispatcher does."""
    turn_id = str(uuid.uuid4())
    events = [
        SessionStarted(session_id=run.session_id, turn_id=turn_id),
        UserMessage(message_id=f"msg_{turn_id}", text=run.task),
    ]
    held = {"worker_id": WORKER, "lease_until": now() + timedelta(hours=1), "job": {}}
    if hasattr(store.runs, "open_claimed"):  # the claim opens the turn, one transaction
        from store import TurnOpening  # absent from older code

        opening = TurnOpening(
            session_id=run.session_id, turn_id=turn_id, trace_id="bench", events=events, **held
        )
        await store.runs.open_claimed(run.id, opening)
        return
    assert await store.runs.claim(run, turn_id)  # the older code: claim, then open
    await store.log.open_turn(run.session_id, events, turn_id=turn_id, trace_id="bench", **held)


async def finish(store: Store) -> None:
    """End every running turn but the first ``RUNNING`` (the claims timed)."""
    async with store.db.write() as conn:
        kept = (
            await conn.execute(
                text("SELECT id FROM turns WHERE status = 'running' ORDER BY started_at LIMIT :n"),
                {"n": RUNNING},
            )
        ).scalars()
        await conn.execute(
            update(TurnRow)
            .where(TurnRow.status == "running", TurnRow.id.not_in(list(kept)))
            .values(status="completed", finished_at=now(), worker_id=None, lease_until=None)
        )


async def seed(store: Store) -> None:
    """The agents, ``RUNNING`` runs running on ``WORKER`` and ``QUEUED`` waiting."""
    for org in ORGS:
        await store.agents.save(org, "coach", {"name": "Coach"}, by="bench", create=True)
    for i in range(RUNNING):
        await claim(store, await queue_run(store, ORGS[i % len(ORGS)]))
    for i in range(QUEUED):
        await queue_run(store, ORGS[i % len(ORGS)])


def history_rows(start: int, n: int) -> tuple[list[dict[str, Any]], ...]:
    """``n`` finished runs (sessions, turns, runs), older than anything waiting."""
    base = now() - timedelta(days=30)
    sessions, turns, runs = [], [], []
    statuses = ("completed", "completed", "completed", "failed", "cancelled")
    for i in range(start, start + n):
        at = base + timedelta(seconds=i)
        org, sid, tid = ORGS[i % len(ORGS)], f"hs-{i}", f"ht-{i}"
        sessions.append({"id": sid, "org_id": org, "user_id": "ada", "title": "t",
                         "agent": "coach", "last_seq": 0, "created_at": at,
                         "updated_at": at})  # fmt: skip
        turns.append({"id": tid, "session_id": sid, "trace_id": "h", "epoch": 0,
                      "status": statuses[i % len(statuses)], "started_at": at,
                      "finished_at": at + timedelta(seconds=2)})  # fmt: skip
        runs.append({"id": f"run_h{i}", "org_id": org, "agent": "coach", "agent_version": 1,
                     "session_id": sid, "turn_id": tid, "user_id": "ada", "role": "staff",
                     "trigger": "api", "task": "t", "created_at": at, "claimed_at": at,
                     "cancelled_at": None})  # fmt: skip
        if i % CANCELLED == 0:  # cancelled while queued: no turn, never claimed
            runs[-1] |= {"turn_id": None, "claimed_at": None, "cancelled_at": at}
    return sessions, turns, runs


async def load(db: Db, upto: int) -> float:
    """Bulk-insert finished runs until ``upto`` are stored; the seconds it took."""
    started = time.perf_counter()
    tables = (SessionRow.__table__, TurnRow.__table__, RunRow.__table__)
    while db.loaded < upto:
        n = min(CHUNK, upto - db.loaded)
        chunks = history_rows(db.loaded, n)
        if db.url.startswith("postgresql"):
            conn = await asyncpg.connect(db.url.replace("+asyncpg", ""))
            try:
                for table, rows in zip(tables, chunks, strict=True):
                    columns = list(rows[0])
                    records = [tuple(row[c] for c in columns) for row in rows]
                    await conn.copy_records_to_table(table.name, records=records, columns=columns)
            finally:
                await conn.close()
        else:
            engine = create_engine(db.url.replace("+aiosqlite", ""))
            with engine.begin() as sync:
                for table, rows in zip(tables, chunks, strict=True):
                    sync.execute(insert(table), rows)
            with engine.connect() as sync:  # not the timed writes' to move the load's WAL
                sync.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            engine.dispose()
        db.loaded += n
    if db.url.startswith("postgresql"):
        async with db.store.db.write() as conn:
            await conn.execute(text("ANALYZE"))
    return time.perf_counter() - started


def reads(store: Store) -> dict[str, Callable[[], Awaitable[object]]]:
    return {
        "runs.queued": lambda: store.runs.queued(limit=100),
        "runs.running_counts": store.runs.running_counts,
        "leases.holders": lambda: store.leases.holders(OTHER),
        "leases.claim_expired": lambda: store.leases.claim_expired(OTHER, 15.0),
    }


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def measure(pair: tuple[Db, Db], rounds: int, reps: int) -> list[dict[str, list[float]]]:
    """Per database (empty, loaded): each query's timings in ms, the two interleaved."""
    samples: list[dict[str, list[float]]] = [{q: [] for q in QUERIES} for _ in pair]
    for _ in range(rounds):
        for name in QUERIES[:-1]:
            for _ in range(reps):
                for db, got in zip(pair, samples, strict=True):
                    got[name].append(await timed(reads(db.store)[name]))
        pools = [[await queue_run(db.store, ORGS[i % 5]) for i in range(reps)] for db in pair]
        for i in range(reps):
            for db, pool, got in zip(pair, pools, samples, strict=True):
                got[QUERIES[-1]].append(await timed(lambda: claim(db.store, pool[i])))  # noqa: B023
        for db in pair:
            await finish(db.store)
    return samples


async def open_db(kind: str, admin: str | None, tmp: Path, name: str) -> Db:
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp / (name + '.db')}"
        made: list[str] = []
    else:
        assert admin is not None
        database = f"bosun_bench_{name}_{os.getpid()}"
        conn = await asyncpg.connect(admin.replace("+asyncpg", ""))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{database}"')
            await conn.execute(f'CREATE DATABASE "{database}"')
        finally:
            await conn.close()
        url, made = admin.rsplit("/", 1)[0] + f"/{database}", [database]
    store = Store(url)
    await upgrade(store)
    await seed(store)
    return Db(url=url, store=store, made=made)


async def close_db(db: Db, admin: str | None) -> None:
    await db.store.close()
    if db.made and admin is not None:
        conn = await asyncpg.connect(admin.replace("+asyncpg", ""))
        try:
            for database in db.made:
                await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await conn.close()


async def bench(kind: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One dialect: each size's medians (empty and loaded) and ratios, per query."""
    admin = args.postgres if kind == "postgresql" else None
    pair = (
        await open_db(kind, admin, tmp, "empty"),
        await open_db(kind, admin, tmp, "loaded"),
    )
    if admin is not None:
        for db in pair:
            await load(db, 0)  # ANALYZE the seeded rows, so both start alike
    sizes: dict[int, Any] = {}
    try:
        for size in args.sizes:
            load_s = await load(pair[1], size)
            await measure(pair, 1, 3)  # warm-up: caches, connections, prepared statements
            empty, loaded = await measure(pair, args.rounds, args.reps)
            sizes[size] = {
                "load_s": round(load_s, 1),
                "loadavg": os.getloadavg()[0],
                "queries": {
                    q: {
                        "empty_ms": round(statistics.median(empty[q]), 3),
                        "loaded_ms": round(statistics.median(loaded[q]), 3),
                        "ratio": round(
                            statistics.median(loaded[q]) / statistics.median(empty[q]), 2
                        ),
                    }
                    for q in QUERIES
                },
            }
            print_size(kind, size, sizes[size])
    finally:
        for db in pair:
            await close_db(db, admin)
    return sizes


def medians(empty: list[float], loaded: list[float]) -> dict[str, float]:
    low, high = statistics.median(empty), statistics.median(loaded)
    return {"empty_ms": round(low, 3), "loaded_ms": round(high, 3), "ratio": round(high / low, 2)}


def print_size(kind: str, size: int, result: dict[str, Any]) -> None:
    print(
        f"{kind:10} {size:>8,} finished runs (loaded in {result['load_s']} s, "
        f"load avg {result['loadavg']:.2f})"
    )
    for name, row in result["queries"].items():
        print(
            f"  {name:22} empty {row['empty_ms']:7.3f} ms   loaded {row['loaded_ms']:7.3f} ms"
            f"   ratio {row['ratio']:5.2f}x"
        )


def verdict(results: dict[str, dict[int, Any]]) -> bool:
    """Whether every query at the largest size stays within ``TARGET`` of empty."""
    met = True
    for kind, sizes in results.items():
        largest = max(sizes)
        worst = max(sizes[largest]["queries"].items(), key=lambda item: item[1]["ratio"])
        ok = worst[1]["ratio"] <= TARGET
        met &= ok
        print(
            f"{kind}: at {largest:,} the worst ratio is {worst[1]['ratio']}x ({worst[0]}): "
            f"{'within' if ok else 'NOT within'} {TARGET}x"
        )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[0, 20_000, 200_000])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--postgres", default=os.environ.get("BOSUN_TEST_POSTGRES_URL"),
                        help="an admin URL (postgresql+asyncpg://...): PostgreSQL too")  # fmt: skip
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()
    kinds = ["sqlite"] + ([] if args.sqlite_only or not args.postgres else ["postgresql"])
    results: dict[str, dict[int, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:
        for kind in kinds:
            results[kind] = asyncio.run(bench(kind, args, Path(tmp)))
    met = verdict(results)
    print(json.dumps({"bench": "dispatch_history", "target": TARGET, "met": met,
                      "results": results}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
