"""Each test module's time, slowest first, printed after the run (``--module-times``).

``pytest --module-times -n 4 ...`` (README, "Tests") lists, per module, the worker that
ran it, its wall time (first test's start to last test's end, module fixtures included),
the CPU time the process and the children it reaped used meanwhile, and its number of
tests; with ``-n`` the workers' figures are gathered on the controller. It is how
``SLOWEST_FIRST`` in conftest.py was chosen and how to find what to share or split next.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest

SHOWN = 40
_KEY = "module_times"


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class ModuleTimes:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "-")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        module = item.nodeid.split("::", 1)[0]
        start, cpu = time.monotonic(), _cpu_s()
        yield
        row = self.rows.setdefault(
            module, {"worker": self.worker, "wall": 0.0, "cpu": 0.0, "tests": 0, "first": start}
        )
        row["wall"] = time.monotonic() - row["first"]
        row["cpu"] += _cpu_s() - cpu
        row["tests"] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # an xdist worker: hand the rows to the controller
            output[_KEY] = {
                m: {k: v for k, v in r.items() if k != "first"} for m, r in self.rows.items()
            }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        for module, row in getattr(node, "workeroutput", {}).get(_KEY, {}).items():
            # A module split over workers (conftest.py's SPLIT) gets a row per worker.
            key = module if module not in self.rows else f"{module} ({row['worker']})"
            self.rows[key] = row

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.rows:
            return
        rows = sorted(self.rows.items(), key=lambda item: -item[1]["wall"])
        write = terminalreporter.write_line
        terminalreporter.section("module times (wall, slowest first)")
        write(f"{'wall s':>8} {'cpu s':>8} {'tests':>6}  worker  module")
        for module, row in rows[:SHOWN]:
            wall, cpu, tests, worker = row["wall"], row["cpu"], row["tests"], row["worker"]
            write(f"{wall:8.1f} {cpu:8.1f} {tests:6d}  {worker:<6}  {module}")
        per_worker: dict[str, float] = {}
        for row in self.rows.values():
            per_worker[row["worker"]] = per_worker.get(row["worker"], 0.0) + row["wall"]
        write("per worker (sum of module walls): " + ", ".join(
            f"{worker} {total:.0f} s" for worker, total in sorted(per_worker.items())
        ))  # fmt: skip
