"""What tracing costs per tool step of a whole turn: off, on, and a baseline revision.

The workload is ``bench/peers.py``'s whole-turn variant (``TurnRunner``: planner call,
plan, one step of K tool calls, the answer, every event in a SQLite log, metering), timed
as marginal time per tool step = (median run with K steps - median with 1) / (K - 1).

* **off**: no ``OTEL_*`` configuration: every ``telemetry`` helper returns at its first
  check (the default).
* **otlp**: tracing on as ``bosun serve`` sets it up from ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (the SDK, a ``BatchSpanProcessor``, the OTLP/HTTP protobuf exporter) sending to a
  receiver thread on 127.0.0.1, plus the GenAI metrics.
* **baseline** (``--baseline REV``): "off" again with REV's source (a temporary ``git
  worktree``), in a child process each round: tracing off against the code before it.

Rounds interleave the variants; ratios are against **off** from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bosun.log import configure_logging
from peers import Rounds, Variant, build_bosun_turn, measure

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def receiver() -> Iterator[str]:
    """An OTLP/HTTP receiver that accepts everything: its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


if TYPE_CHECKING:  # the baseline's child process imports none of it: REV may not have it
    import telemetry


@dataclass(frozen=True, slots=True)
class Traced:
    """``inner`` with tracing set as ``state`` for each of its runs (set outside the timed
    part: ``BosunTurn.run`` times itself)."""

    inner: Variant
    state: telemetry.TracingState | None

    async def run(self, k: int) -> float:
        import telemetry

        fresh = self.state or telemetry.TracingState()
        for name in telemetry.TracingState.__slots__:
            setattr(telemetry.STATE, name, getattr(fresh, name))
        return await self.inner.run(k)


def otlp_state(endpoint: str) -> telemetry.TracingState:
    """Tracing and metrics as ``bosun serve`` configures them from ``OTEL_*``."""
    import telemetry

    said = telemetry.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert said is not None
    state = telemetry.TracingState()
    for name in telemetry.TracingState.__slots__:
        setattr(state, name, getattr(telemetry.STATE, name))
    return state


async def build(
    stack: AsyncExitStack, workdir: Path, k: int, endpoint: str | None
) -> dict[str, Variant]:
    """The variants of this process: off, and otlp when a receiver is given."""
    variants: dict[str, Variant] = {"off": Traced(await build_bosun_turn(stack, workdir, k), None)}
    if endpoint is not None:
        (workdir / "otlp").mkdir()
        turn = await build_bosun_turn(stack, workdir / "otlp", k)
        variants["otlp"] = Traced(turn, otlp_state(endpoint))
    return variants


async def rounds_here(args: argparse.Namespace, endpoint: str | None) -> dict[str, Rounds]:
    """Every round in this process, a baseline child run between rounds when asked."""
    results: dict[str, Rounds] = {}
    async with AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bosun-trace-")))
        variants = await build(stack, workdir, args.k, endpoint)
        for index in range(args.rounds):
            warmup = args.warmup if index == 0 else 0
            got = await measure(variants, k=args.k, rounds=1, reps=args.reps, warmup=warmup)
            for name, rounds in got.items():
                mine = results.setdefault(name, Rounds())
                mine.one += rounds.one
                mine.many += rounds.many
            if args.baseline_src is not None:
                child = baseline_round(args)
                mine = results.setdefault("baseline", Rounds())
                mine.one += child.one
                mine.many += child.many
    import telemetry

    telemetry.shutdown()
    return results


def baseline_round(args: argparse.Namespace) -> Rounds:
    """One round of "off" in a child process over the baseline's source."""
    env = {**os.environ, "PYTHONPATH": f"{args.baseline_src}/src{os.pathsep}{ROOT / 'bench'}"}
    command = [
        sys.executable, __file__, "--child", "--k", str(args.k), "--reps", str(args.reps),
        "--warmup", str(args.warmup),
    ]  # fmt: skip
    shown = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        raise SystemExit(f"the baseline's round failed:\n{shown.stderr[-2000:]}")
    data = json.loads(shown.stdout.strip().splitlines()[-1])
    return Rounds(one=data["one"], many=data["many"])


async def child(args: argparse.Namespace) -> None:
    """A baseline round: "off" only, its medians as one JSON line."""
    async with AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bosun-trace-")))
        turn = await build_bosun_turn(stack, workdir, args.k)
        got = await measure({"off": turn}, k=args.k, rounds=1, reps=args.reps, warmup=args.warmup)
    print(json.dumps({"one": got["off"].one, "many": got["off"].many}))


@contextmanager
def worktree(rev: str | None) -> Iterator[str | None]:
    """A detached ``git worktree`` of ``rev`` for the baseline (removed after)."""
    if rev is None:
        yield None
        return
    git = shutil.which("git")
    assert git is not None, "--baseline needs git"
    path = tempfile.mkdtemp(prefix="bosun-baseline-")
    subprocess.run(
        [git, "-C", str(ROOT), "worktree", "add", "-q", "--detach", path, rev], check=True
    )
    try:
        yield path
    finally:
        subprocess.run([git, "-C", str(ROOT), "worktree", "remove", "--force", path], check=False)


def report(results: dict[str, Rounds], k: int) -> dict[str, Any]:
    per_step = {name: statistics.median(r.per_step_us(k)) for name, r in results.items()}
    off = per_step["off"]
    out: dict[str, Any] = {
        "bench": "tracing_cost", "k": k,
        "per_step_us": {name: round(v, 1) for name, v in per_step.items()},
        "rounds_us": {n: [round(v, 1) for v in r.per_step_us(k)] for n, r in results.items()},
    }  # fmt: skip
    if "otlp" in per_step:
        out["otlp_added_us_per_step"] = round(per_step["otlp"] - off, 1)
        out["ratio_otlp_to_off"] = round(per_step["otlp"] / off, 3)
    if "baseline" in per_step:
        out["ratio_off_to_baseline"] = round(off / per_step["baseline"], 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=20, help="tool steps in the long run (20)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5, help="runs per round and length (5)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--baseline", metavar="REV", help="also measure REV's code, tracing off")
    parser.add_argument("--no-otlp", action="store_true", help="only off (and the baseline)")
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging(fmt="console", level="warning")  # a turn's info lines cost time too
    if args.child:
        asyncio.run(child(args))
        return 0
    with worktree(args.baseline) as src, receiver() as endpoint:
        args.baseline_src = src
        result = report(asyncio.run(rounds_here(args, None if args.no_otlp else endpoint)), args.k)
    if not args.json:
        for name, value in result["per_step_us"].items():
            print(f"{name:10} {value:8.1f} us per tool step   rounds {result['rounds_us'][name]}")
        if "ratio_off_to_baseline" in result:
            print(f"off / baseline ({args.baseline}): {result['ratio_off_to_baseline']}")
        if "ratio_otlp_to_off" in result:
            print(f"otlp / off: {result['ratio_otlp_to_off']} "
                  f"(+{result['otlp_added_us_per_step']} us per step)")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
