"""What the benchmarks share: ports, uvicorn's fast loop, server processes, /proc CPU time."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def loop_and_http() -> tuple[str, str]:
    """uvloop and httptools when installed (uvicorn[standard]), else the pure-Python ones."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return loop, http


def raise_exit(signum: int, _frame: FrameType | None) -> None:
    """A SIGTERM handler that unwinds (so ``finally`` blocks and profiles still run)."""
    raise SystemExit(128 + signum)


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads); None where /proc is missing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


SECRET_ENV = "BOSUN_BENCH_JWT_SECRET"  # noqa: S105 (the variable's name, not a secret)


def spawn_server(
    script: str, args: list[str], *, secret: str, workdir: Path, profile: Path | None
) -> subprocess.Popen[bytes]:
    """Run ``script --serve ARGS`` (a benchmark's own server mode) in ``workdir``, with the
    signing secret in its environment and its output on our stderr."""
    command = [sys.executable, str(Path(script).resolve()), "--serve", *args]
    if profile is not None:
        command += ["--profile", str(profile)]
    return subprocess.Popen(
        command,
        env={**os.environ, SECRET_ENV: secret, **_absolute_pythonpath()},
        stdout=sys.stderr,  # keep this process's stdout for the results
        cwd=workdir,  # no stray bosun.toml from the caller's directory
    )


def _absolute_pythonpath() -> dict[str, str]:
    """``PYTHONPATH`` with its entries made absolute: the servers run in a temporary
    directory, where ``PYTHONPATH=src`` would name nothing and the installed package (the
    main checkout's code, not this one's) would be measured instead."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if not entries:
        return {}
    return {"PYTHONPATH": os.pathsep.join(str(Path(e).resolve()) for e in entries)}


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (uvicorn shuts down gracefully), then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_healthy(
    client: httpx.AsyncClient, base_url: str, process: subprocess.Popen[bytes], name: str
) -> None:
    """Poll ``/healthz`` until it answers 200; fail early if the server process died."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} server exited with {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            response = await client.get(f"{base_url}/healthz", timeout=1.0)
            if response.status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{name} server not ready after {READY_TIMEOUT_S:.0f}s")


def run_on_loop(main: Coroutine[Any, Any, T], loop: str = "uvloop") -> T:
    """Run ``main`` on uvloop (as the servers run) when asked and installed, else asyncio."""
    if loop == "uvloop" and importlib.util.find_spec("uvloop"):
        result: T = importlib.import_module("uvloop").run(main)
        return result
    return asyncio.run(main)
