"""``GET /v1/sessions/{id}/budget``: the token-budget report of served turns, over HTTP."""

from __future__ import annotations

import json
from typing import Any

from bosun_demo import seed_demo
from conftest import ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage
from turn import TurnModels

MODEL = "claude-haiku-4-5"  # a priced model, so costs are not 0
PLANNER_USAGE = TokenUsage(
    input_tokens=500, output_tokens=50, cache_read_tokens=1_500, cache_write_tokens=200
)
MERGER_USAGE = TokenUsage(input_tokens=300, output_tokens=40, cache_read_tokens=100)
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd_micros",
)


def plan(**fields: Any) -> Reply:
    body = {"strategy": "simple", "reasoning": "r", **fields}
    return Reply(text=json.dumps(body), usage=PLANNER_USAGE)


def models() -> TurnModels:
    planner = ScriptedModel(
        [
            plan(sources=[{"name": "schedule", "why": "classes", "params": {"days_ahead": 7}}]),
            plan(sources=[{"name": "schedule", "params": {"days_ahead": 3}}]),  # covered
        ],
        name=MODEL,
    )

    def answerer(_request: ModelRequest) -> Reply:
        return Reply(text="Yoga on Tuesday.", usage=MERGER_USAGE)

    return TurnModels(planner=planner, executor=FunctionModel(answerer, name=MODEL))


def ratio(usage: dict[str, int]) -> float | None:
    denominator = usage["cache_read_tokens"] + usage["input_tokens"]
    return usage["cache_read_tokens"] / denominator if denominator else None


def with_ratio(usage: dict[str, int]) -> dict[str, Any]:
    return {**{k: usage[k] for k in USAGE_KEYS}, "cache_hit_ratio": ratio(usage)}


async def test_the_report_matches_the_logged_budgets_and_usage(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        first = await stream_turn(server.client, {"message": "what's on this week?"}, headers)
        session_id = first[0].data["session_id"]
        await stream_turn(
            server.client, {"message": "and then?", "session_id": session_id}, headers
        )

        response = await server.client.get(f"/v1/sessions/{session_id}/budget", headers=headers)
        events = (
            await server.client.get(f"/v1/sessions/{session_id}/events", headers=headers)
        ).json()["events"]
        detail = (await server.client.get(f"/v1/sessions/{session_id}", headers=headers)).json()

    assert response.status_code == 200, response.text
    report = response.json()
    assert report["session_id"] == session_id
    assert [(t["turn_id"], t["status"]) for t in report["turns"]] == [
        (t["id"], "completed") for t in detail["turns"]
    ]
    assert [t["started_at"] for t in report["turns"]] == [t["started_at"] for t in detail["turns"]]

    for turn in report["turns"]:
        logged = [e["data"] for e in events if _turn_of(events, e) == turn["turn_id"]]
        budgets = [d for d in logged if d["type"] == "context_budget"]
        assert [(c["role"], c["step_id"]) for c in turn["calls"]] == [
            ("planner", None),
            ("merger", None),
        ]
        assert turn["calls"] == [b["report"] for b in budgets]
        [usage] = [d for d in logged if d["type"] == "usage"]
        assert turn["usage"] == {
            "by_role": {role: with_ratio(u) for role, u in usage["by_role"].items()},
            **with_ratio(usage),
        }
        assert turn["sources"] == [
            {k: d.get(k) for k in ("source", "tokens", "truncated", "error", "budget")}
            | {"cuts": d.get("cuts") or []}
            for d in logged
            if d["type"] == "context_loaded"
        ]
        assert turn["model_calls"] == [
            {**call, "cache_hit_ratio": ratio(call)} for call in usage["calls"]
        ]
        assert turn["compressed"] == []

    first_turn, second_turn = report["turns"]
    planner_call = first_turn["calls"][0]
    assert [s["name"] for s in planner_call["sections"]] == [
        "system",
        "conversation",
        "context",
        "profile",
        "buffer",
    ]
    assert planner_call["total_allocated"] == 7_200
    assert 0 < planner_call["total_used"] <= 7_200
    assert [s["source"] for s in first_turn["sources"]] == ["schedule"]
    assert first_turn["sources"][0]["tokens"] > 0
    assert second_turn["sources"] == []  # append-only knowledge: already loaded

    by_role = first_turn["usage"]["by_role"]
    assert by_role["planner"]["cache_read_tokens"] == 1_500
    assert by_role["planner"]["cache_write_tokens"] == 200
    assert by_role["planner"]["cache_hit_ratio"] == 1_500 / 2_000
    assert by_role["merger"]["cache_hit_ratio"] == 100 / 400
    assert first_turn["usage"]["cache_hit_ratio"] == 1_600 / 2_400
    assert by_role["planner"]["cost_usd_micros"] > 0

    totals = report["totals"]
    assert {k: totals[k] for k in USAGE_KEYS} == detail["totals"]  # the usage table agrees
    assert totals["cache_read_tokens"] == 2 * 1_600
    assert totals["cache_hit_ratio"] == 3_200 / 4_800
    assert totals["by_role"]["planner"]["input_tokens"] == 2 * 500

    for private in ("what's on this week", "Yoga on Tuesday"):
        assert private not in response.text


def _turn_of(events: list[dict[str, Any]], event: dict[str, Any]) -> str | None:
    """The turn of an event: the last ``session_started`` at or before it."""
    turn_id = None
    for e in events:
        if e["type"] == "session_started":
            turn_id = e["data"]["turn_id"]
        if e["seq"] == event["seq"]:
            return turn_id
    return None


async def test_the_report_is_only_for_those_who_may_see_the_session(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        frames = await stream_turn(server.client, {"message": "hi"}, server.auth(user="alice"))
        session_id = frames[0].data["session_id"]
        path = f"/v1/sessions/{session_id}/budget"
        client = server.client
        intruders = [
            server.auth(user="alice", org="other-org", role="owner"),  # same user, other org
            server.auth(user="bob"),  # a member reading another member's session
        ]
        for headers in intruders:
            response = await client.get(path, headers=headers)
            assert response.status_code == 404, response.text
            assert response.json()["error"]["code"] == "not_found"
            assert session_id in response.json()["error"]["message"]
        unknown = "/v1/sessions/00000000-0000-0000-0000-000000000000/budget"
        missing = await client.get(unknown, headers=server.auth(user="alice"))
        assert missing.status_code == 404
        assert (await client.get(path)).status_code == 401
        staff = await client.get(path, headers=server.auth(user="carol", role="staff"))
        assert staff.status_code == 200
        assert [len(t["calls"]) for t in staff.json()["turns"]] == [2]
        schema = (await client.get("/schema/openapi.json")).json()

    operation = schema["paths"]["/v1/sessions/{session_id}/budget"]["get"]
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    name = ref.rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][name]["properties"]) == {
        "session_id",
        "turns",
        "totals",
    }
