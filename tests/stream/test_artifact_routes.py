"""Artifacts over the real app: a scripted turn generates a workout and delivers it with
message_notify_user (the payload in the SSE event), then the artifact routes read it,
by version, for its owner only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bosun.settings import Settings
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, Server
from helpers import Frame, stream_turn, types
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage, ToolCall
from turn import TurnModels

TRAINER_BUDGETS = {"executor": {"tools": 2_000}}
"""The trainer's workout schema alone is ~770 tokens: more than a default step's tools."""

WORKOUT = {
    "title": "Quick chest workout",
    "exercises": [
        {
            "exercise_name": "Push-up",
            "exercise_type": "reps",
            "sets": 3,
            "reps": [12, 10, 8],
            "rest_sec": 60,
            "muscles_utilized": [
                {"muscle": "Chest", "share": 0.7},
                {"muscle": "Triceps", "share": 0.3},
            ],
            "goals_addressed": [{"goal": "strength", "share": 1.0}],
            "reasoning": "Bodyweight chest staple.",
        }
    ],
}


def _plan() -> str:
    step = {
        "id": "s1",
        "goal": "Make a chest workout and deliver it",
        "tools": ["trainer.generate_workout", "trainer.remove_exercise", "message.notify_user"],
        "max_tool_calls": 4,
    }
    return json.dumps({"reasoning": "r", "strategy": "tool", "steps": [step]})


def _last_result(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        for part in message.parts:
            content = getattr(part, "content", None)
            if content is not None:
                return str(content)
    return ""


def trainer_models(artifact_id: str | None = None) -> tuple[TurnModels, list[str]]:
    """A planner that plans one step, and an executor that generates a workout, then
    notifies the user with the id its result named (or ``artifact_id``), then answers."""
    seen: list[str] = []

    def executor(request: ModelRequest) -> Reply:
        usage = TokenUsage(input_tokens=100, output_tokens=10)
        calls = sum(1 for m in request.messages if m.role == "assistant")
        if calls == 0:
            call = ToolCall(
                id="toolu_gen", name="trainer_generate_workout", input={"workout": WORKOUT}
            )
            return Reply(tool_calls=(call,), usage=usage)
        if calls == 1:
            result = _last_result(request)
            seen.append(result)
            made = json.loads(result.split("\n", 1)[0])["artifact_id"]
            notify = {"message": "Here is your workout", "artifact_id": artifact_id or made}
            call = ToolCall(id="toolu_notify", name="message_notify_user", input=notify)
            return Reply(tool_calls=(call,), usage=usage)
        return Reply(text="Done.", usage=usage)

    planner = ScriptedModel([_plan()])
    return TurnModels(planner=planner, executor=FunctionModel(executor)), seen


TrainerServer = Callable[[TurnModels], Server]


@pytest.fixture
def make_server(db_url: str) -> TrainerServer:
    """A served app whose executors have room for the trainer's tool schemas."""

    def factory(models: TurnModels) -> Server:
        limits = {"requests_per_minute": 0, "tokens_per_minute": 0}
        settings = Settings(
            toolsets=[DEMO],
            database_url=db_url, jwt_secret=JWT_SECRET, budgets=TRAINER_BUDGETS,
            limits=limits,  # type: ignore[arg-type]
        )  # fmt: skip
        return Server(settings, models)

    return factory


def _one(frames: list[Frame], kind: str) -> dict[str, Any]:
    [data] = [f.data for f in frames if f.event == kind]
    return data


async def test_a_generated_workout_is_delivered_with_its_payload_and_readable(
    make_server: TrainerServer,
) -> None:
    models, seen = trainer_models()
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        auth = server.auth()
        frames = await stream_turn(
            server.client, {"message": "Give me a quick chest workout"}, auth
        )
        assert frames[-1].data["status"] == "completed"
        kinds = [k for k in types(frames) if k in {"tool_completed", "artifact", "agent_message"}]
        assert kinds == ["tool_completed", "artifact", "tool_completed", "agent_message"]

        saved = _one(frames, "artifact")
        artifact_id = saved["artifact_id"]
        assert artifact_id.startswith("art_")
        assert saved == {
            "type": "artifact", "artifact_id": artifact_id, "version": 1,
            "artifact_type": "workout", "schema_version": "1", "title": "Quick chest workout",
            "summary": "Quick chest workout: 1 exercises (1. Push-up)",
            "tool_use_id": "toolu_gen", "step_id": "s1",
        }  # fmt: skip
        # The model saw the artifact as a tag, and was told to deliver it.
        assert f'<artifact type="workout" id="{artifact_id}" version="1">' in seen[0]
        assert f"message_notify_user with artifact_id={artifact_id}" in seen[0]

        message = _one(frames, "agent_message")
        assert (message["text"], message["artifact_id"]) == ("Here is your workout", artifact_id)
        assert "warning" not in message
        payload = message["artifact"]["payload"]
        assert payload["exercises"][0]["exercise_name"] == "Push-up"
        assert payload["exercises"][0]["id"].startswith("ex_")

        session_id = frames[0].data["session_id"]
        listed = await server.client.get(f"/v1/sessions/{session_id}/artifacts", headers=auth)
        assert listed.status_code == 200, listed.text
        [summary] = listed.json()["artifacts"]
        assert (summary["id"], summary["version"], summary["type"]) == (artifact_id, 1, "workout")
        assert "payload" not in summary

        detail = await server.client.get(
            f"/v1/sessions/{session_id}/artifacts/{artifact_id}", headers=auth
        )
        assert detail.status_code == 200, detail.text
        assert detail.json()["payload"] == payload

        # The log holds the events too: a re-read of the session replays them.
        events = await server.client.get(f"/v1/sessions/{session_id}/events", headers=auth)
        logged = [e["type"] for e in events.json()["events"]]
        assert "artifact" in logged and "agent_message" in logged


async def test_versions_and_visibility_of_artifacts(make_server: TrainerServer) -> None:
    models, _ = trainer_models()
    async with make_server(models) as server:
        auth = server.auth()
        frames = await stream_turn(server.client, {"message": "chest workout"}, auth)
        session_id = frames[0].data["session_id"]
        artifact_id = _one(frames, "artifact")["artifact_id"]
        record = await server.store.artifacts.get(session_id, artifact_id)
        assert record is not None
        revised = await server.store.artifacts.revise(
            session_id, artifact_id, turn_id=record.turn_id, tool_use_id="toolu_x",
            title="Renamed", summary="s", payload={**record.payload, "title": "Renamed"},
        )  # fmt: skip
        assert revised is not None and revised.version == 2
        base = f"/v1/sessions/{session_id}/artifacts"

        latest = await server.client.get(f"{base}/{artifact_id}", headers=auth)
        first = await server.client.get(f"{base}/{artifact_id}?version=1", headers=auth)
        assert (latest.json()["version"], latest.json()["title"]) == (2, "Renamed")
        assert (first.json()["version"], first.json()["title"]) == (1, "Quick chest workout")
        [listed] = (await server.client.get(base, headers=auth)).json()["artifacts"]
        assert listed["version"] == 2

        for url, status, code in [
            (f"{base}/{artifact_id}?version=3", 404, "not_found"),
            (f"{base}/art_{'0' * 24}", 404, "not_found"),
            (f"{base}/not-an-artifact", 400, "invalid_request"),
            (f"{base}/{artifact_id}?version=0", 400, "invalid_request"),
            (f"{base}/{artifact_id}?version=x", 400, "invalid_request"),
        ]:
            response = await server.client.get(url, headers=auth)
            assert response.status_code == status, (url, response.text)
            assert response.json()["error"]["code"] == code, url

        # Another user of the org, and another org, see neither the list nor the artifact.
        for other in (server.auth(user="bob"), server.auth(org="globex")):
            for url in (base, f"{base}/{artifact_id}"):
                response = await server.client.get(url, headers=other)
                assert response.status_code == 404, url
                assert response.json()["error"]["code"] == "not_found"
        # The org's owner sees the whole org's sessions, and so their artifacts.
        owner = await server.client.get(f"{base}/{artifact_id}", headers=server.auth(role="owner"))
        assert owner.status_code == 200


async def test_notify_with_an_unknown_artifact_is_a_warning_not_a_failure(
    make_server: TrainerServer,
) -> None:
    unknown = "art_" + "f" * 24
    models, _ = trainer_models(artifact_id=unknown)
    async with make_server(models) as server:
        frames = await stream_turn(server.client, {"message": "chest workout"}, server.auth())
    assert frames[-1].data["status"] == "completed"
    message = _one(frames, "agent_message")
    assert (message["text"], message["artifact_id"]) == ("Here is your workout", unknown)
    assert "artifact" not in message and unknown in message["warning"]
    notified = [f.data for f in frames if f.event == "tool_completed"][-1]
    assert notified["ok"] is True and unknown in notified["output"]["warning"]
