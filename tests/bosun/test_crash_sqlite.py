"""A ``bosun serve`` on SQLite killed (SIGKILL) while its writer thread commits batches:
every event any client received is in the log after a restart, unchanged, and the log has
no gap. Group commit answers a write only after its batch committed, so nothing a client
saw can be lost, whatever the kill interrupted. A turn killed mid-answer is taken over at
once by the restarted server, and a client shows its answer once (``message_reset``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from httpx_sse import connect_sse

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from helpers import shown_answer
from stream import TokenConfig, mint_token

BOSUN = [sys.executable, "-m", "bosun.cli"]
WORDS = " ".join(f"word{i}" for i in range(400))
SCRIPT = f"""
repeat: true
steps:
  - match: "You are the planner"
    text: '{{"strategy": "simple", "reasoning": "talk"}}'
  - match: "You are Bosun"
    text: "{WORDS}"
    delay_s: 0.002
  - match: "Write a short title"
    text: "Many words"
"""
Frame = tuple[int, str, dict[str, object]]


def _serve(port: int, env: dict[str, str], cwd: Path, script: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*BOSUN, "serve", "--dev", "--port", str(port), "--model", f"scripted:{script}"],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _wait_healthy(url: str) -> None:
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            threading.Event().wait(0.05)
    raise AssertionError(f"bosun serve at {url} did not start")


def _listen(url: str, headers: dict[str, str], message: str, seen: list[Frame]) -> None:
    """Stream one turn into ``seen`` until the server dies under it."""
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            body = {"message": message}
            with connect_sse(client, "POST", "/v1/chat/stream", json=body, headers=headers) as es:
                for sse in es.iter_sse():
                    seen.append((int(sse.id), sse.event, json.loads(sse.data)))
    except (httpx.TransportError, httpx.RemoteProtocolError):
        pass  # the server was killed mid-stream


def test_events_a_client_saw_survive_a_kill_of_the_writer(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner",
                       ttl_s=600)  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _serve(port, env, tmp_path, script)
    seen: list[list[Frame]] = [[] for _ in range(3)]
    try:
        _wait_healthy(url)
        listeners = [
            threading.Thread(target=_listen, args=(url, headers, f"talk {i}", seen[i]))
            for i in range(3)
        ]
        for listener in listeners:
            listener.start()
        # Kill once every turn is well into its answer: the writer is committing batches.
        for _ in range(600):
            if all(sum(f[1] == "text_delta" for f in frames) >= 40 for frames in seen):
                break
            threading.Event().wait(0.01)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        for listener in listeners:
            listener.join(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()

    assert all(len(frames) > 40 for frames in seen), [len(f) for f in seen]
    assert not any(f[1] == "done" for frames in seen for f in frames)  # killed mid-turn
    restarted = _serve(port, env, tmp_path, script)
    try:
        _wait_healthy(url)
        with httpx.Client(base_url=url, timeout=30) as client:
            for frames in seen:
                session_id = frames[0][2]["session_id"]
                logged = client.get(f"/v1/sessions/{session_id}/events", headers=headers)
                assert logged.status_code == 200, logged.text
                rows = {e["seq"]: (e["type"], e["data"]) for e in logged.json()["events"]}
                seqs = sorted(rows)
                assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate
                for seq, kind, data in frames:  # every event the client saw, as it saw it
                    assert rows.get(seq) == (kind, data), (seq, kind)
    finally:
        restarted.terminate()
        restarted.wait(timeout=15)


COUNT = " ".join(f"w{i}" for i in range(40))
SLOW_SCRIPT = f"""
repeat: true
steps:
  - match: "You are the planner"
    text: '{{"strategy": "simple", "reasoning": "talk"}}'
    usage: {{input_tokens: 321, output_tokens: 7}}
  - match: "You are Bosun"
    text: "{COUNT}"
    delay_s: 0.05
  - match: "Write a short title"
    text: "Counting"
"""


def test_a_killed_answer_is_taken_over_at_once_and_told_once(tmp_path: Path) -> None:
    """kill -9 after the 7th word, restart, re-attach: the restarted server (SQLite: the
    only possible owner) takes the turn over at once, and a client honouring
    ``message_reset`` shows the stored answer once, with no word repeated."""
    script = tmp_path / "script.yaml"
    script.write_text(SLOW_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner",
                       ttl_s=600)  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    seen: list[Frame] = []
    server = _serve(port, env, tmp_path, script)
    try:
        _wait_healthy(url)
        with httpx.Client(base_url=url, timeout=30) as client:
            body = {"message": "count to forty"}
            with connect_sse(client, "POST", "/v1/chat/stream", json=body, headers=headers) as es:
                for sse in es.iter_sse():
                    seen.append((int(sse.id), sse.event, json.loads(sse.data)))
                    if sum(f[1] == "text_delta" for f in seen) == 7:
                        break
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()

    session_id = seen[0][2]["session_id"]
    rest: list[tuple[float, Frame]] = []
    restarted = _serve(port, env, tmp_path, script)
    try:
        _wait_healthy(url)
        healthy = time.monotonic()
        with httpx.Client(base_url=url, timeout=30) as client:
            stream_headers = {**headers, "Last-Event-ID": str(seen[-1][0])}
            path = f"/v1/sessions/{session_id}/stream"
            with connect_sse(client, "GET", path, headers=stream_headers) as es:
                for sse in es.iter_sse():
                    frame = (int(sse.id), sse.event, json.loads(sse.data))
                    rest.append((time.monotonic() - healthy, frame))
            detail = client.get(f"/v1/sessions/{session_id}", headers=headers).json()
    finally:
        restarted.terminate()
        restarted.wait(timeout=15)

    frames = seen + [f for _, f in rest]
    stored = detail["messages"][-1]
    usage = next(data for _, kind, data in frames if kind == "usage")
    assert rest[0][0] < 3.0, rest[0]  # the next event: no wait for the dead lease
    assert [kind for _, kind, _ in frames].count("message_reset") == 1
    assert shown_answer(frames) == stored["text"] == COUNT  # every word once
    assert stored["role"] == "assistant" and frames[-1][1] == "done"
    assert usage["by_role"]["planner"]["input_tokens"] == 321  # the dead attempt's call
