"""Start-up time of the ``bosun`` command beside a bare ``python -c pass``.

Each row is a fresh process, spawned the same way (``subprocess.run`` of the executable,
output discarded) and timed from spawn to exit; the rows take turns, run after run, so a
busy moment of the machine spreads over all of them. Reported: the median wall time, and
its ratio to (and excess over) ``python -c pass`` of the same interpreter.

``--help``, ``--version`` and ``COMMAND --help`` only parse (``bosun.cli_args``, standard
library only); ``bosun token`` is a command that runs: it loads the settings and the
packages behind them, which parsing never needs (``--token-runs 0`` leaves it out).
``import bosun.commands, bosun.app`` is what every command that runs (and every server)
imports; with ``--baseline TREE_OR_REV`` the same import of that tree's code (a directory
holding ``src/``, or a revision checked out in a temporary ``git worktree``) takes turns
with it, and the report gives their ratio. Each row also reports the child's CPU time
(user + system), the figure a busy CI machine pays.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _harness import _absolute_pythonpath

TARGET_S = 0.5  # issue 12: `bosun --help` and `bosun --version` within half a second
BOSUN = str(Path(sys.executable).with_name("bosun"))  # the console script pip installed
ROOT = Path(__file__).resolve().parents[1]
PARSE_ONLY = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "bosun --version": [BOSUN, "--version"],
    "bosun --help": [BOSUN, "--help"],
    "bosun plan --help": [BOSUN, "plan", "--help"],
}
TOKEN = {"bosun token (runs)": [BOSUN, "token", "--user", "bench", "--org", "bench"]}
IMPORT = "import bosun.commands, bosun.app"
"""What every command that runs, and every server, imports before doing anything."""
IMPORTS = "import (this tree)"
BASELINE = "import (baseline)"


def spawn_s(command: Sequence[str], *, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds from spawning ``command`` to its exit (it must succeed), and the CPU
    seconds (user + system) the child used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


Times = dict[str, list[tuple[float, float]]]
"""Per row, each run's (wall, CPU) seconds."""


def measure(
    rows: dict[str, list[str]],
    *,
    runs: int,
    warmup: int,
    env: dict[str, str],
    cwd: Path,
    envs: dict[str, dict[str, str]] | None = None,
) -> Times:
    """``runs`` timings per row, the rows interleaved; ``warmup`` rounds first, not kept.
    ``envs``: a row's own environment, in place of ``env``."""
    times: Times = {name: [] for name in rows}
    for round_ in range(warmup + runs):
        for name, command in rows.items():
            got = spawn_s(command, env=(envs or {}).get(name, env), cwd=cwd)
            if round_ >= warmup:
                times[name].append(got)
    return times


def report(times: Times) -> dict[str, dict[str, float]]:
    floor = statistics.median(wall for wall, _ in times["python -c pass"])
    result = {}
    for name, samples in times.items():
        walls = [wall for wall, _ in samples]
        median = statistics.median(walls)
        result[name] = {
            "runs": len(samples),
            "median_ms": round(median * 1000, 1),
            "min_ms": round(min(walls) * 1000, 1),
            "max_ms": round(max(walls) * 1000, 1),
            "ratio": round(median / floor, 2),
            "over_python_ms": round((median - floor) * 1000, 1),
            "cpu_ms": round(statistics.median(cpu for _, cpu in samples) * 1000, 1),
        }
    return result


def render(rows: dict[str, dict[str, float]]) -> str:
    header = f"{'command':<22}{'runs':>5}{'median ms':>11}{'min':>8}{'max':>8}{'x pass':>8}"
    lines = [header + f"{'+ms':>8}{'cpu ms':>8}", "-" * (len(header) + 16)]
    for name, row in rows.items():
        lines.append(
            f"{name:<22}{row['runs']:>5}{row['median_ms']:>11.1f}{row['min_ms']:>8.1f}"
            f"{row['max_ms']:>8.1f}{row['ratio']:>8.2f}{row['over_python_ms']:>8.1f}"
            f"{row['cpu_ms']:>8.1f}"
        )
    slowest = max(rows[name]["median_ms"] for name in ("bosun --version", "bosun --help"))
    verdict = "met" if slowest <= TARGET_S * 1000 else "MISSED"
    lines.append(
        f"target: bosun --help and --version <= {TARGET_S * 1000:.0f} ms: {verdict} "
        f"(slowest median {slowest:.1f} ms)"
    )
    if BASELINE in rows:
        ratios = against_baseline(rows)
        lines.append(f"{IMPORTS} / {BASELINE}: wall {ratios['wall']:.2f}, cpu {ratios['cpu']:.2f}")
    return "\n".join(lines)


def against_baseline(rows: dict[str, dict[str, float]]) -> dict[str, float]:
    """This tree's import over the baseline's, from the same run: wall and CPU medians."""
    here, there = rows[IMPORTS], rows[BASELINE]
    return {
        "wall": round(here["median_ms"] / there["median_ms"], 3),
        "cpu": round(here["cpu_ms"] / there["cpu_ms"], 3),
    }


@contextlib.contextmanager
def baseline_src(tree_or_rev: str | None) -> Iterator[Path | None]:
    """The baseline's ``src``: a directory's own, or a revision's in a temporary ``git
    worktree`` (removed after), as ``tracing_cost.py`` makes it."""
    if tree_or_rev is None:
        yield None
        return
    if Path(tree_or_rev).is_dir():
        yield Path(tree_or_rev).resolve() / "src"
        return
    git = shutil.which("git")
    assert git is not None, "--baseline REV needs git"
    path = tempfile.mkdtemp(prefix="bosun-baseline-")
    subprocess.run(
        [git, "-C", str(ROOT), "worktree", "add", "-q", "--detach", path, tree_or_rev],
        check=True,
    )
    try:
        yield Path(path) / "src"
    finally:
        subprocess.run([git, "-C", str(ROOT), "worktree", "remove", "--force", path], check=False)


def import_rows(
    env: dict[str, str], baseline: Path | None
) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """The import rows (``python -c pass`` first, the floor) and their environments: each
    tree's ``src`` first on ``PYTHONPATH`` (not the installed package, which may be
    another checkout's)."""
    trees = {IMPORTS: ROOT / "src"} | ({BASELINE: baseline} if baseline is not None else {})
    rows = {"python -c pass": PARSE_ONLY["python -c pass"]}
    envs = {}
    for name, src in trees.items():
        rows[name] = [sys.executable, "-c", IMPORT]
        envs[name] = env | {"PYTHONPATH": str(src)}
    return rows, envs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per parse-only row (20)")
    parser.add_argument("--token-runs", type=int, default=5, help="runs of bosun token (5; 0: off)")
    parser.add_argument(
        "--import-runs", type=int, default=5, help=f"runs of {IMPORT!r} (5; 0: off)"
    )
    parser.add_argument(
        "--baseline", metavar="TREE_OR_REV", help="also time that tree's (or revision's) import"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (2)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if args.runs < 1 or min(args.token_runs, args.import_runs, args.warmup) < 0:
        parser.error("--runs must be >= 1; --token-runs, --import-runs and --warmup >= 0")
    if args.baseline and not args.import_runs:
        parser.error("--baseline compares the import rows: --import-runs must be >= 1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env |= _absolute_pythonpath()  # the processes run in a temporary directory
    env["BOSUN_JWT_SECRET"] = secrets.token_urlsafe(48)  # so token signs without a warning
    with (
        tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp,  # no bosun.toml here
        baseline_src(args.baseline) as baseline,
    ):
        env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{Path(tmp) / 'unused.db'}"
        times = measure(PARSE_ONLY, runs=args.runs, warmup=args.warmup, env=env, cwd=Path(tmp))
        times |= slow_rows(args, env, Path(tmp), baseline)
    rows = report(times)
    result = {"bench": "cli_start", "target_ms": TARGET_S * 1000, "rows": rows}
    if BASELINE in rows:
        result |= {"baseline": args.baseline, "import_vs_baseline": against_baseline(rows)}
    if not args.json:
        print(f"cli_start: Python {platform.python_version()}; {os.cpu_count()} CPUs; {BOSUN}")
        print(f"loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(render(rows))
    print(json.dumps(result))
    return 0


def slow_rows(
    args: argparse.Namespace, env: dict[str, str], cwd: Path, baseline: Path | None
) -> Times:
    """The rows of a command that runs (``bosun token``) and of the import, each with
    ``python -c pass`` taking turns again (its figures are kept from the fast rows)."""
    times: Times = {}
    warmup = min(args.warmup, 1)
    if args.token_runs:
        floor = {"python -c pass": PARSE_ONLY["python -c pass"]}
        token = measure(floor | TOKEN, runs=args.token_runs, warmup=warmup, env=env, cwd=cwd)
        times |= {name: token[name] for name in TOKEN}
    if args.import_runs:
        rows, envs = import_rows(env, baseline)
        got = measure(rows, runs=args.import_runs, warmup=warmup, env=env, cwd=cwd, envs=envs)
        times |= {name: got[name] for name in rows if name != "python -c pass"}
    return times


if __name__ == "__main__":
    sys.exit(main())
