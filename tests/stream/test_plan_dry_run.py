"""POST /v1/plan: the planner-only dry run touches no tool and writes nothing."""

from __future__ import annotations

import json

from sqlalchemy import text

from bosun_demo import seed_demo
from conftest import ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage
from turn import TurnModels

COMPLEX = {
    "strategy": "complex",
    "reasoning": "Two lookups, then a write.",
    "sources": [{"name": "schedule", "why": "classes", "params": {"days_ahead": 7}}],
    "steps": [
        {"id": "s1", "goal": "find Sam", "tools": ["members.search"], "max_tool_calls": 2},
        {"id": "s2", "goal": "list programs", "tools": ["programs.list"], "max_tool_calls": 1},
        {
            "id": "s3",
            "goal": "create a workout",
            "tools": ["workouts.create"],
            "depends_on": ["s1", "s2"],
            "max_tool_calls": 1,
        },
    ],
}


async def _counts(server: object) -> dict[str, int]:
    store = server.store  # type: ignore[attr-defined]
    async with store.db.read() as conn:
        return {
            table: (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()  # noqa: S608
            for table in ("sessions", "events", "usage", "workouts", "audit_log")
        }


async def test_a_dry_run_plans_allocates_and_estimates_without_writing(
    make_server: ServerFactory,
) -> None:
    planner = FunctionModel(
        lambda _r: Reply(
            text=json.dumps(COMPLEX), usage=TokenUsage(input_tokens=2_000, output_tokens=200)
        ),
        name="anthropic:claude-haiku-4-5",
    )
    answerer = FunctionModel(lambda _r: "never called", name="anthropic:claude-sonnet-4-5")
    async with make_server(TurnModels(planner=planner, executor=answerer)) as server:
        await seed_demo(server.store, "acme")
        before = await _counts(server)
        response = await server.client.post(
            "/v1/plan",
            json={"message": "Book Sam into a program"},
            headers=server.auth(role="owner"),
        )
        after = await _counts(server)
    assert response.status_code == 200, response.text
    body = response.json()
    assert after == before  # no session, no event, no usage row, no domain row
    assert body["plan"]["strategy"] == "complex"
    assert [s["id"] for s in body["plan"]["steps"]] == ["s1", "s2", "s3"]
    assert body["context"]["sources"] == [
        {"name": "schedule", "why": "classes", "params": {"days_ahead": 7}, "action": "load"}
    ]
    assert body["budget"]["planner"]["role"] == "planner"
    assert body["budget"]["executor"]["steps"]["s1"] == {
        "max_tool_calls": 2,
        "tokens_per_call": 8100,
    }
    assert body["budget"]["merger"]["results"] == 2000
    estimate = body["estimate"]
    assert estimate["model_calls"] == (3 + 2 + 2) + 1
    assert estimate["cost_usd_micros"] > 0
    assert body["usage"]["input_tokens"] == 2_000
    assert body["usage"]["cost_usd_micros"] == 2_000 * 1 + 200 * 5  # Haiku: $1 / $5 per MTok
    assert answerer.calls == []


async def test_a_dry_run_in_a_session_knows_what_is_loaded(make_server: ServerFactory) -> None:
    pick = {
        "strategy": "simple",
        "reasoning": "r",
        "sources": [{"name": "schedule", "params": {"days_ahead": 7}}],
    }
    planner = ScriptedModel([json.dumps(pick)] * 3)

    def answer(_request: ModelRequest) -> str:
        return "ok"

    async with make_server(TurnModels(planner=planner, executor=FunctionModel(answer))) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        frames = await stream_turn(server.client, {"message": "what's on?"}, headers)
        session_id = frames[0].data["session_id"]
        events_before = len(await server.store.log.read(session_id))
        dry = await server.client.post(
            "/v1/plan", json={"message": "and now?", "session_id": session_id}, headers=headers
        )
        assert len(await server.store.log.read(session_id)) == events_before
        assert dry.json()["context"]["sources"][0]["action"] == "already_loaded"
        assert "schedule {'days_ahead': 7}" in planner.calls[1].messages[-1].text
        other = await server.client.post(
            "/v1/plan",
            json={"message": "x", "session_id": session_id},
            headers=server.auth(org="other", role="owner"),
        )
        assert other.status_code == 404


async def test_without_a_planner_the_dry_run_says_how_to_configure_one(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        response = await server.client.post(
            "/v1/plan", json={"message": "x"}, headers=server.auth()
        )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "agent_disabled"
