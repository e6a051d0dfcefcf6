"""Start-up time of the ``bosun`` command beside a bare ``python -c pass``.

Each row is a fresh process, spawned the same way (``subprocess.run`` of the executable,
output discarded) and timed from spawn to exit; the rows take turns, run after run, so a
busy moment of the machine spreads over all of them. Reported: the median wall time, and
its ratio to (and excess over) ``python -c pass`` of the same interpreter.

``--help``, ``--version`` and ``COMMAND --help`` only parse (``bosun.cli_args``, standard
library only); ``bosun token`` is a command that runs: it loads the settings and the
packages behind them, which parsing never needs (``--token-runs 0`` leaves it out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

TARGET_S = 0.5  # issue 12: `bosun --help` and `bosun --version` within half a second
BOSUN = str(Path(sys.executable).with_name("bosun"))  # the console script pip installed
PARSE_ONLY = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "bosun --version": [BOSUN, "--version"],
    "bosun --help": [BOSUN, "--help"],
    "bosun plan --help": [BOSUN, "plan", "--help"],
}
TOKEN = {"bosun token (runs)": [BOSUN, "token", "--user", "bench", "--org", "bench"]}


def spawn_s(command: Sequence[str], *, env: dict[str, str], cwd: Path) -> float:
    """Wall seconds from spawning ``command`` to its exit; it must succeed."""
    start = time.perf_counter()
    subprocess.run(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start


def measure(
    rows: dict[str, list[str]], *, runs: int, warmup: int, env: dict[str, str], cwd: Path
) -> dict[str, list[float]]:
    """``runs`` timings per row, the rows interleaved; ``warmup`` rounds first, not kept."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for round_ in range(warmup + runs):
        for name, command in rows.items():
            seconds = spawn_s(command, env=env, cwd=cwd)
            if round_ >= warmup:
                times[name].append(seconds)
    return times


def report(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    floor = statistics.median(times["python -c pass"])
    result = {}
    for name, samples in times.items():
        median = statistics.median(samples)
        result[name] = {
            "runs": len(samples),
            "median_ms": round(median * 1000, 1),
            "min_ms": round(min(samples) * 1000, 1),
            "max_ms": round(max(samples) * 1000, 1),
            "ratio": round(median / floor, 2),
            "over_python_ms": round((median - floor) * 1000, 1),
        }
    return result


def render(rows: dict[str, dict[str, float]]) -> str:
    header = f"{'command':<22}{'runs':>5}{'median ms':>11}{'min':>8}{'max':>8}{'x pass':>8}"
    lines = [header + f"{'+ms':>8}", "-" * (len(header) + 8)]
    for name, row in rows.items():
        lines.append(
            f"{name:<22}{row['runs']:>5}{row['median_ms']:>11.1f}{row['min_ms']:>8.1f}"
            f"{row['max_ms']:>8.1f}{row['ratio']:>8.2f}{row['over_python_ms']:>8.1f}"
        )
    slowest = max(rows[name]["median_ms"] for name in ("bosun --version", "bosun --help"))
    verdict = "met" if slowest <= TARGET_S * 1000 else "MISSED"
    lines.append(
        f"target: bosun --help and --version <= {TARGET_S * 1000:.0f} ms: {verdict} "
        f"(slowest median {slowest:.1f} ms)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per parse-only row (20)")
    parser.add_argument("--token-runs", type=int, default=5, help="runs of bosun token (5; 0: off)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (2)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if args.runs < 1 or min(args.token_runs, args.warmup) < 0:
        parser.error("--runs must be >= 1; --token-runs and --warmup >= 0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_JWT_SECRET"] = secrets.token_urlsafe(48)  # so token signs without a warning
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:  # no bosun.toml here
        env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{Path(tmp) / 'unused.db'}"
        times = measure(PARSE_ONLY, runs=args.runs, warmup=args.warmup, env=env, cwd=Path(tmp))
        if args.token_runs:
            floor = {"python -c pass": PARSE_ONLY["python -c pass"]}
            token = measure(
                floor | TOKEN,
                runs=args.token_runs,
                warmup=min(args.warmup, 1),
                env=env,
                cwd=Path(tmp),
            )
            times |= {name: token[name] for name in TOKEN}
    rows = report(times)
    if not args.json:
        print(f"cli_start: Python {platform.python_version()}; {os.cpu_count()} CPUs; {BOSUN}")
        print(render(rows))
    print(json.dumps({"bench": "cli_start", "target_ms": TARGET_S * 1000, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
