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
  worktree``): tracing off against the code before it.

Each round runs every variant once, in a rotated order, each in a fresh child process (so
they pay the same start-up, and the exporter's thread never slows another variant);
ratios are against **off** from the same run. Runs are timed by the child's CPU seconds
(``--clock cpu``, the default: every thread of it, the exporter's and the SQLite writer's
too), which other work on a shared machine barely moves; ``--clock wall`` times them by
the wall clock, which under load swings several-fold from round to round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import peers
from bosun.log import configure_logging
from peers import Rounds, build_bosun_turn, measure

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


def off_path_us(number: int = 200_000) -> float:
    """What tracing adds to a tool step when off, timed alone (best of 3): the step's
    ``execute_tool`` span helper and its outcome, the ``chat`` span's guard, and an
    ``execute_step`` span (once per step, counted here per tool call). A whole turn's
    rounds scatter by several percent; this is the difference itself."""
    import timeit

    import telemetry
    from executors._calls import _tool_span, traced_outcome
    from providers import ToolCall
    from tools import ToolOutcome

    assert telemetry.STATE.tracer is None, "measured with tracing off"
    call = ToolCall(id="t1", name="add", input={"a": 1})
    outcome = ToolOutcome(tool_use_id="t1", tool="add", ok=True, output=2)

    def step() -> None:
        with _tool_span("add", call, None) as span:
            traced_outcome(span, outcome)
        telemetry.active()
        with telemetry.span("execute_step s1", {"bosun.step.id": "s1"}):
            pass

    return min(timeit.repeat(step, number=number, repeat=3)) / number * 1e6


def child_round(args: argparse.Namespace, variant: str, src: Path) -> Rounds:
    """One round of ``variant`` in a fresh child process over ``src``: every variant pays
    the same start-up and runs alone (an exporter thread never slows another variant)."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT / 'bench'}"}
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")} | {"PYTHONHASHSEED": "0"}
    command = [
        sys.executable, __file__, "--child", variant, "--k", str(args.k), "--reps",
        str(args.reps), "--warmup", str(args.warmup), "--clock", args.clock,
    ]  # fmt: skip
    shown = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        raise SystemExit(f"a {variant} round failed:\n{shown.stderr[-2000:]}")
    data = json.loads(shown.stdout.strip().splitlines()[-1])
    return Rounds(one=data["one"], many=data["many"])


async def child(args: argparse.Namespace) -> None:
    """A round of one variant, its medians as one JSON line: ``off`` (no ``OTEL_*``) or
    ``otlp`` (configured as ``bosun serve`` does, exporting to a receiver here)."""
    if args.clock == "cpu":
        peers.clock = time.process_time
    with contextlib.ExitStack() as exits:
        if args.child == "otlp":
            import telemetry

            endpoint = exits.enter_context(receiver())
            assert telemetry.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}) is not None
            exits.callback(telemetry.shutdown)  # after the timing: flushes what is left
        async with AsyncExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bosun-trace-")))
            turn = await build_bosun_turn(stack, workdir, args.k)
            got = await measure({"x": turn}, k=args.k, rounds=1, reps=args.reps, warmup=args.warmup)
    print(json.dumps({"one": got["x"].one, "many": got["x"].many}))


def all_rounds(args: argparse.Namespace, baseline: str | None) -> dict[str, Rounds]:
    """Every variant each round, in a rotated order."""
    here = ROOT / "src"
    plan = [("off", "off", here)]
    if not args.no_otlp:
        plan.append(("otlp", "otlp", here))
    if baseline is not None:
        plan.append(("baseline", "off", Path(baseline) / "src"))
    results = {name: Rounds() for name, _, _ in plan}
    for index in range(args.rounds):
        shift = index % len(plan)
        for name, variant, src in plan[shift:] + plan[:shift]:
            got = child_round(args, variant, src)
            results[name].one += got.one
            results[name].many += got.many
    return results


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


def report(results: dict[str, Rounds], k: int, clock: str) -> dict[str, Any]:
    per_step = {name: statistics.median(r.per_step_us(k)) for name, r in results.items()}
    off = per_step["off"]
    out: dict[str, Any] = {
        "bench": "tracing_cost", "k": k, "clock": clock,
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
    parser.add_argument(
        "--clock", choices=("cpu", "wall"), default="cpu",
        help="time runs by the process's CPU seconds (default: steady on a busy machine) or wall",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    parser.add_argument("--child", choices=("off", "otlp"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging(fmt="console", level="warning")  # a turn's info lines cost time too
    if args.child:
        asyncio.run(child(args))
        return 0
    with worktree(args.baseline) as src:
        result = report(all_rounds(args, src), args.k, args.clock)
    result["off_path_us_per_step"] = round(off_path_us(), 2)
    if not args.json:
        for name, value in result["per_step_us"].items():
            rounds = result["rounds_us"][name]
            print(f"{name:10} {value:8.1f} us ({args.clock}) per tool step   rounds {rounds}")
        if "ratio_off_to_baseline" in result:
            print(f"off / baseline ({args.baseline}): {result['ratio_off_to_baseline']}")
        share = result["off_path_us_per_step"] / result["per_step_us"]["off"]
        print(f"the off path alone: {result['off_path_us_per_step']} us per step ({share:.2%})")
        if "ratio_otlp_to_off" in result:
            print(f"otlp / off: {result['ratio_otlp_to_off']} "
                  f"(+{result['otlp_added_us_per_step']} us per step)")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
