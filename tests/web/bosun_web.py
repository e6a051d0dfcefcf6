"""A real ``bosun serve --dev`` for the browser tests: a subprocess on 127.0.0.1, a temporary
SQLite database and a scripted model written for the scenarios."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from playwright.async_api import Page

from bosun.settings import DEV_JWT_SECRET
from stream import TokenConfig, mint_token

DocsShot = Callable[[Page, str], Awaitable[None]]
"""``await docs_shot(page, name)``: the conftest fixture that writes a docs screenshot."""
BOSUN = [sys.executable, "-m", "bosun.cli"]
DEV_LINK = re.compile(r"Web chat, signed in: (http://\S+)")
# Titles come after a session's first answer; listed first, these steps always catch them.
TITLES = [{"match": "Write a short title", "text": f"Web session {i}"} for i in range(12)]


def free_port() -> int:
    # Not conftest's: tests/web/conftest.py takes the module name "conftest" in this folder.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Bosun:
    """A running ``bosun serve --dev``."""

    url: str
    link: str  # the signed-in web chat link it printed
    database_url: str
    db_path: Path
    env: Mapping[str, str]
    cwd: Path

    def token(self) -> str:
        return mint_token(
            TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner", ttl_s=3600
        )

    def page_url(self) -> str:
        return f"{self.url}/#token={self.token()}"

    def api(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token()}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def events(self, session_id: str) -> list[dict[str, Any]]:
        with self.api() as client:
            response = client.get(f"/v1/sessions/{session_id}/events")
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db_path) as db:
            return db.execute(sql, params).fetchall()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*BOSUN, *args], env=dict(self.env), cwd=self.cwd, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip


@contextmanager
def serve(workdir: Path, script: str, *, env: Mapping[str, str] | None = None) -> Iterator[Bosun]:
    """Start ``bosun serve --dev --model scripted:FILE`` and wait for its dev link.

    ``script`` is a YAML list of scripted-model steps (README, "Scripted models"); steps
    that answer the session-title calls go first.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    steps = yaml.safe_load(script)
    assert isinstance(steps, list), "the script is a YAML list of steps"
    script_path = workdir / "script.yaml"
    script_path.write_text(yaml.safe_dump({"steps": [*TITLES, *steps]}, sort_keys=False))
    db_path = workdir / "web.db"
    database_url = f"sqlite+aiosqlite:///{db_path}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    clean |= {"BOSUN_DATABASE_URL": database_url, "BOSUN_LOG_FORMAT": "json", **(env or {})}
    port = free_port()
    log_path = workdir / "serve.log"
    command = [*BOSUN, "serve", "--dev", "--port", str(port), "--model", f"scripted:{script_path}"]
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, env=clean, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, text=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        link = _wait_ready(url, log_path, process)
        yield Bosun(
            url=url, link=link, database_url=database_url, db_path=db_path, env=clean, cwd=workdir
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


START_S = 90
"""How long ``bosun serve`` may take to start: 2-3 s when the machine is quiet, but on a
busy 2-core machine its imports alone took over 30 s, failing every browser module."""


def _wait_ready(url: str, log_path: Path, process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"bosun serve exited: {log_path.read_text()}")
        found = DEV_LINK.search(log_path.read_text())
        try:
            healthy = httpx.get(f"{url}/healthz").status_code == 200
        except httpx.TransportError:
            healthy = False
        if found and healthy:
            return found.group(1)
        time.sleep(0.05)
    raise AssertionError(f"bosun serve did not start: {log_path.read_text()}")
