"""The chat protocols driven by their real npm clients: each ``tests/node/*.test.mjs``
runs under ``node --test`` against a real ``bosun serve`` (SQLite, the demo toolset) whose
model is the scripted one next to it (``<name>.yaml``).

The clients' own validation is part of the test: the AI SDK rejects a part it does not
know, AG-UI's ``HttpAgent`` an event out of order. ``.ci/node.sh`` installs the pinned
clients (tests/node/package-lock.json); without them, the tests skip locally and fail in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from stream import TokenConfig, mint_token

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SCRIPTS = sorted(p.name.removesuffix(".test.mjs") for p in NODE_DIR.glob("*.test.mjs"))
NODE_TIMEOUT_S = 180


def _clients_installed() -> None:
    if shutil.which("node") and (NODE_DIR / "node_modules" / "ai").is_dir():
        return
    message = "the npm clients are not installed: run bash .ci/node.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _wait_healthy(url: str, server: subprocess.Popen[str], log: Path) -> None:
    for _ in range(600):
        if server.poll() is not None:
            raise AssertionError(f"bosun serve exited:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            threading.Event().wait(0.05)
    raise AssertionError(f"bosun serve at {url} did not start")


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """``bosun serve --dev`` on the scripted model of the test's name; the environment
    the node script reads (the URL and tokens)."""
    name: str = request.param
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'bosun.db'}"
    port = free_port()
    command = [sys.executable, "-m", "bosun.cli", "serve", "--dev", "--port", str(port),
               "--model", f"scripted:{NODE_DIR / (name + '.yaml')}"]  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield {
            "BOSUN_URL": url,
            "BOSUN_TOKEN": _token("dev", "dev-org", "owner"),
            "BOSUN_MEMBER_TOKEN": _token("sam", "dev-org", "member"),
            "BOSUN_OTHER_ORG_TOKEN": _token("eve", "other-org", "owner"),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def _token(user: str, org: str, role: str) -> str:
    return mint_token(TokenConfig(DEV_JWT_SECRET), user=user, org=org, role=role,  # type: ignore[arg-type]
                      ttl_s=3600)  # fmt: skip


@pytest.mark.parametrize("served", SCRIPTS, indirect=True)
def test_the_real_client(served: dict[str, str], request: pytest.FixtureRequest) -> None:
    _clients_installed()
    name = request.node.callspec.params["served"]
    env = {**os.environ, **served, "NODE_NO_WARNINGS": "1"}
    done = subprocess.run(
        ["node", "--test", "--test-reporter=spec", f"{name}.test.mjs"],
        cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
