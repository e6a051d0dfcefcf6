"""``bosun chat``: a turn in-process with no server, and the session kept for later."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import DEMO
from events import UserMessage
from store import Store

HELLO = Path(__file__).parents[2] / "examples" / "hello.yaml"
PLANNER = "You are the planner of an assistant"


def bosun(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{db}"
    env["BOSUN_TOOLSETS"] = f'["{DEMO}"]'  # the demo studio's tools, tables and seed
    return subprocess.run(
        [sys.executable, "-m", "bosun.cli", *args],
        env=env, cwd=db.parent, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def answers() -> list[str]:
    steps = yaml.safe_load(HELLO.read_text())["steps"]
    return [" ".join(s["text"].split()) for s in steps if "You are Bosun" in s["match"]]


async def session_events(db: Path, session_id: str) -> list[str]:
    store = Store(f"sqlite+aiosqlite:///{db}")
    try:
        return [e.type for e in await store.log.read(session_id)]
    finally:
        await store.close()


def test_a_turn_runs_without_a_server_and_its_session_stays(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    model = f"scripted:{HELLO}"

    first = bosun("chat", "hello", "--model", model, db=db)
    session_id = first.stderr.strip().splitlines()[-1].split()[1].rstrip(":")
    again = bosun("chat", "and then?", "--session", session_id, "--model", model, "--json", db=db)

    assert first.returncode == 0, first.stderr
    said_id, answer = first.stdout.split("\n", 1)
    assert said_id == session_id  # the id first (SESSION=$(… | head -1)), then the answer
    assert " ".join(answer.split()) == answers()[0]
    assert "· plan simple" in first.stderr and '"status": "completed"' in first.stderr
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines()]
    assert events[0]["type"] == "session_started" and events[-1]["type"] == "done"
    assert events[-1]["session_id"] == session_id and events[-1]["status"] == "completed"
    kinds = asyncio.run(session_events(db, session_id))
    assert kinds.count("user_message") == 2 and kinds.count("done") == 2


def test_another_users_session_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    model = f"scripted:{HELLO}"
    first = bosun("chat", "hello", "--model", model, db=db)
    session_id = first.stderr.strip().splitlines()[-1].split()[1].rstrip(":")

    other = bosun("chat", "hi", "--session", session_id, "--user", "eve", "--model", model, db=db)

    assert other.returncode == 2 and "no session" in other.stderr


def test_the_turn_package_needs_no_http() -> None:
    probe = (
        "import sys, turn, bosun.chat_cli; print(sorted({'litestar', 'jwt'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "[]"


def test_an_answer_cut_short_says_so(tmp_path: Path) -> None:
    goal = "Count the programs for a brief"
    plan = {
        "strategy": "tool",
        "reasoning": "one lookup",
        "steps": [{"id": "s1", "goal": goal, "tools": ["programs.list"], "max_tool_calls": 1}],
    }
    script = tmp_path / "cut.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "steps": [
                    {"match": PLANNER, "text": json.dumps(plan)},
                    {"match": goal, "tool_calls": [{"id": "t1", "name": "programs_list"}]},
                    {"match": goal, "text": "Three programs so far."},
                    {"match": "Write a short title", "text": "Programs"},
                ]
            }
        )
    )

    ran = bosun("chat", "count programs", "--model", f"scripted:{script}", db=tmp_path / "c.db")

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1:] == ["Three programs so far."]
    assert "· answer cut short (max_tool_calls)" in ran.stderr.splitlines()


def test_a_session_with_a_running_turn_is_refused(tmp_path: Path) -> None:
    """One turn runs per session: a chat in a session whose turn runs elsewhere (a server)
    says so and starts nothing."""
    db = tmp_path / "chat.db"
    model = f"scripted:{HELLO}"
    first = bosun("chat", "hello", "--model", model, db=db)
    session_id = first.stderr.strip().splitlines()[-1].split()[1].rstrip(":")
    asyncio.run(running_elsewhere(db, session_id))

    again = bosun("chat", "and then?", "--session", session_id, "--model", model, db=db)

    assert again.returncode == 2 and "'elsewhere-1' is still running" in again.stderr
    assert asyncio.run(session_events(db, session_id)).count("user_message") == 2


async def running_elsewhere(db: Path, session_id: str) -> None:
    store = Store(f"sqlite+aiosqlite:///{db}")
    try:
        opening = [UserMessage(message_id="m-1", text="busy")]
        await store.log.open_turn(session_id, opening, turn_id="elsewhere-1", trace_id="tr")
    finally:
        await store.close()
