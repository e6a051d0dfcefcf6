"""Triggers other than the API: a cron schedule fires one run per tick whatever the number
of workers, and a signed inbound webhook (Standard Webhooks) starts a run with its payload;
a bad signature is 401 and starts nothing."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook

from bosun.settings import Settings
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from providers import FunctionModel, ModelRequest, Reply
from turn import TurnModels


def daily_at(at: datetime) -> str:
    """A cron expression that fires once a day, at ``at``'s minute (UTC)."""
    return f"{at.minute} {at.hour} * * *"


def scheduled(cron: str) -> dict[str, Any]:
    schedule = {"cron": cron, "task": "Summarise the day", "context": {"n": 1}}
    return {"handle": "nightly", "name": "Nightly", "runs_per_minute": 10, "schedule": schedule}


def quick() -> TurnModels:
    async def answer(request: ModelRequest) -> Reply:
        if any("You are the planner" in block.text for block in request.system):
            return Reply(text=json.dumps({"strategy": "simple", "reasoning": "r"}))
        return Reply(text="Done.")

    model = FunctionModel(answer)
    return TurnModels(planner=model, executor=model)


async def runs_of(server: Server, handle: str) -> list[dict[str, Any]]:
    page = await server.client.get(f"/v1/agents/{handle}/runs", headers=server.auth(role="staff"))
    return page.json()["runs"]  # type: ignore[no-any-return]


async def until_a_run(server: Server) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if await runs_of(server, "nightly"):
            return
        await asyncio.sleep(0.1)


async def test_a_schedule_fires_one_run_per_tick_across_two_workers(db_url: str) -> None:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    async with Server(settings, quick()) as one, Server(settings, quick()) as two:
        # This minute's tick is due now, and the next one is a day away: exactly one tick.
        profile = scheduled(daily_at(datetime.now(UTC)))
        made = await one.client.post("/v1/agents", json=profile, headers=one.auth(role="owner"))
        assert made.status_code == 201, made.text
        await until_a_run(one)
        await asyncio.sleep(2.5)  # both workers poll (every second) a few more times
        runs = await runs_of(two, "nightly")
        services = [s.app.state["services"] for s in (one, two)]
        again = [await s.runs.fire_schedules() for s in services]  # the same tick, by hand

    assert len(runs) == 1, runs  # one tick, one run, two workers
    [run] = runs
    assert (run["trigger"], run["task"], run["context"]) == (
        "schedule",
        "Summarise the day",
        {"n": 1},
    )
    assert again == [[], []]


async def test_a_schedule_outside_its_grace_or_invalid_fires_nothing(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        # A tick twelve hours from now: the server's own poll never finds it due.
        tick = (datetime.now(UTC) + timedelta(hours=12)).replace(second=0, microsecond=0)
        daily = scheduled(daily_at(tick))
        bad = await server.client.post(
            "/v1/agents",
            json={**scheduled("every day"), "handle": "broken"},
            headers=server.auth(role="owner"),
        )
        await server.client.post("/v1/agents", json=daily, headers=server.auth(role="owner"))
        services = server.app.state["services"]
        long_after = tick + timedelta(minutes=10)
        late = await services.runs.fire_schedules(long_after)
        on_time = await services.runs.fire_schedules(long_after - timedelta(minutes=9))

    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_schedule"
    assert late == [] and len(on_time) == 1


def signed(
    secret: str, body: dict[str, Any], msg_id: str | None = None
) -> tuple[str, dict[str, str]]:
    text = json.dumps(body)
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    signature = Webhook(secret).sign(msg_id, datetime.now(UTC), text)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(datetime.now(UTC).timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }
    return text, headers


async def test_a_signed_webhook_starts_a_run_and_a_bad_one_starts_nothing(
    make_server: ServerFactory,
) -> None:
    hooked = {"handle": "inbox", "name": "Inbox", "webhook_task": "Triage the new ticket"}
    async with make_server(quick(), secrets_key=Fernet.generate_key().decode()) as server:
        owner = server.auth(role="owner")
        await server.client.post("/v1/agents", json=hooked, headers=owner)
        member = await server.client.post("/v1/agents/inbox/webhook", headers=server.auth())
        made = (await server.client.post("/v1/agents/inbox/webhook", headers=owner)).json()
        path, secret = made["path"], made["secret"]
        text, headers = signed(secret, {"ticket": 42})
        started = await server.client.post(path, content=text, headers=headers)
        redelivered = await server.client.post(path, content=text, headers=headers)
        forged = await server.client.post(
            path, content=text, headers={**headers, "webhook-id": "msg_other"}
        )
        unsigned = await server.client.post(path, content=text)
        _, stale = signed(secret, {"ticket": 42})
        stale["webhook-timestamp"] = str(int(time.time()) - 3600)
        too_old = await server.client.post(path, content=text, headers=stale)
        other_org = await server.client.post(
            path.replace("/acme/", "/other/"), content=text, headers=headers
        )
        runs = await runs_of(server, "inbox")

    assert member.status_code == 403
    assert path == "/v1/hooks/acme/inbox" and secret.startswith("whsec_")
    assert started.status_code == 202, started.text
    body = started.json()
    assert (body["trigger"], body["task"], body["context"]) == (
        "webhook", "Triage the new ticket", {"ticket": 42},
    )  # fmt: skip
    assert redelivered.json()["run_id"] == body["run_id"]  # the same delivery: the same run
    for refused in (forged, unsigned, too_old, other_org):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert [r["run_id"] for r in runs] == [body["run_id"]]  # nothing else started


async def test_without_a_secrets_key_no_agent_gets_a_webhook(make_server: ServerFactory) -> None:
    async with make_server(quick()) as server:
        owner = server.auth(role="owner")
        await server.client.post("/v1/agents", json={"handle": "inbox", "name": "I"}, headers=owner)
        refused = await server.client.post("/v1/agents/inbox/webhook", headers=owner)

    assert refused.status_code == 400 and "BOSUN_SECRETS_KEY" in refused.json()["error"]["message"]
