"""The routes the web page's agent editor reads besides the agents API: the catalogue of
what a profile may name (tools by router, the blocked ones marked) and a saved version
(what the next one changed)."""

from __future__ import annotations

from typing import Any

from bosun.settings import Settings
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from providers import ScriptedModel
from store import McpToolsetSpec
from turn import TurnModels

COACH: dict[str, Any] = {"handle": "coach", "name": "Coach", "tools": ["members.*"]}


async def test_the_catalogue_groups_tools_by_router_and_marks_the_blocked(db_url: str) -> None:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        executor={"block_tools": ["workouts.delete"]},  # type: ignore[arg-type]
        agents={"always_allowed": ["programs.list"]},  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    offered = {"scripted:b": ScriptedModel([]), "scripted:a": ScriptedModel([])}
    async with Server(settings, TurnModels(selectable=offered)) as server:
        spec = McpToolsetSpec(transport="http", url="http://127.0.0.1:9/")
        await server.store.mcp_toolsets.put("acme", "tickets", spec)
        staff = await server.client.get("/v1/catalogue", headers=server.auth(role="staff"))
        member = await server.client.get("/v1/catalogue", headers=server.auth(role="member"))
        other = await server.client.get(
            "/v1/catalogue", headers=server.auth(org="other", role="owner")
        )

    assert staff.status_code == 200, staff.text
    body = staff.json()
    tools = {t["name"]: t for t in body["tools"]}
    assert [t["name"] for t in body["tools"]] == sorted(tools)
    assert tools["workouts.delete"] | {"summary": ""} == {
        "name": "workouts.delete", "router": "workouts", "summary": "", "blocked": True,
        "always_allowed": False, "confirm": "destructive",
    }  # fmt: skip
    assert (
        not tools["workouts.create"]["blocked"] and tools["members.search"]["router"] == "members"
    )
    assert tools["programs.list"]["always_allowed"] and not tools["programs.list"]["blocked"]
    assert body["toolsets"] == [{"name": "tickets", "kind": "mcp"}]
    assert body["models"] == ["scripted:a", "scripted:b"]
    assert member.status_code == 403 and member.json()["error"]["code"] == "forbidden"
    assert other.json()["toolsets"] == []  # another org's toolsets stay its own


async def test_a_saved_version_stays_readable_in_its_org_only(make_server: ServerFactory) -> None:
    async with make_server() as server:
        owner = server.auth(role="owner")
        await server.client.post("/v1/agents", json=COACH, headers=owner)
        body = {"name": "Coach", "identity_prompt": "Be brief.", "tools": ["workouts.*"]}
        await server.client.put("/v1/agents/coach", json=body, headers=owner)
        get = server.client.get
        first = await get("/v1/agents/coach/versions/1", headers=server.auth(role="member"))
        second = await get("/v1/agents/coach/versions/2", headers=owner)
        builtin = await get("/v1/agents/default/versions/0", headers=owner)
        missing = await get("/v1/agents/coach/versions/3", headers=owner)
        elsewhere = await get(
            "/v1/agents/coach/versions/1", headers=server.auth(org="other", role="owner")
        )
        huge = await get(f"/v1/agents/coach/versions/{2**63}", headers=owner)
        negative = await get("/v1/agents/coach/versions/-1", headers=owner)
        bad_handle = await get("/v1/agents/Coach!/versions/1", headers=owner)

    assert first.status_code == 200, first.text
    assert (first.json()["version"], first.json()["tools"]) == (1, ["members.*"])
    assert (second.json()["version"], second.json()["identity_prompt"]) == (2, "Be brief.")
    assert builtin.json()["version"] == 0 and builtin.json()["handle"] == "default"
    for response in (missing, elsewhere):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    for response in (huge, negative):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"
    assert bad_handle.status_code == 404  # as GET /v1/agents/{handle}: no such agent
