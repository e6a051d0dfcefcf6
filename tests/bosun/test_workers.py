"""Two ``bosun serve`` workers on one PostgreSQL behave as one service, even when one dies.

A turn starts on worker A; once its write tool has run, A is killed with SIGKILL. Worker B
takes the turn over when A's lease runs out and finishes it; a client that re-attaches to
B gets every event exactly once and shows the answer once (B's ``message_reset`` drops A's
cut-off words), the log has no gap or duplicate, and the write ran once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from httpx_sse import connect_sse

from bosun.settings import DEV_JWT_SECRET
from conftest import DEMO, free_port
from helpers import shown_answer
from stream import TokenConfig, mint_token

BOSUN = [sys.executable, "-m", "bosun.cli"]
Popen = subprocess.Popen[str]
GOAL = "Create the mobility workout"
ANSWER = "Created the Mobility reset workout for you, thirty minutes long."
LEASE_S = 2
SCRIPT = f"""
steps:
  - match: "You are the planner"
    text: >-
      {{"strategy": "tool", "reasoning": "one write",
        "steps": [{{"id": "s1", "goal": "{GOAL}", "tools": ["workouts.create"]}}]}}
    usage: {{input_tokens: 321}}
  - match: "{GOAL}"
    tool_calls: [{{id: toolu_w, name: workouts_create,
                   input: {{title: "Mobility reset", duration_min: 30}}}}]
  - match: "{GOAL}"
    text: "{ANSWER}"
    delay_s: 0.4
  - match: "Write a short title"
    text: "Mobility workout"
"""


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture
def workers(postgres_url: str, tmp_path: Path) -> Iterator[tuple[list[str], list[Popen]]]:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env |= {"BOSUN_DATABASE_URL": postgres_url, "BOSUN_WORKERS__LEASE_S": str(LEASE_S)}
    env["BOSUN_TOOLSETS"] = f'["{DEMO}"]'  # migrated here, loaded (and seeded) by the workers
    migrate = subprocess.run([*BOSUN, "migrate"], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    assert migrate.returncode == 0, migrate.stderr
    ports = [free_port(), free_port()]
    processes = [_serve(port, script, env, tmp_path) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url in urls:
            _wait_healthy(url)
        yield urls, processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=15)


def _serve(port: int, script: Path, env: dict[str, str], cwd: Path) -> Popen:
    command = [*BOSUN, "serve", "--dev", "--no-migrate", "--port", str(port)]
    return subprocess.Popen(
        [*command, "--model", f"scripted:{script}"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _wait_healthy(url: str) -> None:
    for _ in range(400):
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"bosun serve at {url} did not start")


@pytest.mark.postgres
async def test_a_killed_workers_turn_finishes_on_the_other(
    workers: tuple[list[str], list[Popen]], postgres_url: str
) -> None:
    (url_a, url_b), (worker_a, _) = workers
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner", ttl_s=600
    )
    headers = {"Authorization": f"Bearer {token}"}
    seen: list[tuple[int, str, dict[str, object]]] = []
    with httpx.Client(base_url=url_a, timeout=30) as client:
        body = {"message": "Create a 30 minute mobility workout"}
        with connect_sse(client, "POST", "/v1/chat/stream", json=body, headers=headers) as events:
            for sse in events.iter_sse():
                seen.append((int(sse.id), sse.event, json.loads(sse.data)))
                if sse.event == "text_delta":  # the write ran; the answer is streaming
                    break
    session_id = str(seen[0][2]["session_id"])
    db = await asyncpg.connect(_dsn(postgres_url))
    holder = await db.fetchval("SELECT worker_id FROM turns")
    assert f":{worker_a.pid}:" in holder  # A runs it
    os.kill(worker_a.pid, signal.SIGKILL)
    killed = time.monotonic()
    worker_a.wait(timeout=10)

    last = seen[-1][0]
    rest: list[tuple[int, str, dict[str, object]]] = []
    reset_after_s = None
    with httpx.Client(base_url=url_b, timeout=60) as client:
        stream_headers = {**headers, "Last-Event-ID": str(last)}
        with connect_sse(client, "GET", f"/v1/sessions/{session_id}/stream",
                         headers=stream_headers) as events:  # fmt: skip
            for sse in events.iter_sse():
                rest.append((int(sse.id), sse.event, json.loads(sse.data)))
                if sse.event == "message_reset":  # B's first event, once the lease ran out
                    reset_after_s = time.monotonic() - killed
        detail = client.get(f"/v1/sessions/{session_id}", headers=headers).json()

    try:
        seqs = [r["seq"] for r in await db.fetch("SELECT seq FROM events ORDER BY seq")]
        writes = await db.fetchval("SELECT count(*) FROM workouts WHERE title = 'Mobility reset'")
        execution = await db.fetchval(
            "SELECT status FROM tool_executions WHERE tool_use_id = 'toolu_w'"
        )
        turn = await db.fetchrow("SELECT status, worker_id FROM turns")
    finally:
        await db.close()

    ids = [i for i, _, _ in seen] + [i for i, _, _ in rest]
    assert len(ids) == len(set(ids)) and ids == sorted(ids)  # every event once, in order
    assert seqs == list(range(1, len(seqs) + 1))  # the log: no gap, no duplicate
    streamed = {i for i, _, _ in seen} | {i for i, _, _ in rest}
    assert streamed >= set(seqs) - {s for s in seqs if s > ids[-1]}
    assert rest[-1][1] == "done" and rest[-1][2]["status"] == "completed"
    assert writes == 1 and execution == "succeeded"  # the write ran once
    assert (turn["status"], turn["worker_id"]) == ("completed", None)
    # A's cut-off words are dropped by the reset: the client shows the stored answer once.
    assert reset_after_s is not None and reset_after_s < LEASE_S + 3, reset_after_s
    assert shown_answer(seen + rest) == detail["messages"][-1]["text"] == ANSWER
    by_role: Any = next(data["by_role"] for _, kind, data in rest if kind == "usage")
    assert by_role["planner"]["input_tokens"] == 321  # A's planner call, in B's usage


@pytest.mark.postgres
async def test_a_background_run_whose_worker_dies_completes_once_on_the_other(
    workers: tuple[list[str], list[Popen]], postgres_url: str
) -> None:
    urls, processes = workers
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner", ttl_s=600
    )
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=urls[0], timeout=30, headers=headers) as client:
        agent = {"handle": "builder", "name": "Builder", "tools": ["workouts.*"]}
        assert (await client.post("/v1/agents", json=agent)).status_code == 201
        queued = await client.post("/v1/agents/builder/runs", json={"task": GOAL})
    run_id = queued.json()["run_id"]
    db = await asyncpg.connect(_dsn(postgres_url))
    try:
        for _ in range(400):  # until the write has run: the run is mid-way
            if await db.fetchval("SELECT status FROM tool_executions") == "succeeded":
                break
            await asyncio.sleep(0.02)
        holder = str(await db.fetchval("SELECT worker_id FROM turns"))
        dead = next(i for i, p in enumerate(processes) if f":{p.pid}:" in holder)
        os.kill(processes[dead].pid, signal.SIGKILL)
        processes[dead].wait(timeout=10)
        run = await _until_ended(urls[1 - dead], headers, run_id)
        writes = await db.fetchval("SELECT count(*) FROM workouts WHERE title = 'Mobility reset'")
    finally:
        await db.close()

    assert run["status"] == "completed", run
    assert writes == 1 and [c["status"] for c in run["tool_calls"]] == ["succeeded"]
    assert [r["action"] for r in run["resources"]] == ["workout.created"]  # written once


async def _until_ended(url: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as client:
        for _ in range(600):
            run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if run["status"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.05)
    return run
