"""Per-agent cost governance over the real app: thresholds fire one ``cost_alert`` each per
period (however many turns end at once), the cost limit pauses the agent (``agent_paused``),
a paused agent takes no runs or chat turns (409) until resumed, runs tell ``run_finished``,
and the usage route's figures are the usage rows'."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from conftest import Server, ServerFactory
from fleet import cost_period
from providers import FunctionModel, ModelRequest, Reply, TokenUsage
from store import NoticeRecord
from store._models import SessionRow, UsageRow
from turn import TurnModels

HAIKU = "claude-haiku-4-5"  # $1 / $5 per million input / output tokens
CALL = TokenUsage(input_tokens=100, output_tokens=100)  # 600 micro-dollars a call
PLAN = json.dumps({"strategy": "simple", "reasoning": "chat"})
AGENT: dict[str, Any] = {
    "handle": "spender",
    "name": "Spender",
    "runs_per_minute": 30,
    "cost": {"alert_thresholds_usd": [0.001, 0.002], "limit_usd": 0.003},
}


def priced() -> TurnModels:
    """A priced scripted model: plans a simple answer, then answers; each call costs 600."""

    async def reply(request: ModelRequest) -> Reply:
        planning = any("You are the planner" in block.text for block in request.system)
        return Reply(text=PLAN if planning else "Done.", usage=CALL)

    model = FunctionModel(reply, name=HAIKU)
    return TurnModels(planner=model, merger=model)


async def make_agent(server: Server, **changes: Any) -> None:
    made = await server.client.post(
        "/v1/agents", json={**AGENT, **changes}, headers=server.auth(role="owner")
    )
    assert made.status_code == 201, made.text


async def run(server: Server) -> str:
    queued = await server.client.post(
        "/v1/agents/spender/runs", json={"task": "Spend a little"}, headers=server.auth()
    )
    assert queued.status_code == 202, queued.text
    return str(queued.json()["run_id"])


async def notices(server: Server, kind: str, count: int) -> list[NoticeRecord]:
    """The org's notices of ``kind`` once there are ``count`` (or after 15 s)."""
    deadline = time.monotonic() + 15
    while True:
        found = [n for n in await server.store.notices.after("acme", 0, 1000) if n.type == kind]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def agent_spend(server: Server) -> tuple[int, int, int, int]:
    """The usage rows of the agent's sessions: calls, input and output tokens, cost."""
    query = (
        select(
            func.count(),
            func.sum(UsageRow.input_tokens),
            func.sum(UsageRow.output_tokens),
            func.sum(UsageRow.cost_usd_micros),
        )
        .join(SessionRow, SessionRow.id == UsageRow.session_id)
        .where(SessionRow.agent == "spender")
    )
    async with server.store.db.read() as conn:
        row = (await conn.execute(query)).one()
    return int(row[0]), int(row[1] or 0), int(row[2] or 0), int(row[3] or 0)


async def test_alerts_fire_then_the_limit_pauses_until_a_resume(
    make_server: ServerFactory,
) -> None:
    async with make_server(priced()) as server:
        await make_agent(server)
        for n in range(1, 4):  # 1200, 2400, 3600 micro-dollars: alert, alert, pause
            await run(server)
            await notices(server, "run_finished", n)
        alerts = await notices(server, "cost_alert", 2)
        [paused] = await notices(server, "agent_paused", 1)
        refused = await server.client.post(
            "/v1/agents/spender/runs", json={"task": "More"}, headers=server.auth()
        )
        chat = await server.client.post(
            "/v1/chat", json={"message": "hi", "agent": "spender"}, headers=server.auth()
        )
        shown = (await server.client.get("/v1/agents/spender", headers=server.auth())).json()
        member = await server.client.post("/v1/agents/spender/resume", headers=server.auth())
        resumed = await server.client.post(
            "/v1/agents/spender/resume", headers=server.auth(role="staff")
        )
        again = await server.client.post(
            "/v1/agents/spender/runs", json={"task": "Once more"}, headers=server.auth()
        )
        finished = await notices(server, "run_finished", 4)
        repaused = await notices(server, "agent_paused", 2)

    period = cost_period("month").key
    assert [n.data for n in alerts] == [
        {"agent": "spender", "threshold_usd": 0.001, "spent_usd": 0.0012, "period": "month",
         "period_key": period},
        {"agent": "spender", "threshold_usd": 0.002, "spent_usd": 0.0024, "period": "month",
         "period_key": period},
    ]  # fmt: skip
    assert paused.data == {
        "agent": "spender",
        "reason": "cost_limit",
        "spent_usd": 0.0036,
        "limit_usd": 0.003,
    }
    assert alerts[1].id < paused.id
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "agent_paused"
    assert "cost limit" in refused.json()["error"]["message"]
    assert chat.status_code == 409 and chat.json()["error"]["code"] == "agent_paused"
    assert shown["paused_reason"] == "cost_limit" and shown["paused_at"] is not None
    assert member.status_code == 403
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["paused_at"] is None and resumed.json()["version"] == 1
    assert again.status_code == 202
    assert {n.data["status"] for n in finished} == {"completed"}
    assert set(finished[0].data) == {"run_id", "agent", "status", "session_id", "turn_id"}
    assert len(repaused) == 2  # still over the limit: the resumed run's end pauses it again


async def test_each_alert_fires_once_when_turns_end_together(make_server: ServerFactory) -> None:
    async with make_server(priced()) as server:
        await make_agent(server, cost={"alert_thresholds_usd": [0.001, 0.002]})
        await asyncio.gather(run(server), run(server))  # two run at once (two per agent)
        await notices(server, "run_finished", 2)
        costs = server.app.state.services.costs
        await asyncio.gather(*(costs.check("acme", "spender") for _ in range(8)))
        await notices(server, "cost_alert", 2)
        await asyncio.sleep(0.2)  # time for a duplicate, were there one
        alerts = await notices(server, "cost_alert", 0)

    assert sorted(n.data["threshold_usd"] for n in alerts) == [0.001, 0.002]


async def test_the_usage_route_adds_up_the_usage_rows(make_server: ServerFactory) -> None:
    async with make_server(priced()) as server:
        await make_agent(server, cost={"alert_thresholds_usd": [0.001], "period": "day"})
        await run(server)
        await server.client.post(  # a chat turn counts too
            "/v1/chat", json={"message": "hi", "agent": "spender"}, headers=server.auth()
        )
        await notices(server, "run_finished", 1)
        calls, tokens_in, tokens_out, cost = await agent_spend(server)
        usage = await server.client.get(
            "/v1/agents/spender/usage?days=7", headers=server.auth(role="owner")
        )
        member = await server.client.get("/v1/agents/spender/usage", headers=server.auth())
        unknown = await server.client.get(
            "/v1/agents/nobody/usage", headers=server.auth(role="owner")
        )

    body = usage.json()
    today = datetime.now(UTC).date().isoformat()
    figures = {"calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out,
               "cost_usd_micros": cost}  # fmt: skip
    assert usage.status_code == 200, usage.text
    assert cost == 2 * 1200 and calls == 4
    assert len(body["days"]) == 7 and body["days"][-1] == {"day": today, **figures}
    assert all(d["cost_usd_micros"] == 0 for d in body["days"][:-1])
    assert body["today"] == {"day": today, **figures}
    assert body["month"] == {"day": today[:7], **figures}
    assert (body["period"], body["period_key"]) == ("day", today)
    assert body["period_spent_usd"] == 0.0024
    assert [a["threshold_usd"] for a in body["alerts"]] == [0.001]
    assert body["limit_usd"] is None and body["paused"] is False
    [recent] = body["runs"]
    assert recent["status"] == "completed" and recent["cost_usd_micros"] == 1200
    assert member.status_code == 403 and unknown.status_code == 404


async def test_resume_also_clears_a_profile_pause_and_cost_settings_are_checked(
    make_server: ServerFactory,
) -> None:
    async with make_server(priced()) as server:
        await make_agent(server, paused=True)
        resumed = await server.client.post(
            "/v1/agents/spender/resume", headers=server.auth(role="owner")
        )
        started = await server.client.post(
            "/v1/agents/spender/runs", json={"task": "Go"}, headers=server.auth()
        )
        bad = await server.client.put(
            "/v1/agents/spender",
            json={"name": "S", "cost": {"period": "week", "limit_usd": -1}},
            headers=server.auth(role="owner"),
        )
        default = (await server.client.get("/v1/agents/spender", headers=server.auth())).json()

    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert resumed.json()["version"] == 2  # the profile's pause: a new version
    assert started.status_code == 202
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert default["cost"]["period"] == "month"


def test_a_period_is_a_utc_day_or_month() -> None:
    at = datetime(2026, 11, 24, 23, 59, tzinfo=UTC)
    month, day = cost_period("month", at), cost_period("day", at)
    assert (month.key, month.start) == ("2026-11", datetime(2026, 11, 1, tzinfo=UTC))
    assert (day.key, day.start) == ("2026-11-24", datetime(2026, 11, 24, tzinfo=UTC))
