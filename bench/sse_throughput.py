"""SSE throughput: events/s through Bosun's ``POST /v1/chat/stream`` beside a bare Litestar SSE.

Both servers run in the same run, each in its own subprocess (uvicorn on 127.0.0.1), so
the client's CPU does not compete with the server's event loop:

* **bosun**: the real app (``bosun.app.build_app``) over a temporary SQLite file, with a
  zero-latency ``FunctionModel`` that streams ``--deltas`` text pieces per turn. Every
  event goes through the log (SQLite) before a stream's tail reads and frames it.
* **bare**: a Litestar app whose ``GET /sse`` returns ``ServerSentEvent`` over an async
  generator of ``--deltas`` frames shaped like Bosun's ``text_delta`` frames.

The client (this process; httpx by default, or ``--client raw``: asyncio + httptools) runs
streams one after another, then several at once, against each server, and counts SSE data
events (frames with a ``data:`` line; keep-alive comments are not counted). It also reads
each server process's CPU time from /proc, so a client-bound figure can be told apart from
a server-bound one. Run ``python bench/sse_throughput.py --help`` for the flags.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import httptools
import httpx
from litestar import Litestar, get
from litestar.response import ServerSentEvent, ServerSentEventMessage

from _harness import (
    HOST,
    SECRET_ENV,
    free_port,
    loop_and_http,
    process_cpu_s,
    raise_exit,
    run_on_loop,
    spawn_server,
    stop_process,
    wait_healthy,
)

DELTA = "x "
DELTA_DATA = json.dumps({"delta": DELTA}, separators=(",", ":"))
STREAM_TIMEOUT_S = 60.0
ServerKind = Literal["bosun", "bare"]
ClientKind = Literal["httpx", "raw"]
KINDS: tuple[ServerKind, ...] = ("bosun", "bare")


# --------------------------------------------------------------------------------------
# Server side: this file re-invoked with --serve, one process per server.
# --------------------------------------------------------------------------------------


def _bosun_app(db_path: Path, deltas: int) -> Litestar:
    from bosun.app import build_app
    from bosun.log import configure_logging
    from bosun.migrate import upgrade
    from bosun.settings import LimitSettings, Settings
    from bosun.wiring import configured_toolsets
    from providers import FunctionModel, ModelRequest
    from store import Store
    from turn import TurnModels

    configure_logging(fmt="console", level="warning")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db_path}",
        jwt_secret=os.environ[SECRET_ENV],
        jwt_algorithm="HS256",
        toolsets=["bosun_demo:toolset"],
        limits=LimitSettings(requests_per_minute=0, tokens_per_minute=0),  # measure, not throttle
    )

    async def migrate() -> None:
        store = Store(settings.database_url)
        try:
            await upgrade(store, toolsets=configured_toolsets(settings))
        finally:
            await store.close()

    asyncio.run(migrate())

    async def reply(_request: ModelRequest) -> AsyncIterator[str]:
        for _ in range(deltas):
            yield DELTA

    return build_app(
        settings, models=TurnModels(executor=FunctionModel(reply, name="function:bench"))
    )


def _bare_app(deltas: int) -> Litestar:
    async def frames() -> AsyncIterator[ServerSentEventMessage]:
        for seq in range(1, deltas + 1):
            yield ServerSentEventMessage(id=seq, event="text_delta", data=DELTA_DATA)

    @get("/sse")
    async def sse() -> ServerSentEvent:
        return ServerSentEvent(frames())

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return Litestar(route_handlers=[sse, healthz], logging_config=None, openapi_config=None)


def serve(kind: ServerKind, port: int, db_path: Path, deltas: int, profile: Path | None) -> int:
    import uvicorn

    app = _bosun_app(db_path, deltas) if kind == "bosun" else _bare_app(deltas)
    if kind == "bosun":  # as `bosun serve` does before serving
        from bosun.app import freeze_startup_heap

        freeze_startup_heap()
    loop, http = loop_and_http()
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: make that an exception
    # here so the profile below is still written.
    signal.signal(signal.SIGTERM, raise_exit)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    try:
        uvicorn.run(
            app,
            host=HOST,
            port=port,
            log_level="warning",
            access_log=False,
            loop=loop,
            http=http,
            timeout_graceful_shutdown=5,
        )
    except SystemExit:
        pass
    finally:
        if profiler is not None and profile is not None:
            profiler.disable()
            profiler.dump_stats(profile)
    return 0


# --------------------------------------------------------------------------------------
# Client side: counting SSE events.
# --------------------------------------------------------------------------------------


class FrameCounter:
    """Counts SSE events (frames with a ``data:`` line) by ``event:`` type, incrementally.

    Accepts CRLF, LF or CR line ends (Litestar's ``ServerSentEvent`` writes CRLF, Bosun LF)
    and frames split anywhere across chunks. Comment-only frames (keep-alives) count as
    ``comments``, not events. Works a frame at a time with bytes methods, not a line at a
    time, to keep the client's CPU per event low.
    """

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.comments = 0
        self.last_type: str | None = None
        self._last_frame = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        buf = self._tail + chunk
        if b"\r" in buf:
            held = buf.endswith(b"\r")  # maybe the first half of a CRLF
            buf = buf[:-1] if held else buf
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            buf = buf + b"\r" if held else buf
        frames = buf.split(b"\n\n")
        self._tail = frames.pop()
        for frame in frames:
            self._frame(b"\n" + frame)

    def _frame(self, frame: bytes) -> None:
        if b"\ndata:" not in frame:
            self.comments += b"\n:" in frame
            return
        start = frame.find(b"\nevent:")
        if start < 0:
            kind = "message"
        else:
            end = frame.find(b"\n", start + 1)
            kind = frame[start + 7 : end if end >= 0 else None].strip().decode() or "message"
        self.events[kind] += 1
        self.last_type, self._last_frame = kind, frame

    @property
    def last_data(self) -> bytes:
        """The data of the last event (its ``data:`` lines joined)."""
        return b"\n".join(
            line[5:].removeprefix(b" ")
            for line in self._last_frame.split(b"\n")
            if line.startswith(b"data:")
        )


@dataclass(frozen=True, slots=True)
class Target:
    """How to open one stream on one server."""

    kind: ServerKind
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamResult:
    events: Counter[str]
    comments: int
    reads: int  # pieces of body the client was handed (httpx chunks or socket reads)
    first_delta_s: float  # request sent to first text_delta parsed
    total_s: float


@dataclass(frozen=True, slots=True)
class PhaseResult:
    kind: ServerKind
    streams: list[StreamResult]
    wall_s: float
    server_cpu_s: float | None
    client_cpu_s: float

    @property
    def events(self) -> int:
        return sum(sum(s.events.values()) for s in self.streams)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s

    @property
    def server_cpu_us_per_event(self) -> float | None:
        if self.server_cpu_s is None:
            return None
        return self.server_cpu_s / self.events * 1e6

    def summary(self) -> dict[str, Any]:
        by_type: Counter[str] = Counter()
        for result in self.streams:
            by_type.update(result.events)
        return {
            "streams": len(self.streams),
            "events": self.events,
            "events_by_type": dict(sorted(by_type.items())),
            "wall_s": round(self.wall_s, 4),
            "events_per_s": round(self.events_per_s, 1),
            "server_cpu_s": None if self.server_cpu_s is None else round(self.server_cpu_s, 3),
            "server_cpu_us_per_event": _round(self.server_cpu_us_per_event, 2),
            "client_cpu_share": round(self.client_cpu_s / self.wall_s, 3),
            "p50_first_delta_ms": round(_median(s.first_delta_s for s in self.streams) * 1e3, 2),
            "p50_stream_ms": round(_median(s.total_s for s in self.streams) * 1e3, 2),
            "p50_reads_per_stream": _median(s.reads for s in self.streams),
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _median(values: Iterator[float] | Sequence[float]) -> float:
    return float(statistics.median(list(values)))


async def httpx_stream(client: httpx.AsyncClient, target: Target, deltas: int) -> StreamResult:
    """One stream read with httpx (pooled keep-alive connections)."""
    counter = FrameCounter()
    reads = 0
    started = time.perf_counter()
    first: float | None = None
    async with client.stream(
        target.method, target.url, headers=target.headers, json=target.body
    ) as response:
        if response.status_code != 200:
            body = (await response.aread())[:500]
            raise RuntimeError(f"{target.kind}: HTTP {response.status_code}: {body!r}")
        async for chunk in response.aiter_raw():
            reads += 1
            counter.feed(chunk)
            if first is None and counter.events["text_delta"]:
                first = time.perf_counter()
    ended = time.perf_counter()
    _check(target.kind, counter, deltas)
    return StreamResult(
        events=counter.events,
        comments=counter.comments,
        reads=reads,
        first_delta_s=(first or ended) - started,
        total_s=ended - started,
    )


class _RawResponse(asyncio.Protocol):
    """One HTTP/1.1 exchange on its own connection, parsed by httptools (C) as it arrives."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.counter = FrameCounter()
        self.status = 0
        self.error_body = b""
        self.reads = 0
        self.first_delta: float | None = None
        self._request = request
        self._done = done
        self._parser = httptools.HttpResponseParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.WriteTransport, transport).write(self._request)  # uvloop's aren't subclasses

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if not self._done.done():
                self._done.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_exception(exc or ConnectionError("closed before the response ended"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            self.error_body = (self.error_body + body)[:500]
            return
        self.counter.feed(body)
        if self.first_delta is None and self.counter.events["text_delta"]:
            self.first_delta = time.perf_counter()

    def on_message_complete(self) -> None:
        if not self._done.done():
            self._done.set_result(None)


def _raw_request(target: Target) -> tuple[str, int, bytes]:
    url = httpx.URL(target.url)
    body = b"" if target.body is None else json.dumps(target.body).encode()
    headers = {
        "Host": f"{url.host}:{url.port}",
        "Accept": "text/event-stream",
        "Connection": "close",
        **target.headers,
    }
    if target.body is not None:
        headers |= {"Content-Type": "application/json", "Content-Length": str(len(body))}
    head = f"{target.method} {url.raw_path.decode()} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()
    )
    assert url.port is not None
    return url.host, url.port, (head + "\r\n").encode() + body


async def raw_stream(target: Target, deltas: int) -> StreamResult:
    """One stream over a bare asyncio connection: far less client CPU per event than httpx."""
    host, port, request = _raw_request(target)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    started = time.perf_counter()
    transport, protocol = await loop.create_connection(
        lambda: _RawResponse(request, done), host, port
    )
    try:
        async with asyncio.timeout(STREAM_TIMEOUT_S):
            await done
    finally:
        transport.close()
    ended = time.perf_counter()
    if protocol.status != 200:
        raise RuntimeError(f"{target.kind}: HTTP {protocol.status}: {protocol.error_body!r}")
    _check(target.kind, protocol.counter, deltas)
    return StreamResult(
        events=protocol.counter.events,
        comments=protocol.counter.comments,
        reads=protocol.reads,
        first_delta_s=(protocol.first_delta or ended) - started,
        total_s=ended - started,
    )


async def one_stream(
    client: httpx.AsyncClient, kind: ClientKind, target: Target, deltas: int
) -> StreamResult:
    if kind == "raw":
        return await raw_stream(target, deltas)
    return await httpx_stream(client, target, deltas)


def _check(kind: ServerKind, counter: FrameCounter, deltas: int) -> None:
    got = counter.events["text_delta"]
    if got != deltas:
        raise RuntimeError(f"{kind}: expected {deltas} text_delta events, got {got}")
    if kind == "bosun":
        done = json.loads(counter.last_data) if counter.last_type == "done" else None
        if not done or done.get("status") != "completed":
            raise RuntimeError(f"bosun: stream did not end with a completed done: {done!r}")


async def run_phase(
    client: httpx.AsyncClient,
    client_kind: ClientKind,
    target: Target,
    pid: int,
    *,
    total: int,
    concurrency: int,
    deltas: int,
) -> PhaseResult:
    """``total`` streams, ``concurrency`` at a time; wall clock from first open to last end."""
    results: list[StreamResult] = []
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            results.append(await one_stream(client, client_kind, target, deltas))

    cpu_before, client_before = process_cpu_s(pid), time.process_time()
    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, total)):
            group.create_task(worker())
    wall = time.perf_counter() - started
    cpu_after, client_after = process_cpu_s(pid), time.process_time()
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return PhaseResult(
        kind=target.kind,
        streams=results,
        wall_s=wall,
        server_cpu_s=server_cpu,
        client_cpu_s=client_after - client_before,
    )


# --------------------------------------------------------------------------------------
# Orchestration.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Server:
    kind: ServerKind
    process: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    total: int
    concurrency: int


Results = list[tuple[Scenario, dict[ServerKind, list[PhaseResult]]]]  # every round


def median_round(rounds: list[PhaseResult]) -> PhaseResult:
    """The round with the median events/s (the lower middle one for an even count)."""
    ranked = sorted(rounds, key=lambda phase: phase.events_per_s)
    return ranked[(len(ranked) - 1) // 2]


T = TypeVar("T")


def start_server(
    kind: ServerKind, workdir: Path, deltas: int, secret: str, profile: Path | None
) -> Server:
    port = free_port()
    args = [kind, "--port", str(port), "--db", str(workdir / f"{kind}.db"), "--deltas", str(deltas)]
    process = spawn_server(__file__, args, secret=secret, workdir=workdir, profile=profile)
    return Server(kind=kind, process=process, port=port)


def targets(servers: dict[ServerKind, Server], secret: str) -> dict[ServerKind, Target]:
    from stream import TokenConfig, mint_token

    token = mint_token(TokenConfig(secret), user="bench", org="bench", role="member", ttl_s=3600)
    return {
        "bosun": Target(
            kind="bosun",
            method="POST",
            url=f"{servers['bosun'].base_url}/v1/chat/stream",
            headers={"Authorization": f"Bearer {token}"},
            body={"message": "bench"},
        ),
        "bare": Target(kind="bare", method="GET", url=f"{servers['bare'].base_url}/sse"),
    }


async def measure(
    servers: dict[ServerKind, Server], secret: str, args: argparse.Namespace
) -> Results:
    scenarios = [
        Scenario(f"sequential ({args.streams} x 1)", args.streams, 1),
        Scenario(
            f"concurrent ({args.total}, {args.concurrency} at once)", args.total, args.concurrency
        ),
    ]
    limits = httpx.Limits(max_connections=max(args.concurrency, 1) + 4)
    timeout = httpx.Timeout(STREAM_TIMEOUT_S, connect=5.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        for server in servers.values():
            await wait_healthy(client, server.base_url, server.process, server.kind)
        by_kind = targets(servers, secret)
        for kind in KINDS:
            for _ in range(args.warmup):
                await one_stream(client, args.client, by_kind[kind], args.deltas)
        results = []
        for scenario in scenarios:
            rounds: dict[ServerKind, list[PhaseResult]] = {kind: [] for kind in KINDS}
            for _ in range(args.rounds):
                for kind in KINDS:  # alternate; one server works while the other idles
                    rounds[kind].append(
                        await run_phase(
                            client,
                            args.client,
                            by_kind[kind],
                            servers[kind].process.pid,
                            total=scenario.total,
                            concurrency=scenario.concurrency,
                            deltas=args.deltas,
                        )
                    )
            results.append((scenario, rounds))
    return results


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------


CLIENT_BOUND_SHARE = 0.8


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _event_counts(events: Counter[str]) -> str:
    deltas = events.get("text_delta", 0)
    others = ", ".join(f"{n} {t}" for t, n in events.items() if t != "text_delta")
    return f"{sum(events.values())} = {deltas} text_delta" + (f" + {others}" if others else "")


def _table(results: Results) -> list[str]:
    header = f"{'scenario':<30} {'bosun ev/s':>11} {'bare ev/s':>11} {'ratio':>7}"
    lines = [header, "-" * len(header)]
    for scenario, rounds in results:
        bosun, bare = median_round(rounds["bosun"]), median_round(rounds["bare"])
        lines.append(
            f"{scenario.name:<30} {bosun.events_per_s:>11,.0f} {bare.events_per_s:>11,.0f}"
            f" {bosun.events_per_s / bare.events_per_s:>7.3f}"
        )
    return lines


def _details(results: Results, client: ClientKind) -> list[str]:
    header = (
        f"{'scenario':<30} {'server':<6} {'srv CPU us/ev':>13} {'p50 1st delta ms':>16}"
        f" {'p50 stream ms':>13} {'client CPU':>10}"
    )
    lines = [header, "-" * len(header)]
    warnings = []
    for scenario, rounds in results:
        for kind in KINDS:
            phase = median_round(rounds[kind])
            summary = phase.summary()
            lines.append(
                f"{scenario.name if kind == 'bosun' else '':<30} {kind:<6}"
                f" {_fmt(phase.server_cpu_us_per_event, '.1f'):>13}"
                f" {summary['p50_first_delta_ms']:>16.2f} {summary['p50_stream_ms']:>13.2f}"
                f" {summary['client_cpu_share']:>10.0%}"
            )
            if summary["client_cpu_share"] > CLIENT_BOUND_SHARE:
                warnings.append(
                    f"note: the client process was busy {summary['client_cpu_share']:.0%} of the"
                    f" wall time in {scenario.name} / {kind}: that figure is client-bound (a lower"
                    " bound on the server's rate)"
                    + ("; try --client raw" if client == "httpx" else "")
                )
    return lines + warnings


def _scenario_figures(
    scenario: Scenario, rounds: dict[ServerKind, list[PhaseResult]]
) -> dict[str, Any]:
    median = {kind: median_round(rounds[kind]) for kind in KINDS}
    return {
        "scenario": scenario.name,
        "total": scenario.total,
        "concurrency": scenario.concurrency,
        "ratio": round(median["bosun"].events_per_s / median["bare"].events_per_s, 4),
        **{
            kind: {
                **median[kind].summary(),
                "rounds_events_per_s": [round(r.events_per_s, 1) for r in rounds[kind]],
            }
            for kind in KINDS
        },
    }


def report(results: Results, args: argparse.Namespace) -> dict[str, Any]:
    """Print the tables (unless --json); return the figures for the JSON line."""
    loop, http = loop_and_http()
    first = results[0][1]
    title = f"median of {args.rounds} rounds" if args.rounds > 1 else "1 round"
    lines = [
        f"SSE throughput: {args.deltas} deltas per stream; client {args.client}; servers: uvicorn"
        f" ({loop}, {http}), one process each; Python {platform.python_version()};"
        f" {os.cpu_count()} CPUs",
        f"events/s: {title} per scenario and server; ratio = bosun / bare",
        *_table(results),
        "",
        "events counted: SSE frames with a data: line (keep-alive comments excluded), per stream:",
        *(f"  {kind:<5} {_event_counts(first[kind][0].streams[0].events)}" for kind in KINDS),
        "",
        "the median round in detail (srv CPU: the server process, all threads, per event):",
        *_details(results, args.client),
    ]
    if not args.json:
        print("\n".join(lines))
    return {
        "bench": "sse_throughput",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "deltas": args.deltas,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "client": args.client,
        "loop": loop,
        "http": http,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "events_counted": "SSE frames with a data: line (all types); keep-alives excluded",
        "scenarios": [_scenario_figures(scenario, rounds) for scenario, rounds in results],
    }


# --------------------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Events/s through Bosun's POST /v1/chat/stream beside a bare Litestar SSE "
        "endpoint, measured in the same run."
    )
    parser.add_argument("--streams", type=int, default=20, help="sequential streams (20)")
    parser.add_argument(
        "--concurrency", type=int, default=10, help="streams at once in the concurrent run (10)"
    )
    parser.add_argument("--total", type=int, default=50, help="streams in the concurrent run (50)")
    parser.add_argument("--deltas", type=int, default=1000, help="text deltas per stream (1000)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up streams per server (2)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds per scenario, alternating the servers; the median is reported (3)",
    )
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="raw",
        help="raw (default): asyncio + httptools, light enough that the servers are the "
        "limit; or httpx.AsyncClient, which saturates this process's CPU against the bare server",
    )
    parser.add_argument(
        "--json", action="store_true", help="print only the JSON line, not the table"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="cProfile the Bosun server's main thread into FILE (pstats format)",
    )
    # Internal: the server subprocesses.
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.port, args.db, args.deltas, args.profile)
    if min(args.streams, args.concurrency, args.total, args.deltas, args.rounds) < 1:
        parser.error("--streams, --concurrency, --total, --deltas and --rounds must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    signal.signal(signal.SIGTERM, raise_exit)  # so the finally below stops the servers
    secret = secrets.token_urlsafe(48)
    profile = args.profile.resolve() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as workdir:
        servers: dict[ServerKind, Server] = {}
        try:
            for kind in KINDS:
                servers[kind] = start_server(
                    kind, Path(workdir), args.deltas, secret, profile if kind == "bosun" else None
                )
            results = run_on_loop(measure(servers, secret, args))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            for server in servers.values():
                stop_process(server.process)
    print(json.dumps(report(results, args), separators=(",", ":")))
    if profile is not None:
        print(f"profile of the bosun server written to {profile}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
