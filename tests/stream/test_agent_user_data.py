"""An agent profile's ``user_data``: validated against the server's per-user sources
(``unknown_source``, a 422), and a chat with that agent sends the member's data (the demo's
``members.profile``, the JWT user being the member) as the user-data block."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from bosun_demo import seed_demo
from bosun_demo._tables import MemberRow
from conftest import ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply
from turn import TurnModels

TRAINER: dict[str, Any] = {"handle": "trainer", "name": "Trainer", "tools": ["members.*"]}


async def test_unknown_or_planner_sources_are_refused(make_server: ServerFactory) -> None:
    async with make_server() as server:
        owner = server.auth(role="owner")
        typo = await server.client.post(
            "/v1/agents", json={**TRAINER, "user_data": ["members.profil"]}, headers=owner
        )
        picked = await server.client.post(  # a planner-picked source is not per-user data
            "/v1/agents", json={**TRAINER, "user_data": ["schedule"]}, headers=owner
        )
        made = await server.client.post(
            "/v1/agents", json={**TRAINER, "user_data": ["members.profile"]}, headers=owner
        )

    for refused in (typo, picked):
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "unknown_source"
        assert "members.profile" in refused.json()["error"]["message"]  # what is offered
    assert made.status_code == 201 and made.json()["user_data"] == ["members.profile"]


async def test_a_chat_with_the_agent_carries_the_members_data(make_server: ServerFactory) -> None:
    seen: list[ModelRequest] = []

    def reply(request: ModelRequest) -> Reply:
        seen.append(request)
        if any("You are the planner" in b.text for b in request.system):
            return Reply(text=json.dumps({"strategy": "simple", "reasoning": "chat"}))
        return Reply(text="Hi Sam.")

    model = FunctionModel(reply, name="claude-haiku-4-5")
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, "acme")
        owner = server.auth(role="owner")
        body = {**TRAINER, "user_data": ["members.profile"]}
        assert (await server.client.post("/v1/agents", json=body, headers=owner)).is_success
        rivera = select(MemberRow.id).where(
            MemberRow.org_id == "acme", MemberRow.last_name == "Rivera"
        )
        async with server.store.db.read() as conn:
            sam = (await conn.execute(rivera)).scalar_one()
        member = server.auth(role="member", user=sam)  # the JWT user is the member
        frames = await stream_turn(server.client, {"message": "hi", "agent": "trainer"}, member)

    assert frames[-1].data["status"] == "completed"
    planner = seen[0]
    [block] = [b for b in planner.system if b.text.startswith("<user_data>")]
    assert block.cache
    assert "<members_profile>" in block.text and "Weight: kg" in block.text
    assert f"Member: Sam Rivera ({sam})" in block.text
