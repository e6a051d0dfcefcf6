"""Agent profiles over the real app: CRUD by role, the server's policy, versions, and chat
turns that run as the agent (its identity, its tools only, its approval policy)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import func, select

from bosun.settings import Settings
from bosun_demo import seed_demo
from bosun_demo._tables import WorkoutRow
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall
from store import Store
from turn import TurnModels

COACH: dict[str, Any] = {
    "handle": "coach",
    "name": "Coach",
    "identity_prompt": "You are Coach, the studio's scheduling assistant. Be brief.",
    "tools": ["members.*", "workouts.create"],
}

COACH_SELF = """<self>
You are the agent @coach, "Coach". You belong to the organisation (no person owns you).
Tools you may use: members.get, members.search, workouts.create.
Tools you may not use: 18 other tools here, not granted to you.
Your subscriptions (what starts your runs): none.
</self>"""
"""What coach knows about itself on the demo toolset (``fleet.self_block``)."""


def plan(**fields: Any) -> str:
    return json.dumps({"reasoning": "r", **fields})


async def create(server: Server, body: dict[str, Any], role: str = "owner") -> httpx.Response:
    return await server.client.post("/v1/agents", json=body, headers=server.auth(role=role))


async def test_owners_and_staff_write_agents_members_read_them(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        refused = await create(server, COACH, role="member")
        made = await create(server, COACH, role="staff")
        again = await create(server, COACH)
        listed = await server.client.get("/v1/agents", headers=server.auth(role="member"))
        other_org = await server.client.get("/v1/agents/coach", headers=server.auth(org="other"))

    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert made.status_code == 201
    body = made.json()
    assert (body["handle"], body["version"], body["limits"]["max_steps"]) == ("coach", 1, 30)
    assert body["runs_per_minute"] == 3 and body["paused"] is False
    assert again.status_code == 409 and again.json()["error"]["code"] == "agent_exists"
    assert [(a["handle"], a["version"]) for a in listed.json()] == [("coach", 1), ("default", 0)]
    assert other_org.status_code == 404  # one org never sees another's agents


async def test_updates_are_new_versions_and_deletion_keeps_them(make_server: ServerFactory) -> None:
    async with make_server() as server:
        owner = server.auth(role="owner")
        await create(server, COACH)
        body = {k: v for k, v in COACH.items() if k != "handle"} | {"name": "Coach 2"}
        updated = await server.client.put("/v1/agents/coach", json=body, headers=owner)
        read = await server.client.get("/v1/agents/coach", headers=owner)
        gone = await server.client.delete("/v1/agents/coach", headers=owner)
        missing = await server.client.get("/v1/agents/coach", headers=owner)
        recreated = await create(server, COACH)
        default = await server.client.delete("/v1/agents/default", headers=owner)
        store = server.store
        first = await store.agents.version("acme", "coach", 1)

    assert updated.status_code == 200 and updated.json()["version"] == 2
    assert read.json()["name"] == "Coach 2"
    assert gone.status_code == 204 and missing.status_code == 404
    assert recreated.json()["version"] == 3  # a version number is never reused
    assert first is not None and first["name"] == "Coach"  # old versions stay readable
    assert default.status_code == 409 and default.json()["error"]["code"] == "default_agent"


async def test_the_server_policy_refuses_profiles_whole(db_url: str) -> None:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        executor={"block_tools": ["workouts.delete"]},  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    async with Server(settings, TurnModels()) as server:
        blocked = await create(server, {**COACH, "tools": ["workouts.delete"]})
        unknown = await create(server, {**COACH, "tools": ["members.serch"]})
        model = await create(server, {**COACH, "models": {"planner": "openai:gpt-9"}})
        extra = await create(server, {**COACH, "colour": "blue"})
        bad_handle = await create(server, {**COACH, "handle": "Coach!"})
        steps = await create(server, {**COACH, "limits": {"max_steps": 51}})
        listed = await server.client.get("/v1/agents", headers=server.auth())

    assert blocked.status_code == 422 and blocked.json()["error"]["code"] == "tool_blocked"
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_tool"
    assert model.status_code == 422 and model.json()["error"]["code"] == "model_not_allowed"
    for response in (extra, bad_handle, steps):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"
    assert [a["handle"] for a in listed.json()] == ["default"]  # nothing was saved


async def workouts_titled(store: Store, title: str) -> int:
    async with store.db.read() as conn:
        count = await conn.scalar(select(func.count()).where(WorkoutRow.title == title))
    return int(count or 0)


def _tool_names(request: ModelRequest) -> set[str]:
    return {tool.name for tool in request.tools}


async def test_a_chat_runs_as_its_agent_and_never_sees_ungranted_tools(
    make_server: ServerFactory,
) -> None:
    planner_requests: list[ModelRequest] = []
    executor_requests: list[ModelRequest] = []

    def planner(request: ModelRequest) -> Reply:
        planner_requests.append(request)
        step = {"id": "s1", "goal": "Tidy up", "tools": ["members.search"], "max_tool_calls": 3}
        return Reply(text=plan(strategy="tool", steps=[step]))

    def executor(request: ModelRequest) -> Reply:
        executor_requests.append(request)
        if len(request.messages) == 1:  # calls a tool it was never given
            call = ToolCall(id="toolu_1", name="workouts_delete", input={"workout_id": "w_1"})
            return Reply(tool_calls=(call,))
        return Reply(text="Done.")

    models = TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        await create(server, COACH)
        frames = await stream_turn(
            server.client, {"message": "tidy up", "agent": "coach"}, server.auth(role="owner")
        )
        session_id = frames[0].data["session_id"]
        session = await server.store.sessions.get(session_id)
        other = await server.client.post(
            "/v1/chat",
            json={"message": "hi", "session_id": session_id, "agent": "default"},
            headers=server.auth(role="owner"),
        )

    identity = COACH["identity_prompt"] + "\n\n" + COACH_SELF  # then the instructions
    for request in (*planner_requests, *executor_requests):
        assert request.system[0].text == identity and not request.system[0].cache
        assert any(block.cache for block in request.system[1:])  # inside the cached prefix
    catalogue = "\n".join(block.text for block in planner_requests[0].system)
    assert "members.search" in catalogue and "workouts.delete" not in catalogue
    assert "workouts_delete" not in _tool_names(executor_requests[0])
    failed = next(f.data for f in frames if f.event == "tool_completed")
    assert failed["ok"] is False and failed["error"]["code"] == "tool_not_allowed"
    assert session is not None and session.agent == "coach"
    assert other.status_code == 409 and other.json()["error"]["code"] == "agent_mismatch"


async def test_an_agent_approval_policy_makes_a_write_wait_for_a_human(
    make_server: ServerFactory,
) -> None:
    step = {"id": "s1", "goal": "Add it", "tools": ["workouts.create"]}
    planner = ScriptedModel([plan(strategy="tool", steps=[step])])

    def executor(request: ModelRequest) -> Reply:
        call = ToolCall(id="toolu_1", name="workouts_create", input={"title": "Run"})
        return Reply(tool_calls=(call,))

    models = TurnModels(planner=planner, executor=FunctionModel(executor))
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        await create(server, {**COACH, "approvals": ["workouts.create"]})
        frames = await stream_turn(
            server.client, {"message": "add a run", "agent": "coach"}, server.auth(role="owner")
        )
        count = await workouts_titled(server.store, "Run")

    pending = next(f.data for f in frames if f.event == "confirmation_pending")
    assert pending["tool"] == "workouts.create" and pending["confirm"] == "always"
    assert frames[-1].data["status"] == "suspended" and count == 0  # nothing ran


async def test_a_paused_agent_takes_no_turns_and_an_unknown_one_is_404(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=ScriptedModel(["hi"]))) as server:
        await create(server, {**COACH, "paused": True})
        paused = await server.client.post(
            "/v1/chat", json={"message": "hi", "agent": "coach"}, headers=server.auth()
        )
        unknown = await server.client.post(
            "/v1/chat", json={"message": "hi", "agent": "nobody"}, headers=server.auth()
        )

    assert paused.status_code == 409 and paused.json()["error"]["code"] == "agent_paused"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


async def test_always_allowed_tools_join_every_profiles_grant(db_url: str) -> None:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        agents={"always_allowed": ["programs.list"]},  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    async with Server(settings, TurnModels()) as server:
        await create(server, COACH)
        directory = server.app.state["services"].agents
        coach = await directory.setup(await directory.get("acme", "coach"), org_id="acme")
        catalogue = coach.kit.catalogue("owner").tools

    assert "programs.list" in catalogue and "members.search" in catalogue
    assert "workouts.delete" not in catalogue and "programs.publish_bulk" not in catalogue
