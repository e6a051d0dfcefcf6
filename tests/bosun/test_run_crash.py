"""A background run survives a kill -9 of its ``bosun serve`` (SQLite) mid-run: after a
restart the run is taken over from its log and completes, and its write ran exactly once
(the recorded call is replayed, not repeated)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from test_crash_sqlite import _serve, _wait_healthy

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from stream import TokenConfig, mint_token

WORDS = " ".join(f"word{i}" for i in range(300))
SCRIPT = f"""
repeat: true
steps:
  - match: "You are the planner"
    text: '{{"strategy": "tool", "reasoning": "one write", "steps": [{{"id": "s1",
      "goal": "Create the crash-test workout", "tools": ["workouts.create"]}}]}}'
  - match: "Create the crash-test workout"
    tool_calls: [{{id: toolu_create, name: workouts_create, input: {{title: "Crash test"}}}}]
  - match: "Create the crash-test workout"
    text: "{WORDS}"
    delay_s: 0.01
  - match: "Write a short title"
    text: "Crash test"
"""
AGENT = {"handle": "builder", "name": "Builder", "tools": ["workouts.*"]}


def _wrote(run: dict[str, Any]) -> bool:
    return any(call["status"] == "succeeded" for call in run.get("tool_calls", []))


def _until(client: httpx.Client, path: str, headers: dict[str, str], ok: Any) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = client.get(path, headers=headers).json()
        if ok(body):
            return body
        threading.Event().wait(0.05)
    raise AssertionError(f"{path} never got there: {body}")


def test_a_run_killed_mid_way_completes_after_a_restart_and_writes_once(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    env["BOSUN_WORKERS__LEASE_S"] = "1"  # a dead worker's run is taken over within ~1 s
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner",
                       ttl_s=600)  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _serve(port, env, tmp_path, script)
    try:
        _wait_healthy(url)
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/v1/agents", json=AGENT, headers=headers).status_code == 201
            queued = client.post(
                "/v1/agents/builder/runs", json={"task": "Build it"}, headers=headers
            )
            run_id = queued.json()["run_id"]
            # Kill once the write has run and the answer is streaming: mid-run.
            _until(client, f"/v1/runs/{run_id}", headers, _wrote)
            threading.Event().wait(0.3)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()

    restarted = _serve(port, env, tmp_path, script)
    try:
        _wait_healthy(url)
        with httpx.Client(base_url=url, timeout=30) as client:
            done = _until(client, f"/v1/runs/{run_id}", headers,
                          lambda b: b["status"] not in ("queued", "running"))  # fmt: skip
    finally:
        restarted.terminate()
        restarted.wait(timeout=15)

    assert done["status"] == "completed", done
    assert [c["status"] for c in done["tool_calls"]] == ["succeeded"]
    assert [r["action"] for r in done["resources"]] == ["workout.created"]  # written once
    assert done["answer"] is not None and done["answer"].endswith("word299")
