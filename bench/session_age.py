"""Does a turn cost more the older its session? Long sessions over ``POST /v1/chat/stream``.

``python bench/session_age.py --help`` for the flags. Each turn does tool work: the
planner double plans one ``tool`` step, the executor double calls ``programs.list`` (demo
data) and answers, the merger writes a ~40-word answer, and a summariser double compacts
the history whenever the turn decides to. Per turn the script records the server's CPU
time (all its threads, from ``/proc``), the input tokens each model call was sent and the
share of them a simulated prompt cache would have served (each role's previous request's
longest common prefix).

Per server, an old session is played to ``--turns`` (200) and a young one to turn 15; the
last ``--window`` (10) turns of both are interleaved, so the two ages are measured under
the same machine load. Printed: the median CPU of the old session's turns over the young
one's (turns 191-200 over turns 6-15; target at most 1.25), and the tokens sent per turn
once compaction has started. The same runs against a baseline, the code of
``--baseline`` (default: fb9a2fa, the commit before issue 26) extracted with
``git archive`` and served at the same time, its turns interleaved with the current
code's, so the ratios are compared in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from _harness import (
    HOST,
    SECRET_ENV,
    free_port,
    loop_and_http,
    process_cpu_s,
    raise_exit,
    run_on_loop,
    stop_process,
    wait_healthy,
)

ORG = "bench"
MODEL = "function:bench"
TARGET_RATIO = 1.25
YOUNG_AGE = 15  # the young session's age at its last measured turn (about turn 10)
DEFAULT_BASELINE = "fb9a2fa"
ROOT = Path(__file__).resolve().parent.parent
SUMMARY = (
    "The user is reviewing the gym's programs one turn at a time. Programs were listed "
    "with programs.list; the user asked for a short answer each time. No open questions."
)
ANSWER = (
    "Here are the programs I found for turn {n}: the strength block, the mobility class and "
    "the beginner circuit are all open this week, and the coach confirmed the schedule. "
    "Tell me which one you want and I will book it."
)


# --------------------------------------------------------------------------------------
# Server side: this file re-invoked with --serve (the code under test on its PYTHONPATH).
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class PromptCache:
    """A stand-in for a provider's prompt cache: a request's tokens that repeat the start
    of the same role's previous request are read from cache (4 characters a token)."""

    last: dict[str, str] = field(default_factory=dict)

    def usage(self, role: str, request: Any) -> Any:
        from providers import TokenUsage

        text = _render(request)
        previous = self.last.get(role, "")
        self.last[role] = text
        common = len(os.path.commonprefix([previous, text]))  # noqa: RUF071 (characters, not paths)
        cached = common // 4
        return TokenUsage(
            input_tokens=max(len(text) // 4 - cached, 0), cache_read_tokens=cached, output_tokens=40
        )


def _render(request: Any) -> str:
    system = "".join(block.text for block in request.system)
    tools = "".join(f"{t.name}:{t.description}" for t in request.tools or ())
    messages = "".join(f"{m.role}:{m.parts!r}" for m in request.messages)
    return system + tools + messages


async def streamed(text: str, usage: Any) -> AsyncIterator[Any]:
    """``text`` word by word, as a provider streams an answer (a ``text_delta`` each)."""
    for word in re.findall(r"\S+\s*", text):
        yield word
    yield usage


def bench_models() -> Any:
    """Planner, executor, merger and summariser doubles, each reporting simulated usage."""
    from planner import Plan
    from providers import FunctionModel, ModelRequest, Reply, TokenUsage, ToolCall, ToolResult
    from turn import TurnModels

    cache = PromptCache()
    plan = Plan.model_validate(
        {
            "strategy": "tool",
            "reasoning": "bench: one lookup",
            "executors": 1,
            "steps": [{"id": "s1", "goal": "List the programs.", "tools": ["programs.list"]}],
        }
    ).model_dump_json()

    def planner(request: ModelRequest) -> Reply:
        return Reply(text=plan, usage=cache.usage("planner", request))

    def executor(request: ModelRequest) -> Reply | AsyncIterator[str | TokenUsage]:
        usage = cache.usage("executor", request)
        last = request.messages[-1].parts if request.messages else ()
        if any(isinstance(p, ToolResult) for p in last):  # its call's result: answer
            return streamed(ANSWER.format(n=len(request.messages)), usage)
        name = request.tools[0].name if request.tools else "programs_list"
        call = ToolCall(id=f"toolu_{uuid.uuid4().hex[:16]}", name=name, input={})
        return Reply(tool_calls=(call,), usage=usage)

    def merger(request: ModelRequest) -> AsyncIterator[str | TokenUsage]:
        text = ANSWER.format(n=len(request.messages))
        return streamed(text, cache.usage("merger", request))

    def summariser(request: ModelRequest) -> Reply:
        return Reply(text=SUMMARY, usage=cache.usage("summariser", request))

    def model(fn: Callable[[ModelRequest], Any]) -> FunctionModel:
        double = FunctionModel(fn, name=MODEL)
        double.calls = Unrecorded()  # a provider keeps no requests: the heap stays flat
        return double

    return TurnModels(
        planner=model(planner),
        executor=model(executor),
        merger=model(merger),
        summariser=model(summariser),
    )


class Unrecorded(list[Any]):
    """A test double's ``calls`` that records nothing (it would grow with every turn)."""

    def append(self, _item: Any) -> None:
        return None


def bosun_app(db_path: Path) -> Any:
    from bosun.app import build_app
    from bosun.log import configure_logging
    from bosun.migrate import upgrade
    from bosun.settings import LimitSettings, Settings
    from bosun_demo import toolset as demo_toolset
    from store import Store

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
            await upgrade(store, toolsets=[demo_toolset()])
        finally:
            await store.close()

    asyncio.run(migrate())
    return build_app(settings, models=bench_models(), seed_orgs=[ORG])


class WindowProfiler:
    """cProfile of the server's main thread over the measured turns: SIGUSR1 starts or
    stops the young session's profile, SIGUSR2 the old one's; both accumulate over their
    turns and are written at exit to ``FILE-young`` and ``FILE-old`` (pstats format)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.profiles = {"young": cProfile.Profile(), "old": cProfile.Profile()}
        self.on: str | None = None

    def toggle(self, signum: int, _frame: FrameType | None) -> None:
        name = "young" if signum == signal.SIGUSR1 else "old"
        if self.on == name:
            self.profiles[name].disable()
            self.on = None
        elif self.on is None:
            self.profiles[name].enable()
            self.on = name

    def dump(self) -> None:
        for name, profile in self.profiles.items():
            profile.dump_stats(f"{self.path}-{name}")


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    app = bosun_app(args.db)
    loop, http = loop_and_http()
    signal.signal(signal.SIGTERM, raise_exit)
    profiler = WindowProfiler(args.profile) if args.profile else None
    if profiler is not None:
        signal.signal(signal.SIGUSR1, profiler.toggle)
        signal.signal(signal.SIGUSR2, profiler.toggle)
    with contextlib.suppress(SystemExit):
        uvicorn.run(
            app, host=HOST, port=args.port, log_level="warning", access_log=False,
            loop=loop, http=http, timeout_graceful_shutdown=5,
        )  # fmt: skip
    if profiler is not None:
        profiler.dump()
    return 0


# --------------------------------------------------------------------------------------
# Client side: the session, turn by turn.
# --------------------------------------------------------------------------------------


def server_cpu_s(pid: int) -> float | None:
    """CPU seconds of all of ``pid``'s threads, to the nanosecond where the kernel keeps
    scheduler statistics (``/proc/PID/task/*/schedstat``), else in clock ticks."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        return process_cpu_s(pid)


@dataclass(frozen=True, slots=True)
class TurnFigures:
    cpu_ms: float | None
    wall_ms: float
    input_tokens: int  # sent to the models this turn (uncached + read from cache)
    cache_ratios: list[float]  # per model call: cache read / tokens sent
    compacted: bool  # the turn logged a history_summarised
    log_events: int = 0  # the session's log length after the turn (its done's seq)


async def play_turn(
    client: httpx.AsyncClient, url: str, token: str, pid: int, session_id: str | None, n: int
) -> tuple[str, TurnFigures]:
    """One turn over HTTP, read to its ``done`` frame; the session id and its figures."""
    body: dict[str, Any] = {"message": f"Turn {n}: which programs are open this week?"}
    if session_id is not None:
        body["session_id"] = session_id
    frames: list[tuple[str, dict[str, Any]]] = []
    kind, lines, last_seq = "message", [], 0
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    cpu_before, started = server_cpu_s(pid), time.perf_counter()
    async with client.stream("POST", url, headers=headers, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("id:"):
                last_seq = int(line[3:])
            elif line.startswith("data:"):
                lines.append(line[5:].removeprefix(" "))
            elif not line and lines:
                frames.append((kind, json.loads("\n".join(lines))))
                if kind == "done":
                    break
                kind, lines = "message", []
    wall_ms = (time.perf_counter() - started) * 1000
    await asyncio.sleep(0.02)  # the turn's upkeep (compaction) runs before done; settle
    cpu_after = server_cpu_s(pid)
    session_id, figures = _figures(frames, n, cpu_before, cpu_after, wall_ms)
    return session_id, replace(figures, log_events=last_seq)


def _figures(
    frames: list[tuple[str, dict[str, Any]]],
    n: int,
    cpu_before: float | None,
    cpu_after: float | None,
    wall_ms: float,
) -> tuple[str, TurnFigures]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for kind, data in frames:
        by_kind.setdefault(kind, []).append(data)
    done = by_kind.get("done", [{}])[-1]
    if done.get("status") != "completed" or not by_kind.get("tool_completed"):
        raise RuntimeError(f"turn {n} did not complete with tool work: {done}")
    session_id = str(by_kind["session_started"][0]["session_id"])
    usage = by_kind["usage"][-1]
    calls = usage.get("calls") or []
    sent = [c.get("input_tokens", 0) + c.get("cache_read_tokens", 0) for c in calls]
    ratios = [
        c.get("cache_read_tokens", 0) / total for c, total in zip(calls, sent, strict=True) if total
    ]
    cpu_ms = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) * 1e3
    figures = TurnFigures(
        cpu_ms=cpu_ms,
        wall_ms=wall_ms,
        input_tokens=sum(sent),
        cache_ratios=ratios,
        compacted="history_summarised" in by_kind,
    )
    return session_id, figures


@dataclass(frozen=True, slots=True)
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    profile: bool = False


def start_server(name: str, src: Path, workdir: Path, secret: str, profile: Path | None) -> Server:
    """This script's server mode with ``src`` (the code under test) first on the path."""
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", name,
               "--port", str(port), "--db", str(workdir / f"{name}.db")]  # fmt: skip
    if profile is not None:
        command += ["--profile", str(profile)]
    path = os.pathsep.join([str(src), str(Path(__file__).resolve().parent)])
    env = {**os.environ, SECRET_ENV: secret, "PYTHONPATH": path}
    process = subprocess.Popen(command, env=env, stdout=sys.stderr, cwd=workdir)
    return Server(name=name, process=process, port=port, profile=profile is not None)


def extract_baseline(rev: str, into: Path) -> Path:
    """The ``src`` and ``migrations`` trees of ``rev`` (``git archive``; no worktree is
    registered); returns its ``src``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src", "migrations"],  # noqa: S607
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)  # noqa: S607
    return into / "src"


@dataclass(slots=True)
class Session:
    """One session on one server, played turn by turn over a shared client."""

    server: Server
    token: str
    client: httpx.AsyncClient
    profiled: bool = False
    id: str | None = None
    played: list[TurnFigures] = field(default_factory=list)

    async def turn(self, *, profile: signal.Signals | None = None) -> TurnFigures:
        """The next turn; with ``profile``, the server profiles it (that signal's window)."""
        url = f"http://{HOST}:{self.server.port}/v1/chat/stream"
        n = len(self.played) + 1
        if profile is not None and self.profiled:
            self.server.process.send_signal(profile)
        try:
            self.id, figures = await play_turn(
                self.client, url, self.token, self.server.process.pid, self.id, n
            )
        finally:
            if profile is not None and self.profiled:
                self.server.process.send_signal(profile)
        self.played.append(figures)
        return figures


async def play(servers: list[Server], token: str, args: argparse.Namespace) -> dict[str, Any]:
    """Per server, an old session of ``--turns`` turns and a young one of ``YOUNG_AGE``; the
    young session's last ``--window`` turns are interleaved with the old one's (and the
    servers' turns with each other), so both ages are measured under the same load."""
    async with httpx.AsyncClient(timeout=60.0) as client:
        for server in servers:
            await wait_healthy(client, f"http://{HOST}:{server.port}", server.process, server.name)
        pairs = [
            (Session(s, token, client, s.profile), Session(s, token, client, s.profile))
            for s in servers
        ]
        for _ in range(args.turns - args.window):
            for old, _young in pairs:
                await old.turn()
        for _ in range(YOUNG_AGE - args.window):
            for _old, young in pairs:
                await young.turn()
        for _ in range(args.window):
            for old, young in pairs:
                await young.turn(profile=signal.SIGUSR1)
                await old.turn(profile=signal.SIGUSR2)
    return {
        server.name: summary(old.played, young.played, args.window)
        for server, (old, young) in zip(servers, pairs, strict=True)
    }


# --------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(old: list[TurnFigures], young: list[TurnFigures], window: int) -> dict[str, Any]:
    """CPU of a young and an old turn (median of the ``window`` measured turns each: a
    shared machine's stray spikes stay out), tokens per turn after compaction starts."""
    early = [c for f in young[-window:] if (c := f.cpu_ms) is not None]
    late = [c for f in old[-window:] if (c := f.cpu_ms) is not None]
    first = next((i for i, f in enumerate(old) if f.compacted), None)
    after = [f.input_tokens for f in old[first + 1 :]] if first is not None else []
    ratios = [r for f in old[1:] for r in f.cache_ratios]
    return {
        "turns": len(old),
        "cpu_ms_early": round(_median(early), 2),
        "cpu_ms_late": round(_median(late), 2),
        "cpu_ratio": round(_median(late) / _median(early), 2) if early and late else None,
        "first_compaction_turn": None if first is None else first + 1,
        "compactions": sum(f.compacted for f in old),
        "tokens_per_turn_after_compaction": {
            "min": min(after, default=0),
            "max": max(after, default=0),
            "first_half_mean": round(_mean(after[: len(after) // 2])),
            "second_half_mean": round(_mean(after[len(after) // 2 :])),
        },
        "tokens_last_turn": old[-1].input_tokens,
        "log_events": old[-1].log_events,
        "cache_hit_ratio_per_call": {
            "median": round(statistics.median(ratios), 3) if ratios else None,
            "min": round(min(ratios), 3) if ratios else None,
        },
        "cpu_ms_per_turn": [None if f.cpu_ms is None else round(f.cpu_ms, 2) for f in old],
        "cpu_ms_young": [None if f.cpu_ms is None else round(f.cpu_ms, 2) for f in young],
    }


def render(results: dict[str, dict[str, Any]], window: int) -> str:
    rows = [
        f"CPU = server CPU per turn, median of {window} interleaved turns of a young session "
        f"(turns {YOUNG_AGE - window + 1}-{YOUNG_AGE}: early) and an old one "
        f"(its last {window}: late)",
        f"{'server':<12}{'turns':>6}{'cpu early':>11}{'cpu late':>10}{'late/early':>12}"
        f"{'tok/turn 1st½':>15}{'2nd½':>8}{'compactions':>13}{'cache hit':>11}",
    ]
    for name, r in results.items():
        tokens = r["tokens_per_turn_after_compaction"]
        hit = r["cache_hit_ratio_per_call"]["median"]
        rows.append(
            f"{name:<12}{r['turns']:>6}{r['cpu_ms_early']:>9.1f}ms{r['cpu_ms_late']:>8.1f}ms"
            f"{r['cpu_ratio'] or float('nan'):>11.2f}x{tokens['first_half_mean']:>15}"
            f"{tokens['second_half_mean']:>8}{r['compactions']:>13}"
            f"{'n/a' if hit is None else f'{hit:.2f}':>11}"
        )
    current = results["current"]["cpu_ratio"]
    verdict = "meets" if current is not None and current <= TARGET_RATIO else "misses"
    rows.append(f"current {verdict} the target: late/early <= {TARGET_RATIO}")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Server CPU and tokens per turn over one long session, against a baseline."
    )
    parser.add_argument("--turns", type=int, default=200, help="turns in the session (200)")
    parser.add_argument("--window", type=int, default=10, help="measured turns per age (10)")
    parser.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        help=f"git revision to compare with ({DEFAULT_BASELINE}); 'none' to skip",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="cProfile the current server's main thread over the measured turns of the young "
        "and the old session, into FILE-young and FILE-old (pstats format)",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args)
    if args.turns < 20 or not 1 <= args.window <= 10:
        parser.error("--turns must be >= 20 and --window between 1 and 10")
    signal.signal(signal.SIGTERM, raise_exit)
    from stream import TokenConfig, mint_token

    secret = secrets.token_urlsafe(48)
    token = mint_token(TokenConfig(secret), user="bench", org=ORG, role="owner", ttl_s=3600)
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:
        workdir = Path(tmp)
        sources = {"current": ROOT / "src"}
        if args.baseline != "none":
            try:
                sources["baseline"] = extract_baseline(args.baseline, workdir / "baseline")
            except (OSError, subprocess.CalledProcessError) as exc:  # no git, no such commit
                print(f"no baseline {args.baseline!r} ({exc}): current only", file=sys.stderr)
        servers: list[Server] = []
        try:
            for name, src in sources.items():
                profile = args.profile.resolve() if args.profile and name == "current" else None
                servers.append(start_server(name, src, workdir, secret, profile))
            results = run_on_loop(play(servers, token, args))
        finally:
            for server in servers:
                stop_process(server.process)
    if not args.json:
        print(render(results, args.window))
    print(
        json.dumps(
            {"baseline": args.baseline if "baseline" in results else None, "results": results},
            separators=(",", ":"),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
