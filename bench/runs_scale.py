"""Background runs per second: SQLite with 1 worker, PostgreSQL with 1 and 2 workers.

Each configuration is real ``bosun serve --dev`` processes (a scripted model that answers
at once: the planner says ``simple``, the answer is ``Done.``) over a fresh database; on
PostgreSQL every worker's connections go through a counting proxy (``_pgwire.py``).
Phases, measured from outside (HTTP and the database):

1. **trickle**: runs queued one at a time, ``--trickle-gap-ms`` apart and each once the
   one before has finished, so capacity is free: queue-to-start while nothing waits;
2. **burst**: ``--runs`` runs queued as fast as the client can
   (``POST /v1/agents/{handle}/runs``, spread over the workers and ``AGENTS`` agents so the
   per-agent bound does not decide), then waited for: runs/s = runs / (first queue to
   last finish), queue-to-start and queue-to-finish p50/p99 and the turn itself (from the
   runs API's ``created_at``, ``started_at``, ``finished_at``), the workers' and
   PostgreSQL's CPU per run (``/proc``), round trips, transactions and NOTIFYs per run;
3. **baseline**: the same turn as chats (``POST /v1/chat``, ``BASELINE_CONCURRENCY`` at
   a time per worker, the dispatcher's room): turns/s the machine gives this turn through
   the chat API, so runs/s reads as a share of it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from _harness import HOST, free_port, process_cpu_s, run_on_loop, stop_process, wait_healthy
from _pgwire import PgCounts
from bosun.settings import DEV_JWT_SECRET
from stream import TokenConfig, mint_token

AGENTS = 8  # at most 2 of an agent's runs run at once, across workers (fleet.RunDispatcher)
POSTERS_PER_WORKER = 4  # requests in flight per worker while queueing the burst
BASELINE_CONCURRENCY = 4  # chats at once per worker: the dispatcher's room per worker
PER_WORKER_TARGET = 25.0  # runs/s per worker (issue 29)
SCALE_TARGET = 1.8  # PostgreSQL 2 workers / 1 worker
START_P50_TARGET_MS = 50.0  # queue-to-start p50 while capacity is free
ROUND_TRIPS_TARGET = 30.0  # per short run on PostgreSQL
FINISH_TIMEOUT_S = 300.0
CEILING_CONNECTIONS = 8  # committing at once in the commit ceiling
SRC = Path(__file__).resolve().parents[1] / "src"
PG_URL = "postgresql+asyncpg://postgres:postgres@127.0.0.1:5432/postgres"  # as tests/conftest.py
SCRIPT = """
repeat: true
steps:
  - match: "You are the planner"
    text: '{"strategy": "simple", "reasoning": "r"}'
  - text: "Done."
"""
FINISHED = (
    "select count(*) from runs r join turns t on t.id = r.turn_id where t.finished_at is not null"
)
BACKENDS = "select pid from pg_stat_activity where datname = $1 and backend_type = 'client backend'"


@dataclass(frozen=True, slots=True)
class Config:
    db: str  # "sqlite" or "postgres"
    workers: int

    @property
    def name(self) -> str:
        return f"{'pg' if self.db == 'postgres' else 'sqlite'}-{self.workers}"


CONFIGS = (Config("sqlite", 1), Config("postgres", 1), Config("postgres", 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    runs: int
    trickle: int
    trickle_gap_s: float
    baseline: int
    postgres: str | None
    proxy: bool = True


@dataclass(frozen=True, slots=True)
class Run:
    created: datetime
    started: datetime
    finished: datetime
    status: str


@dataclass(kw_only=True)
class Cluster:
    """A configuration's running workers and what measures them from outside."""

    config: Config
    urls: list[str]
    pids: list[int]
    finished: Callable[[], Awaitable[int]]  # runs whose turn has finished, in the database
    db_cpu: Callable[[], Awaitable[float | None]]  # PostgreSQL backends' CPU s, so far
    wire: Callable[[], PgCounts | None]  # the proxy's counts, so far
    proxy_pid: int | None = None
    backends: Backends | None = None
    queued: int = 0  # runs queued so far (warm-up included)
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    def cpu_s(self) -> float:
        return sum(process_cpu_s(pid) or 0.0 for pid in self.pids)

    def bench_cpu_s(self) -> tuple[float, float | None]:
        """The bench's own CPU: this client's, the counting proxy's (if any)."""
        proxy = process_cpu_s(self.proxy_pid) if self.proxy_pid else None
        return process_cpu_s(os.getpid()) or 0.0, proxy


# --- the workers and their database ---------------------------------------------------


def _bosun() -> str:
    return str(Path(sys.executable).with_name("bosun"))


def _env(database_url: str) -> dict[str, str]:
    """The workers' environment: this checkout's code first (they run in a temporary
    directory, where a relative ``PYTHONPATH=src`` would find nothing), no per-user turn
    limit (the baseline's chats would stop at 20 a minute)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    path = [
        str(SRC),
        *(str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p),
    ]
    return {**env, "PYTHONPATH": os.pathsep.join(path), "BOSUN_DATABASE_URL": database_url,
            "BOSUN_LOG_LEVEL": "warning", "BOSUN_LIMITS__REQUESTS_PER_MINUTE": "0"}  # fmt: skip


def _migrate(workdir: Path, database_url: str) -> None:
    command = [_bosun(), "migrate", "--toolset", "demo"]
    subprocess.run(command, env=_env(database_url), cwd=workdir, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _spawn(workdir: Path, database_url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """One worker: ``bosun serve --dev`` with the scripted model, its output in ``log``."""
    command = [
        _bosun(), "serve", "--dev", "--no-migrate", "--toolset", "demo",
        "--port", str(port), "--model", f"scripted:{workdir / 'script.yaml'}",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=_env(database_url), cwd=workdir, stdout=out, stderr=out
        )


def _print_logs(workdir: Path) -> None:
    for log in sorted(workdir.glob("worker-*.log")):
        print(f"--- {log.name}\n{log.read_text()[-3000:]}", file=sys.stderr)


@contextlib.asynccontextmanager
async def _workers(
    workdir: Path, database_url: str, count: int
) -> AsyncIterator[list[tuple[str, int]]]:
    """``count`` ``bosun serve --dev`` processes over ``database_url``, started one after
    the other (the first makes the development keys the others read): (url, pid) each."""
    (workdir / "script.yaml").write_text(SCRIPT)
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        async with httpx.AsyncClient() as probe:
            for i in range(count):
                port = free_port()
                process = _spawn(workdir, database_url, port, workdir / f"worker-{i}.log")
                processes.append(process)
                urls.append(f"http://{HOST}:{port}")
                await wait_healthy(probe, urls[-1], process, f"worker {i}")
        yield [(url, p.pid) for url, p in zip(urls, processes, strict=True)]
    finally:
        for process in processes:
            stop_process(process)


@contextlib.contextmanager
def _proxy(host: str, port: int) -> Iterator[tuple[int, Callable[[], PgCounts], int]]:
    """The counting proxy in a process of its own (``_pgwire.py``): its port, and a
    function that reads its counts."""
    script = Path(__file__).with_name("_pgwire.py")
    process = subprocess.Popen(
        [sys.executable, str(script), host, str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def counts() -> PgCounts:
        stdin.write("\n")
        stdin.flush()
        return PgCounts(**json.loads(stdout.readline()))

    try:
        line = stdout.readline()
        assert line.startswith("port "), line
        yield int(line.split()[1]), counts, process.pid
    finally:
        stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        stop_process(process)  # type: ignore[arg-type]


class Backends:
    """PostgreSQL's CPU for one database: its client backends' CPU from ``/proc``, each
    from the first time it is seen (a backend gone before the end keeps its last reading)."""

    def __init__(self, admin: asyncpg.Connection, database: str) -> None:
        self._admin, self._database = admin, database
        self._seen: dict[int, tuple[float, float]] = {}  # pid -> (first, last) CPU s

    @property
    def seen(self) -> int:
        """How many backends (connections) the workers have had."""
        return len(self._seen)

    async def total(self) -> float | None:
        for pid in await self._admin.fetchval(f"select array({BACKENDS})", self._database):
            cpu = process_cpu_s(pid)
            if cpu is None:
                continue
            first = self._seen.get(pid, (cpu, cpu))[0]
            self._seen[pid] = (first, cpu)
        if not self._seen:
            return None
        return sum(last - first for first, last in self._seen.values())


@contextlib.asynccontextmanager
async def _sqlite_cluster(config: Config, workdir: Path) -> AsyncIterator[Cluster]:
    path = workdir / "bench.db"
    url = f"sqlite+aiosqlite:///{path}"
    await asyncio.to_thread(_migrate, workdir, url)
    async with _workers(workdir, url, config.workers) as workers:
        reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

        async def finished() -> int:
            return int(reader.execute(FINISHED).fetchone()[0])

        async def no_cpu() -> None:
            return None

        try:
            yield Cluster(
                config=config, urls=[u for u, _ in workers], pids=[p for _, p in workers],
                finished=finished, db_cpu=no_cpu, wire=lambda: None,
            )  # fmt: skip
        finally:
            reader.close()


@contextlib.asynccontextmanager
async def _postgres_cluster(
    config: Config, workdir: Path, admin_url: str, *, proxy: bool
) -> AsyncIterator[Cluster]:
    """A fresh database (dropped afterwards), migrated directly; the workers reach it
    through the counting proxy (unless ``proxy`` is off)."""
    admin_dsn = admin_url.replace("postgresql+asyncpg://", "postgresql://")
    parts = urlsplit(admin_dsn)
    database = f"bosun_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'create database "{database}"')
    try:
        direct = parts._replace(path=f"/{database}").geturl()
        url = f"postgresql+asyncpg://{direct.split('://', 1)[1]}"
        await asyncio.to_thread(_migrate, workdir, url)
        with contextlib.ExitStack() as stack:
            port, counts, proxy_pid = (
                stack.enter_context(_proxy(parts.hostname or HOST, parts.port or 5432))
                if proxy
                else (None, lambda: None, None)
            )
            if port is not None:
                credentials = parts.netloc.rpartition("@")[0]
                url = f"postgresql+asyncpg://{credentials}@{HOST}:{port}/{database}"
            monitor = await asyncpg.connect(direct)
            backends = Backends(admin, database)
            try:
                async with _workers(workdir, url, config.workers) as workers:

                    async def finished() -> int:
                        return int(await monitor.fetchval(FINISHED))

                    yield Cluster(
                        config=config, urls=[u for u, _ in workers],
                        pids=[p for _, p in workers], finished=finished,
                        db_cpu=backends.total, wire=counts, proxy_pid=proxy_pid,
                        backends=backends,
                    )  # fmt: skip
            finally:
                await monitor.close()
    finally:
        await admin.execute(f'drop database if exists "{database}" with (force)')
        await admin.close()


async def _commits(conns: Sequence[asyncpg.Connection], sql: str, seconds: float) -> float:
    """Commits/s of ``sql`` (one implicit transaction each) from ``conns`` at once."""
    deadline, done = time.monotonic() + seconds, 0

    async def loop(conn: asyncpg.Connection) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await conn.execute(sql)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    return round(done / (time.perf_counter() - start))


async def commit_ceiling(admin_url: str, seconds: float = 2.0) -> dict[str, float]:
    """Commits/s this PostgreSQL takes from ``CEILING_CONNECTIONS`` connections at once, a
    row each, without and with a NOTIFY: PostgreSQL serialises the commits of notifying
    transactions (a global lock held through the commit's WAL flush), so that is where
    many workers' notifying appends meet first."""
    admin_dsn = admin_url.replace("postgresql+asyncpg://", "postgresql://")
    database = f"bosun_ceiling_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'create database "{database}"')
    try:
        dsn = urlsplit(admin_dsn)._replace(path=f"/{database}").geturl()
        conns = [await asyncpg.connect(dsn) for _ in range(CEILING_CONNECTIONS)]
        try:
            await conns[0].execute("create table t (n int)")
            plain = await _commits(conns, "insert into t values (1)", seconds)
            notify = await _commits(conns, "insert into t values (1); notify bench", seconds)
        finally:
            for conn in conns:
                await conn.close()
    finally:
        await admin.execute(f'drop database if exists "{database}" with (force)')
        await admin.close()
    return {"commits_per_s": plain, "notifying_commits_per_s": notify}


# --- the load -------------------------------------------------------------------------


def _headers() -> dict[str, str]:
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner",
                       ttl_s=3600)  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


def agent(i: int) -> str:
    return f"bench{i % AGENTS}"


async def _queue_one(cluster: Cluster, i: int) -> str:
    client = cluster.clients[i % len(cluster.clients)]
    response = await client.post(f"/v1/agents/{agent(i)}/runs", json={"task": f"Bench task {i}"})
    assert response.status_code == 202, response.text
    cluster.queued += 1
    return str(response.json()["run_id"])


async def queue_burst(cluster: Cluster, count: int) -> list[str]:
    """Queue ``count`` runs as fast as the client can, ``POSTERS_PER_WORKER`` requests in
    flight per worker."""
    ids: list[str] = []
    todo = iter(range(count))

    async def poster() -> None:
        for i in todo:
            ids.append(await _queue_one(cluster, i))

    await asyncio.gather(*(poster() for _ in range(POSTERS_PER_WORKER * len(cluster.clients))))
    return ids


async def queue_trickle(cluster: Cluster, count: int, gap_s: float) -> list[str]:
    """Queue ``count`` runs one at a time, ``gap_s`` apart (start to start) and each once
    the one before has finished, so there is always room for it, however slow the machine."""
    ids = []
    for i in range(count):
        queued = time.monotonic()
        ids.append(await _queue_one(cluster, i))
        await wait_finished(cluster, poll_s=0.01)
        await asyncio.sleep(max(0.0, queued + gap_s - time.monotonic()))
    return ids


async def wait_finished(cluster: Cluster, poll_s: float = 0.05) -> None:
    """Until every run queued so far has finished, reading the database (not the proxy)."""
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    for polls in itertools.count():
        if (done := await cluster.finished()) >= cluster.queued:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{cluster.config.name}: {done} of {cluster.queued} runs finished")
        if polls % 10 == 9:
            await cluster.db_cpu()  # note the backends the workers open meanwhile
        await asyncio.sleep(poll_s)


def _instant(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


async def fetch_runs(cluster: Cluster, ids: Sequence[str]) -> list[Run]:
    """The runs ``ids`` as the runs API lists them (each agent's history, paged)."""
    wanted, found = set(ids), {}
    client = cluster.clients[0]
    for handle in {agent(i) for i in range(AGENTS)}:
        params: dict[str, str | int] = {"limit": 200}
        while True:
            page = (await client.get(f"/v1/agents/{handle}/runs", params=params)).json()
            for row in page["runs"]:
                if row["run_id"] in wanted:
                    found[row["run_id"]] = Run(
                        _instant(row["created_at"]), _instant(row["started_at"]),
                        _instant(row["finished_at"]), row["status"],
                    )  # fmt: skip
            if page["next_before"] is None:
                break
            params["before"] = page["next_before"]
    missing = wanted - set(found)
    assert not missing, f"{len(missing)} runs missing from the runs API"
    return [found[i] for i in ids]


async def chats(cluster: Cluster, count: int) -> float:
    """``count`` chat turns of the same shape, ``BASELINE_CONCURRENCY`` at a time per
    worker; the wall time in seconds."""
    todo = iter(range(count))

    async def chatter(client: httpx.AsyncClient) -> None:
        for i in todo:
            body = {"message": f"Bench chat {i}", "agent": agent(i)}
            response = await client.post("/v1/chat", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "completed", response.text

    start = time.perf_counter()
    await asyncio.gather(
        *(chatter(c) for c in cluster.clients for _ in range(BASELINE_CONCURRENCY))
    )
    return time.perf_counter() - start


# --- figures --------------------------------------------------------------------------


def _ms(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` seconds, in ms."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def latencies(runs: Sequence[Run], prefix: str = "") -> dict[str, float]:
    to_start = [(r.started - r.created).total_seconds() for r in runs]
    to_finish = [(r.finished - r.created).total_seconds() for r in runs]
    turn = [(r.finished - r.started).total_seconds() for r in runs]
    return {
        f"{prefix}queue_to_start_p50_ms": _ms(to_start, 0.5),
        f"{prefix}queue_to_start_p99_ms": _ms(to_start, 0.99),
        f"{prefix}queue_to_finish_p50_ms": _ms(to_finish, 0.5),
        f"{prefix}queue_to_finish_p99_ms": _ms(to_finish, 0.99),
        f"{prefix}turn_p50_ms": _ms(turn, 0.5),
    }


@dataclass(frozen=True, slots=True)
class Meter:
    """The counters a phase is measured by, read at its start and end."""

    wire: PgCounts | None
    cpu_s: float
    db_cpu_s: float | None
    bench_cpu_s: tuple[float, float | None]  # client, proxy
    at: float

    @classmethod
    async def read(cls, cluster: Cluster) -> Meter:
        db_cpu_s = await cluster.db_cpu()
        return cls(cluster.wire(), cluster.cpu_s(), db_cpu_s, cluster.bench_cpu_s(),
                   time.perf_counter())  # fmt: skip

    def per(self, start: Meter, count: float, prefix: str) -> dict[str, float]:
        """What one of ``count`` runs (or turns, or seconds) cost between ``start`` and now."""
        cpu = {
            "worker": (start.cpu_s, self.cpu_s),
            "client": (start.bench_cpu_s[0], self.bench_cpu_s[0]),
            "proxy": (start.bench_cpu_s[1], self.bench_cpu_s[1]),
            "db": (start.db_cpu_s, self.db_cpu_s),
        }
        figures = {
            f"{prefix}{name}_cpu_ms": round((b - a) / count * 1000, 2)
            for name, (a, b) in cpu.items()
            if a is not None and b is not None
        }
        if self.wire is not None and start.wire is not None:
            for name, value in asdict(self.wire - start.wire).items():
                figures[f"{prefix}{name}"] = round(value / count, 2)
        return figures


async def _setup(cluster: Cluster) -> None:
    """The agents, then a warm-up (runs and chats on every worker) that is not measured."""
    for i in range(AGENTS):
        body = {"handle": agent(i), "name": f"Bench {i}", "runs_per_minute": 60}
        response = await cluster.clients[0].post("/v1/agents", json=body)
        assert response.status_code == 201, response.text
    await queue_burst(cluster, 2 * len(cluster.clients))
    await chats(cluster, 2 * len(cluster.clients))
    await wait_finished(cluster)


async def _idle(cluster: Cluster, seconds: float = 2.0) -> dict[str, float | None]:
    """What the workers cost with nothing to do (the dispatcher's and keeper's polls), per
    second."""
    start = await Meter.read(cluster)
    await asyncio.sleep(seconds)
    end = await Meter.read(cluster)
    return end.per(start, seconds, "idle_per_s_") if end.wire else {}


async def _burst(cluster: Cluster, count: int) -> dict[str, Any]:
    start, first = await Meter.read(cluster), datetime.now(UTC)
    ids = await queue_burst(cluster, count)
    queued_s = time.perf_counter() - start.at
    await wait_finished(cluster)
    end = await Meter.read(cluster)
    runs = await fetch_runs(cluster, ids)
    wall = (max(r.finished for r in runs) - first).total_seconds()
    workers = cluster.config.workers
    ours = end.cpu_s - start.cpu_s + (end.db_cpu_s or 0) - (start.db_cpu_s or 0)
    ours += sum(v or 0 for v in end.bench_cpu_s) - sum(v or 0 for v in start.bench_cpu_s)
    return {
        "runs_per_s": round(count / wall, 2),
        "runs_per_s_per_worker": round(count / wall / workers, 2),
        "wall_s": round(wall, 2),
        "queueing_s": round(queued_s, 2),
        "not_completed": sum(r.status != "completed" for r in runs),
        "cores_busy": round(ours / (end.at - start.at), 2),  # workers + PostgreSQL + bench
        **latencies(runs),
        **end.per(start, count, "per_run_"),
    }


@contextlib.contextmanager
def _phase(cluster: Cluster, name: str) -> Iterator[None]:
    """Say on stderr how long a phase took (the machine is shared: a slow one shows)."""
    start = time.perf_counter()
    yield
    took = time.perf_counter() - start
    print(f"  {cluster.config.name}: {name} {took:.1f} s", file=sys.stderr)


async def measure(cluster: Cluster, options: Options) -> dict[str, Any]:
    """The configuration's figures: trickle, idle, burst, baseline."""
    async with contextlib.AsyncExitStack() as stack:
        for url in cluster.urls:
            client = httpx.AsyncClient(base_url=url, headers=_headers(), timeout=120)
            cluster.clients.append(await stack.enter_async_context(client))
        with _phase(cluster, "set-up and warm-up"):
            await _setup(cluster)
        with _phase(cluster, "trickle"):
            ids = await queue_trickle(cluster, options.trickle, options.trickle_gap_s)
            trickle = latencies(await fetch_runs(cluster, ids), "trickle_")
        idle = await _idle(cluster)
        with _phase(cluster, "burst"):
            burst = await _burst(cluster, options.runs)
        with _phase(cluster, "baseline"):
            start = await Meter.read(cluster)
            wall = await chats(cluster, options.baseline)
            end = await Meter.read(cluster)
    turns_per_s = options.baseline / wall
    return {
        "config": cluster.config.name, "workers": cluster.config.workers, **burst,
        **trickle, **idle, "baseline_turns_per_s": round(turns_per_s, 2),
        "runs_to_baseline": round(burst["runs_per_s"] / turns_per_s, 3),
        **end.per(start, options.baseline, "per_chat_"),
        **({"db_backends": cluster.backends.seen} if cluster.backends else {}),
    }  # fmt: skip


async def run_config(config: Config, options: Options) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:
        workdir = Path(tmp)
        if config.db == "sqlite":
            cluster_cm = _sqlite_cluster(config, workdir)
        else:
            assert options.postgres is not None
            cluster_cm = _postgres_cluster(config, workdir, options.postgres, proxy=options.proxy)
        begun = time.perf_counter()
        async with cluster_cm as cluster:
            print(f"  {config.name}: database and workers up {time.perf_counter() - begun:.1f} s",
                  file=sys.stderr)  # fmt: skip
            try:
                row = await measure(cluster, options)
            except Exception:
                _print_logs(workdir)
                raise
            stopping = time.perf_counter()
        print(f"  {config.name}: stopped {time.perf_counter() - stopping:.1f} s", file=sys.stderr)
        return row


# --- the report -----------------------------------------------------------------------


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    return "-" if value is None else f"{value:g}"


COLUMNS = (
    ("runs/s", "runs_per_s"), ("/worker", "runs_per_s_per_worker"),
    ("q>start p50", "queue_to_start_p50_ms"), ("p99", "queue_to_start_p99_ms"),
    ("q>finish p50", "queue_to_finish_p50_ms"), ("p99", "queue_to_finish_p99_ms"),
    ("turn p50", "turn_p50_ms"), ("trickle q>start p50", "trickle_queue_to_start_p50_ms"),
)  # fmt: skip
COST_COLUMNS = (
    ("worker CPU ms", "per_run_worker_cpu_ms"), ("DB CPU ms", "per_run_db_cpu_ms"),
    ("client CPU ms", "per_run_client_cpu_ms"), ("proxy CPU ms", "per_run_proxy_cpu_ms"),
    ("round trips", "per_run_round_trips"), ("transactions", "per_run_transactions"),
    ("BEGIN..COMMIT", "per_run_explicit"),
    ("statements", "per_run_statements"), ("NOTIFYs", "per_run_notifies"),
    ("chat round trips", "per_chat_round_trips"),
)  # fmt: skip


def _table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> list[str]:
    widths = [max(len(title), 8) for title, _ in columns]
    lines = ["config   " + " ".join(t.rjust(w) for (t, _), w in zip(columns, widths, strict=True))]
    for row in rows:
        cells = (_cell(row, key).rjust(w) for (_, key), w in zip(columns, widths, strict=True))
        lines.append(f"{row['config']:8} " + " ".join(cells))
    return lines


def verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets against this run's figures."""
    by = {row["config"]: row for row in rows}
    out: dict[str, Any] = {}
    if "pg-1" in by and "pg-2" in by:
        out["pg_2_to_1"] = round(by["pg-2"]["runs_per_s"] / by["pg-1"]["runs_per_s"], 2)
        out["pg_2_to_1_met"] = out["pg_2_to_1"] >= SCALE_TARGET
        # What this machine allows at most: a second worker's runs cost the CPU the first
        # one's do (worker, PostgreSQL, bench), and there are only cpu_count cores to share.
        busy = by["pg-1"]["cores_busy"]
        out["pg_2_to_1_ceiling"] = round(min(2.0, (os.cpu_count() or 1) / busy), 2)
        out["cores_for_target"] = round(SCALE_TARGET * busy, 1)
    out["per_worker_met"] = {
        r["config"]: r["runs_per_s_per_worker"] >= PER_WORKER_TARGET for r in rows
    }
    out["trickle_start_met"] = {
        r["config"]: r["trickle_queue_to_start_p50_ms"] < START_P50_TARGET_MS for r in rows
    }
    out["round_trips_met"] = {
        r["config"]: r["per_run_round_trips"] <= ROUND_TRIPS_TARGET
        for r in rows if "per_run_round_trips" in r
    }  # fmt: skip
    return out


def by_name(rows: list[dict[str, Any]], config: str) -> dict[str, Any]:
    return next(row for row in rows if row["config"] == config)


def report(rows: list[dict[str, Any]], checks: dict[str, Any], options: Options) -> None:
    yes = {True: "met", False: "NOT met"}
    print(f"runs_scale: {options.runs} short runs per configuration (scripted model, demo "
          f"toolset); trickle {options.trickle} runs {options.trickle_gap_s * 1000:g} ms apart; "
          f"loadavg {Path('/proc/loadavg').read_text().split()[:3]}")  # fmt: skip
    print("\n".join(_table(rows, COLUMNS)))
    print("per run (burst):")
    print("\n".join(_table(rows, COST_COLUMNS)))
    for row in rows:
        print(f"{row['config']}: baseline {row['baseline_turns_per_s']:g} chat turns/s "
              f"({BASELINE_CONCURRENCY} at a time per worker); runs/s = "
              f"{row['runs_to_baseline']:g} x baseline; cores busy {row['cores_busy']:g} of "
              f"{os.cpu_count()} (workers, PostgreSQL, bench); {row['not_completed']} not "
              "completed")  # fmt: skip
    if "pg_2_to_1" in checks:
        print(f"PostgreSQL 2 workers / 1: {checks['pg_2_to_1']:g} "
              f"(target >= {SCALE_TARGET:g}: {yes[checks['pg_2_to_1_met']]}); the most this "
              f"machine allows: {checks['pg_2_to_1_ceiling']:g} ({os.cpu_count()} cores / "
              f"{by_name(rows, 'pg-1')['cores_busy']:g} busy with one worker); the target needs "
              f"{checks['cores_for_target']:g} cores")  # fmt: skip
    for name, key in (
        (f"runs/s per worker >= {PER_WORKER_TARGET:g}", "per_worker_met"),
        (f"trickle queue-to-start p50 < {START_P50_TARGET_MS:g} ms", "trickle_start_met"),
        (f"round trips per run <= {ROUND_TRIPS_TARGET:g}", "round_trips_met"),
    ):
        if checks[key]:
            print(f"target {name}: " + ", ".join(f"{c} {yes[m]}" for c, m in checks[key].items()))


def _options(args: argparse.Namespace) -> Options:
    if args.quick:
        args.runs, args.trickle, args.baseline = 60, 10, 20
    return Options(
        runs=args.runs, trickle=args.trickle, trickle_gap_s=args.trickle_gap_ms / 1000,
        baseline=args.baseline if args.baseline is not None else max(20, args.runs // 3),
        postgres=args.postgres, proxy=not args.no_proxy,
    )  # fmt: skip


async def _reachable(url: str) -> bool:
    try:
        conn = await asyncpg.connect(
            url.replace("postgresql+asyncpg://", "postgresql://"), timeout=3
        )
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def _main(
    configs: list[Config], options: Options
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    if any(c.db == "postgres" for c in configs) and (
        options.postgres is None or not await _reachable(options.postgres)
    ):
        print(f"note: no PostgreSQL at {options.postgres!r}: its configurations are skipped "
              "(set BOSUN_TEST_POSTGRES_URL or --postgres)", file=sys.stderr)  # fmt: skip
        configs = [c for c in configs if c.db != "postgres"]
    rows = []
    for config in configs:
        print(f"{config.name}: measuring...", file=sys.stderr)
        rows.append(await run_config(config, options))
    ceiling = {}
    if options.postgres is not None and any(c.db == "postgres" for c in configs):
        ceiling = await commit_ceiling(options.postgres)
    return rows, ceiling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs in the burst (300)")
    parser.add_argument("--trickle", type=int, default=30, help="runs queued one by one (30)")
    parser.add_argument("--trickle-gap-ms", type=float, default=100.0)
    parser.add_argument("--baseline", type=int, default=None, help="chat turns (runs / 3)")
    parser.add_argument("--configs", default=",".join(c.name for c in CONFIGS),
                        help="which of sqlite-1, pg-1, pg-2 (comma-separated)")  # fmt: skip
    parser.add_argument("--postgres", default=os.environ.get("BOSUN_TEST_POSTGRES_URL", PG_URL),
                        help="an admin URL (default: BOSUN_TEST_POSTGRES_URL, else the "
                        "tests' default)")  # fmt: skip
    parser.add_argument("--no-proxy", action="store_true",
                        help="PostgreSQL without the counting proxy (nothing counted)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="60 runs, 10 trickled, 20 chats")
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    args = parser.parse_args()
    options = _options(args)
    names = args.configs.split(",")
    configs = [c for c in CONFIGS if c.name in names]
    rows, ceiling = run_on_loop(_main(configs, options))
    checks = verdicts(rows)
    if not args.json:
        report(rows, checks, options)
        if ceiling:
            print(f"PostgreSQL commit ceiling ({CEILING_CONNECTIONS} connections, a row each): "
                  f"{ceiling['commits_per_s']:g} commits/s, "
                  f"{ceiling['notifying_commits_per_s']:g} with a NOTIFY each")  # fmt: skip
    print(json.dumps({"bench": "runs_scale", "options": asdict(options) | {"postgres": None},
                      "configs": rows, "checks": checks, "pg_ceiling": ceiling}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
