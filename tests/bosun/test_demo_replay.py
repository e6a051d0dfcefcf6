"""The README's demo conversation replays as documented on one database, in any order.

``bosun serve --dev --model scripted:examples/demo.yaml`` as ``make serve`` runs it: each
session keeps its own place in the script, a repeated delete says what really happened,
a restart puts the seeded workout back, and a message the script has no step for fails
``script_exhausted`` (naming the script, the role and the request), never ``internal``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bosun.commands import _lift_demo_limits
from bosun.settings import DEV_JWT_SECRET, Settings
from bosun_demo import seed_id
from conftest import free_port
from helpers import Frame, stream_post, stream_turn
from stream import TokenConfig, mint_token

DEMO = Path(__file__).parents[2] / "examples" / "demo.yaml"
ENGINE = seed_id("dev-org", "wo", 4)  # the seeded "Engine builder" workout the script names
SAM = "Set Sam Rivera up with an intro workout"
DELETE = "Delete the Engine builder workout"
DELETED = "Deleted the Engine builder workout."
GONE = "Nothing was deleted: the Engine builder workout no longer exists."
DECLINED = "I did not delete the Engine builder workout: you declined."
HEADERS = {
    "Authorization": "Bearer "
    + mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner", ttl_s=600)
}


@contextlib.contextmanager
def serving(tmp_path: Path, log: list[str]) -> Iterator[str]:
    """One ``serve --dev`` process on ``tmp_path``'s database (its output joins ``log``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bosun.cli", "serve", "--dev", "--port", str(port),
         "--model", f"scripted:{DEMO}"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _healthy(url):
            assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        log.append(process.communicate(timeout=30)[0])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False


def said(frames: list[Frame]) -> str:
    return "".join(f.data["delta"] for f in frames if f.event == "text_delta")


def answer(frames: list[Frame]) -> str:
    return "".join(
        f.data["delta"] for f in frames if f.event == "text_delta" and "step_id" not in f.data
    )


def outline(frames: list[Frame]) -> list[str]:
    """The README's notation: events with their step or tool, less budgets and deltas."""
    shown = []
    for f in frames:
        if f.event in ("context_budget", "text_delta"):
            continue
        name = f.data.get("step_id") if f.event.startswith("step_") else f.data.get("tool")
        shown.append(f"{f.event}({name})" if name and f.event != "tool_completed" else f.event)
    return shown


def check_first_turn(frames: list[Frame]) -> None:
    """Turn 1 as the README shows it: s1 and s2 side by side, then s3's undoable write."""
    kinds = outline(frames)
    assert kinds[:4] == ["session_started", "user_message", "plan_created", "context_loaded"]
    assert kinds[-3:] == ["message_done", "usage", "done"], kinds
    assert sorted(kinds[4:6]) == ["step_started(s1)", "step_started(s2)"], kinds
    assert kinds.index("step_started(s3)") > max(
        kinds.index("step_completed(s1)"), kinds.index("step_completed(s2)")
    )
    created = next(f.data for f in frames if f.data.get("tool_use_id") == "toolu_create_workout"
                   and f.event == "tool_completed")  # fmt: skip
    assert (created["ok"], created["inverse_available"]) == (True, True)
    assert answer(frames).startswith("Done: I found Sam Rivera, checked the beginner programs")
    assert frames[-1].data["status"] == "completed"


def check_suspended(frames: list[Frame]) -> None:
    """Turn 2 stops for the user's confirmation of the destructive delete."""
    asked = next(f.data for f in frames if f.event == "confirmation_pending")
    assert (asked["tool_use_id"], asked["tool"], asked["confirm"]) == (
        "toolu_delete_workout", "workouts.delete", "destructive",
    )  # fmt: skip
    assert asked["input"] == {"workout_id": ENGINE}
    assert outline(frames)[-2:] == ["usage", "done"] and frames[-1].data["status"] == "suspended"


def check_resumed(frames: list[Frame], *, ok: bool, error: str | None, text: str) -> None:
    """The confirmed turn streams on; its answer says what the delete really did."""
    kinds = outline(frames)
    completed = next(f.data for f in frames if f.event == "tool_completed")
    assert kinds == [
        "tool_resolved", "tool_started(workouts.delete)", "tool_completed",
        "step_completed(s1)", "message_done", "usage", "done",
    ]  # fmt: skip
    assert completed["ok"] is ok and (completed.get("error") or {}).get("code") == error
    if ok:
        assert completed["output"]["id"] == ENGINE
    assert said(frames) == text
    assert frames[-1].data["status"] == "completed"


async def play(client: httpx.AsyncClient, *, deleted: bool) -> str:
    """The README's conversation in a new session: turn 1, undo, turn 2, approve."""
    first = await stream_turn(client, {"message": SAM}, HEADERS)
    check_first_turn(first)
    session = first[0].data["session_id"]
    undo = await client.post(f"/v1/sessions/{session}/undo/toolu_create_workout", headers=HEADERS)
    assert undo.status_code == 200, undo.text
    undone = undo.json()
    assert (undone["tool_use_id"], undone["undone"], undone["ok"]) == (
        "toolu_create_workout-undo", "toolu_create_workout", True,
    )  # fmt: skip
    assert (undone["output"]["title"], undone["output"]["deleted"]) == (
        "Intro strength for Sam", True,
    )  # fmt: skip
    check_suspended(await stream_turn(client, {"message": DELETE, "session_id": session}, HEADERS))
    approved = await confirm(client, session, approved=True)
    if deleted:
        check_resumed(approved, ok=True, error=None, text=DELETED)
    else:  # the first pass deleted it: the answer says so, never "Deleted"
        check_resumed(approved, ok=False, error="not_found", text=GONE)
    return session


async def confirm(client: httpx.AsyncClient, session: str, *, approved: bool) -> list[Frame]:
    path = f"/v1/sessions/{session}/confirm/toolu_delete_workout"
    return await stream_post(client, path, {"approved": approved}, HEADERS)


async def title(client: httpx.AsyncClient, session: str) -> Any:
    return (await client.get(f"/v1/sessions/{session}", headers=HEADERS)).json()["title"]


async def test_the_demo_plays_twice_then_out_of_order_on_one_database(tmp_path: Path) -> None:
    log: list[str] = []
    with serving(tmp_path, log) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            first = await play(client, deleted=True)
            second = await play(client, deleted=False)  # same server: the workout is gone
            titles = [await title(client, first), await title(client, second)]
    # `make serve` again on the same database: --dev restores the seeded workout.
    with serving(tmp_path, log) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            # Out of order: the delete first in a new session, then turn 1 after it.
            deleting = await stream_turn(client, {"message": DELETE}, HEADERS)
            check_suspended(deleting)
            later = deleting[0].data["session_id"]
            check_resumed(await confirm(client, later, approved=True), ok=True, error=None,
                          text=DELETED)  # fmt: skip
            check_first_turn(await stream_turn(client, {"message": SAM, "session_id": later},
                                               HEADERS))  # fmt: skip
            # Declined in another session: nothing runs, and the answer says so.
            declining = await stream_turn(client, {"message": DELETE}, HEADERS)
            check_suspended(declining)
            check_resumed(
                await confirm(client, declining[0].data["session_id"], approved=False),
                ok=False, error="rejected_by_user", text=DECLINED,
            )  # fmt: skip
            # A message the script has no step for: script_exhausted, naming the cause.
            hello = await stream_turn(client, {"message": "Say hello to the new members"},
                                      HEADERS)  # fmt: skip
            titles.append(await title(client, later))
            # --dev with a scripted model: an agent's runs_per_minute stops no walkthrough.
            made = await client.post("/v1/agents", headers=HEADERS, json={
                "handle": "coach", "name": "Coach", "tools": ["members.*"],
                "runs_per_minute": 3,
            })  # fmt: skip
            runs = [
                await client.post(
                    "/v1/agents/coach/runs", json={"task": f"Run {i}"}, headers=HEADERS
                )
                for i in range(4)
            ]

    assert titles == ["Sam's intro plan", "Sam's intro plan", "Deleting Engine builder"]
    error = next(f.data for f in hello if f.event == "error")
    assert error["code"] == "script_exhausted"
    assert "'scripted:demo.yaml'" in error["message"] and "for the planner" in error["message"]
    assert "Say hello to the new members" in error["message"]
    assert hello[-1].data["status"] == "failed"
    assert made.status_code == 201, made.text
    assert [run.status_code for run in runs] == [202, 202, 202, 202]
    output = "\n".join(log)
    assert output.count("no per-user token limit and no agent run rate limit") == 2
    assert "turn.crashed" not in output and "turn.script_exhausted" in output
    assert "Say hello" not in output  # the request's words go to its client, never the log


@pytest.mark.parametrize(
    ("models", "lifted"),
    [
        ({"default": "scripted:demo.yaml"}, True),
        ({"planner": "scripted:a.yaml", "executor": "scripted:b.yaml"}, True),
        ({"default": "scripted:demo.yaml", "planner": "anthropic:claude-haiku-4-5"}, False),
        ({"default": "scripted:demo.yaml", "allowed": ["openai:gpt-4.1-mini"]}, False),
        ({}, False),
    ],
)
def test_dev_lifts_the_limits_only_when_every_model_is_scripted(
    models: dict[str, Any], lifted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(models=models)  # type: ignore[arg-type]

    _lift_demo_limits(settings)

    assert settings.limits.tokens_per_minute == (0 if lifted else 30_000)
    assert settings.agents.rate_limits is not lifted
    assert ("no per-user token limit" in capsys.readouterr().err) is lifted
