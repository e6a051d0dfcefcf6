"""GET /v1/sessions/{id} over the real app: each message with its tool calls (status,
output, error, artifacts, step), so a client draws a past session without its raw log."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bosun.settings import Settings
from bosun_demo import seed_demo, seed_id
from conftest import DEMO, JWT_SECRET, Server
from helpers import stream_post, stream_turn
from providers import Reply, ScriptedModel, ToolCall
from turn import TurnModels

WORKOUT = {
    "title": "Leg day",
    "exercises": [
        {
            "exercise_name": "Squat",
            "exercise_type": "reps",
            "sets": 3,
            "reps": [10, 8, 6],
            "rest_sec": 90,
            "muscles_utilized": [{"muscle": "Quadriceps", "share": 1.0}],
            "goals_addressed": [{"goal": "strength", "share": 1.0}],
            "reasoning": "The staple.",
        }
    ],
}
MAKE_TOOLS = ["trainer.generate_workout", "members.get", "workouts.create"]


def _plan(goal: str, tools: list[str], calls: int) -> str:
    step = {"id": "s1", "goal": goal, "tools": tools, "max_tool_calls": calls}
    return json.dumps({"reasoning": "r", "strategy": "tool", "steps": [step]})


def _call(tool_use_id: str, name: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(id=tool_use_id, name=name, input=args),))


def _models() -> TurnModels:
    """Turn 1 makes a workout artifact, fails a lookup and creates a workout (undone
    later); turns 2 and 3 each delete a workout, which waits for confirmation."""
    planner = ScriptedModel(
        [
            _plan("Make a workout and check the member", MAKE_TOOLS, 4),
            _plan("Delete the tempo run", ["workouts.delete"], 1),
            _plan("Delete the engine builder", ["workouts.delete"], 1),
        ]
    )
    executor = ScriptedModel(
        [
            _call("toolu_gen", "trainer_generate_workout", workout=WORKOUT),
            _call("toolu_get", "members_get", member_id="mem_ghost"),
            _call("toolu_create", "workouts_create", title="Leg day"),
            "Made it.",
            _call("toolu_del", "workouts_delete", workout_id=seed_id("acme", "wo", 1)),
            "Deleted.",
            _call("toolu_del2", "workouts_delete", workout_id=seed_id("acme", "wo", 4)),
            "Kept it.",
        ]
    )
    return TurnModels(planner=planner, executor=executor)


@pytest.fixture
def server(db_url: str) -> Server:
    settings = Settings(
        toolsets=[DEMO], database_url=db_url, jwt_secret=JWT_SECRET,
        budgets={"executor": {"tools": 2_000}},  # the trainer's workout schema is large
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )  # fmt: skip
    return Server(settings, _models())


def _calls(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool_use_id"]: c for m in detail["messages"] for c in m["tool_calls"]}


async def test_the_detail_lists_each_messages_tool_calls_with_their_outcomes(
    server: Server,
) -> None:
    async with server:
        await seed_demo(server.store, "acme")
        auth = server.auth(role="owner")
        client = server.client
        frames = await stream_turn(client, {"message": "make me a leg workout"}, auth)
        session_id = frames[0].data["session_id"]
        url = f"/v1/sessions/{session_id}"
        undone = await client.post(f"{url}/undo/toolu_create", headers=auth)
        assert undone.json()["ok"] is True, undone.text
        body = {"message": "delete the tempo run", "session_id": session_id}
        await stream_turn(client, body, auth)
        waiting = (await client.get(url, headers=auth)).json()
        await stream_post(client, f"{url}/confirm/toolu_del", {"approved": True}, auth)
        body = {"message": "delete the engine builder", "session_id": session_id}
        await stream_turn(client, body, auth)
        await stream_post(client, f"{url}/confirm/toolu_del2", {"approved": False}, auth)
        detail = (await client.get(url, headers=auth)).json()
        rival = await client.get(url, headers=server.auth(user="eve", org="rival", role="owner"))
        other_member = await client.get(url, headers=server.auth(user="bob"))

    # While the delete waits, its turn has an incomplete assistant message holding it.
    assert waiting["status"] == "suspended"
    pending = waiting["messages"][-1]
    assert (pending["role"], pending["complete"], pending["text"]) == ("assistant", False, "")
    [asked] = pending["tool_calls"]
    assert (asked["tool"], asked["status"]) == ("workouts.delete", "pending_confirmation")

    roles = [(m["role"], m["text"], m["complete"]) for m in detail["messages"]]
    assert roles == [
        ("user", "make me a leg workout", True),
        ("assistant", "Made it.", True),
        ("user", "delete the tempo run", True),
        ("assistant", "Deleted.", True),
        ("user", "delete the engine builder", True),
        ("assistant", "Kept it.", True),
    ]
    assert [len(m["tool_calls"]) for m in detail["messages"]] == [0, 3, 0, 1, 0, 1]
    [step] = detail["messages"][1]["steps"]
    assert (step["step_id"], step["goal"], step["status"]) == (
        "s1", "Make a workout and check the member", "ok",
    )  # fmt: skip
    calls = _calls(detail)
    made = calls["toolu_gen"]
    assert (made["tool"], made["status"], made["step_id"]) == (
        "trainer.generate_workout",
        "ok",
        "s1",
    )
    assert made["step_goal"] == "Make a workout and check the member"
    assert made["input"] == {"workout": WORKOUT}
    [artifact] = made["artifacts"]
    assert artifact["id"].startswith("art_")
    assert {k: artifact[k] for k in ("version", "type", "title")} == {
        "version": 1, "type": "workout", "title": "Leg day",
    }  # fmt: skip
    failed = calls["toolu_get"]
    assert (failed["status"], failed["output"], failed["error"]["code"]) == (
        "error", None, "not_found",
    )  # fmt: skip
    assert "mem_ghost" in failed["error"]["message"]
    created = calls["toolu_create"]
    assert (created["status"], created["undone_by"]) == ("undone", "toolu_create-undo")
    assert created["output"]["title"] == "Leg day"
    assert not created["output_truncated"] and created["output_summary"] is None
    assert (calls["toolu_del"]["status"], calls["toolu_del"]["decision"]) == ("ok", "approved")
    rejected = calls["toolu_del2"]
    assert (rejected["status"], rejected["decision"]) == ("rejected", "rejected")
    assert rejected["error"]["code"] == "rejected_by_user"
    seqs = [m["seq"] for m in detail["messages"]]
    assert seqs == sorted(seqs) and seqs[0] > 0
    assert {m["turn_id"] for m in detail["messages"]} == {t["id"] for t in detail["turns"]}
    # Another org, or another member of the org: the session does not exist for them.
    for refused in (rival, other_member):
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "not_found"
