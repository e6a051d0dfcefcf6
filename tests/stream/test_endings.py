"""Honest endings, over HTTP: an answer a bound cut short says which bound in its
``message_done.stop_reason`` (``POST /v1/chat``'s ``stop_reason``, the session detail's
message), and a turn whose answer is empty is never ``completed``: it fails with the
step's code (docs/api.md#stop-reasons)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from bosun.settings import Settings
from conftest import DEMO, JWT_SECRET, OPEN_EGRESS, Server
from helpers import stream_turn, types
from providers import ScriptedModel
from turn import TurnModels

PLANNER = "You are the planner"
GOAL = "List the programs"
LIST = {"id": "t1", "name": "programs_list", "input": {}}


def tool_plan(**step: Any) -> dict[str, Any]:
    """The planner's reply: one ``tool`` step whose executor writes the answer."""
    body = {
        "strategy": "tool",
        "reasoning": "one lookup",
        "steps": [{"id": "s1", "goal": GOAL, "tools": ["programs.list"], **step}],
    }
    return {"match": PLANNER, "text": json.dumps(body)}


@contextlib.asynccontextmanager
async def served(db_url: str, model: ScriptedModel, **executor: float) -> AsyncIterator[Server]:
    """The app with the demo tools, ``model`` in every role and ``executor`` settings."""
    settings = Settings(
        database_url=db_url,
        jwt_secret=JWT_SECRET,
        toolsets=[DEMO],
        egress=OPEN_EGRESS,  # type: ignore[arg-type]
        executor=executor,  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    async with Server(settings, TurnModels(executor=model, planner=model)) as server:
        yield server


async def chat(server: Server) -> dict[str, Any]:
    reply = await server.client.post(
        "/v1/chat", json={"message": GOAL}, headers=server.auth(role="owner")
    )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_an_overrun_step_with_no_answer_fails_the_turn_with_step_overran(
    db_url: str,
) -> None:
    # One tool call allowed; asked to wrap up, the model calls a tool again and writes nothing.
    model = ScriptedModel(
        [
            tool_plan(max_tool_calls=1),
            {"match": GOAL, "tool_calls": [LIST]},
            {"match": GOAL, "tool_calls": [{**LIST, "id": "t2"}]},
        ]
    )
    async with served(db_url, model) as server:
        frames = await stream_turn(server.client, {"message": GOAL}, server.auth(role="owner"))
        turns = await server.store.sessions.turns(frames[0].data["session_id"])

    assert types(frames)[-2:] == ["error", "done"]
    error, done = frames[-2].data, frames[-1].data
    assert error["code"] == "step_overran" and "wrote no answer" in error["message"]
    assert done["status"] == "failed" and "partial" not in done
    assert turns[-1].status == "failed"
    assert "message_done" not in types(frames)
    model.assert_complete()


async def test_a_step_that_answers_nothing_fails_the_turn_with_empty_answer(
    db_url: str,
) -> None:
    model = ScriptedModel(
        [tool_plan(), {"match": GOAL, "tool_calls": [LIST]}, {"match": GOAL, "text": "  "}]
    )
    async with served(db_url, model) as server:
        body = await chat(server)

    assert (body["status"], body["error"]["code"]) == ("failed", "empty_answer")
    assert body["stop_reason"] is None
    model.assert_complete()


async def test_a_timed_out_answer_stands_cut_short_by_the_time_limit(db_url: str) -> None:
    # The step's second model call outlasts its wall time: what it said before stands.
    model = ScriptedModel(
        [
            tool_plan(),
            {"match": GOAL, "text": "Looking at the programs now.", "tool_calls": [LIST]},
            {"match": GOAL, "text": "Never seen.", "delay_s": 5},
        ]
    )
    async with served(db_url, model, wall_time_s=0.5) as server:
        body = await chat(server)
        detail = await server.client.get(
            f"/v1/sessions/{body['session_id']}", headers=server.auth(role="owner")
        )

    ends = [e["data"] for e in body["events"] if e["type"] == "message_done"]
    assert [end["stop_reason"] for end in ends] == ["time_limit"]
    assert (body["status"], body["stop_reason"], body["partial"]) == (
        "completed",
        "time_limit",
        True,
    )
    assert [f["code"] for f in body["failed_steps"]] == ["step_timed_out"]
    assert body["answer"] == "Looking at the programs now."
    [answer] = [m for m in detail.json()["messages"] if m["role"] == "assistant"]
    assert (answer["complete"], answer["stop_reason"]) == (True, "time_limit")


async def test_the_model_turn_limit_cuts_the_answer_short_with_max_model_turns(
    db_url: str,
) -> None:
    # Two model turns: the second is the last, tools off, and the model answers in it.
    model = ScriptedModel(
        [
            tool_plan(),
            {"match": GOAL, "tool_calls": [LIST]},
            {"match": GOAL, "text": "Three programs so far."},
        ]
    )
    async with served(db_url, model, max_model_turns=2) as server:
        body = await chat(server)

    assert (body["status"], body["stop_reason"], body["partial"]) == (
        "completed",
        "max_model_turns",
        False,
    )
    assert body["answer"] == "Three programs so far."
    assert model.calls[-1].tool_choice == "none"  # it was told to wrap up
    model.assert_complete()


async def test_an_answer_no_bound_cut_ends_with_end_turn(db_url: str) -> None:
    model = ScriptedModel(
        [tool_plan(), {"match": GOAL, "tool_calls": [LIST]}, {"match": GOAL, "text": "Three."}]
    )
    async with served(db_url, model) as server:
        body = await chat(server)

    assert (body["status"], body["stop_reason"], body["answer"]) == (
        "completed",
        "end_turn",
        "Three.",
    )
    model.assert_complete()
