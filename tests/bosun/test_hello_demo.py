"""The keyless demo, ``make serve`` with no provider key, answers sensibly every time.

``examples/hello.yaml`` routes each reply by ``match`` to one role (planner, answer,
title, summary), so no number of turns or sessions puts a plan where an answer or a
title belongs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from context import compress_history, make_title
from context._compress import SUMMARISER_PROMPT, TITLE_CHARS, TITLE_PROMPT
from executors import ANSWER_PROMPT, EXECUTOR_PROMPT, MERGE_PROMPT
from helpers import Frame, stream_turn
from planner import PLANNER_INSTRUCTIONS, Plan
from providers import Message, ScriptedModel
from stream import TokenConfig, mint_token

HELLO = Path(__file__).parents[2] / "examples" / "hello.yaml"
PROMPTS = {
    "planner": PLANNER_INSTRUCTIONS,
    "answer": ANSWER_PROMPT,
    "title": TITLE_PROMPT,
    "summariser": SUMMARISER_PROMPT,
    "executor": EXECUTOR_PROMPT,
    "merge": MERGE_PROMPT,
}
WORDS = re.compile(r"[A-Z][A-Za-z]*( [A-Za-z]+)+")


def _replies() -> dict[str, list[str]]:
    """hello.yaml's reply texts by the role whose prompt holds their ``match``."""
    steps: list[dict[str, Any]] = yaml.safe_load(HELLO.read_text())["steps"]
    by_role: dict[str, list[str]] = {}
    for step in steps:
        roles = [role for role, prompt in PROMPTS.items() if step["match"] in prompt]
        assert len(roles) == 1, f"{step['match']!r} is in the prompts of {roles}"
        by_role.setdefault(roles[0], []).append(step["text"])
    return by_role


def test_each_step_answers_exactly_one_role_and_plans_are_simple() -> None:
    replies = _replies()

    assert set(replies) == {"planner", "answer", "title", "summariser"}
    plans = [Plan.model_validate_json(text) for text in replies["planner"]]
    assert {(p.strategy, len(p.sources), len(p.steps)) for p in plans} == {("simple", 0, 0)}
    for text in replies["answer"] + replies["title"]:  # replies end up in later prompts
        assert not any(step in text for step in ("{", *PROMPTS.values())), text
    assert all(WORDS.fullmatch(t) and len(t) <= TITLE_CHARS for t in replies["title"])


async def test_titles_and_summaries_come_from_their_own_steps() -> None:
    model, replies = ScriptedModel.from_file(HELLO), _replies()
    history = [Message.user(f"message {i}") for i in range(30)]

    titles = [await make_title(model, "Hello there") for _ in replies["title"]]
    summary = await compress_history(model, history)

    assert titles == replies["title"]
    assert [summary] == replies["summariser"]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    """``bosun serve --dev --model scripted:examples/hello.yaml``, as ``make serve`` runs it
    with no key, on a free port with its own SQLite database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}"
    port = free_port()
    command = ["serve", "--dev", "--port", str(port), "--model", f"scripted:{HELLO}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "bosun.cli", *command],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert "turn.crashed" not in output, output


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "bosun serve exited early"
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("bosun serve did not start")


def _auth(user: str, org: str) -> dict[str, str]:
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user=user, org=org, role="owner", ttl_s=600)
    return {"Authorization": f"Bearer {token}"}


def _answer(frames: list[Frame]) -> str:
    """The turn's answer, after checking its transcript is a whole, simple, clean turn."""
    kinds = [f.event for f in frames if f.event not in ("text_delta", "context_budget")]
    assert kinds == [
        "session_started", "user_message", "plan_created", "message_done", "usage", "done",
    ], frames  # fmt: skip
    plan = next(f.data for f in frames if f.event == "plan_created")
    assert (plan["strategy"], plan.get("fallback")) == ("simple", None)
    assert frames[-1].data["status"] == "completed"
    return "".join(f.data["delta"] for f in frames if f.event == "text_delta")


async def test_three_turns_and_a_second_session_answer_sensibly(demo: str) -> None:
    replies = _replies()
    dev, other = _auth("dev", "dev-org"), _auth("ada", "acme")
    async with httpx.AsyncClient(base_url=demo, timeout=30) as client:
        first = await stream_turn(client, {"message": "Hello!"}, dev)
        session = first[0].data["session_id"]
        answers = [_answer(first)]
        for message in ("What can you do?", "Thanks, bye"):
            frames = await stream_turn(client, {"message": message, "session_id": session}, dev)
            answers.append(_answer(frames))
        second = await stream_turn(client, {"message": "Hi again"}, other)
        answers.append(_answer(second))
        titles = [
            (await client.get(f"/v1/sessions/{frames[0].data['session_id']}", headers=auth))
            .raise_for_status()
            .json()["title"]
            for frames, auth in ((first, dev), (second, other))
        ]

    # Each role takes its own replies in order, whatever the others do; a new session
    # starts at its script's first step, whatever other sessions did.
    assert answers == [*replies["answer"][:3], replies["answer"][0]]
    assert not any(answer.lstrip().startswith(("{", "[")) for answer in answers)
    assert titles == [replies["title"][0]] * 2
    assert all(WORDS.fullmatch(title) for title in titles)
    with pytest.raises(json.JSONDecodeError):
        json.loads(titles[0])
