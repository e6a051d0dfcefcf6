"""Daily caps per org: every model call is metered, racing turns never pass the cap by more
than one call, and the spend is the same whichever way it is added up."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import func, select

from conftest import ServerFactory
from events import SessionStarted, UserMessage
from providers import FunctionModel, ModelRequest, Reply, TokenUsage
from store import Store, UsageRecord, resets_at, utc_day
from store._models import UsageRow
from store._usage_models import DailySpendRow, DailyUsageRow
from turn import CapPolicy, Turn, TurnKit, TurnModels, run_turn
from turn._metering import BudgetExceededError, settles_done

ORG = "acme"
HAIKU = "claude-haiku-4-5"  # $1 / $5 per million input / output tokens
CALL = TokenUsage(input_tokens=300, output_tokens=500)
CALL_COST = 300 * 1 + 500 * 5  # micro-dollars
PLAN = json.dumps({"strategy": "simple", "reasoning": "chat"})


def priced(delay_s: float = 0.005, usage: TokenUsage = CALL) -> FunctionModel:
    """A priced model: plans when asked to, else answers; every call costs ``CALL_COST``."""

    async def reply(request: ModelRequest) -> Reply:
        await asyncio.sleep(delay_s)
        planning = any("You are the planner" in block.text for block in request.system)
        return Reply(text=PLAN if planning else "Sure.", usage=usage)

    return FunctionModel(reply, name=HAIKU)


def kit(**caps: int) -> TurnKit:
    return TurnKit(caps=CapPolicy(caps_usd_micros=caps or {"lite": 1_000_000}))


async def turn(store: Store, model: FunctionModel, *, planner: bool = True) -> Turn:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="hello")],
        turn_id=turn_id, trace_id=uuid.uuid4().hex,
    )  # fmt: skip
    return Turn(
        session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG, user_id="ada",
        role="member", message_id="m", text="hello", model=model,
        planner=model if planner else None,
    )  # fmt: skip


async def closing(store: Store, session_id: str) -> dict[str, dict[str, object]]:
    return {e.type: e.data for e in await store.log.read(session_id)}


async def test_racing_turns_never_pass_the_cap_by_more_than_one_call(store: Store) -> None:
    cap = 100_000  # 10 cents: about 17 turns of two calls
    turns = [await turn(store, priced()) for _ in range(100)]

    statuses = await asyncio.gather(*(run_turn(store, t, kit(lite=cap)) for t in turns))

    day = utc_day()
    spend = await store.spend.today(ORG, day)
    async with store.db.read() as conn:
        rows = await conn.scalar(select(func.sum(UsageRow.cost_usd_micros)))
        calls = await conn.scalar(select(func.count()).select_from(UsageRow))
        daily = await conn.scalar(
            select(DailyUsageRow.cost_usd_micros).where(DailyUsageRow.org_id == ORG)
        )
    events = [await closing(store, t.session_id) for t in turns]
    in_events = sum(int(str(e["usage"]["cost_usd_micros"])) for e in events if "usage" in e)

    assert cap <= spend.spent_usd_micros <= cap + CALL_COST  # reached, passed by <= 1 call
    assert spend.reserved_usd_micros == 0  # every reservation given back
    assert rows == daily == in_events == spend.spent_usd_micros == calls * CALL_COST
    # Which turns finish depends on who asks first: under load every planner call can be
    # admitted before any answer call, so no turn completes. The cap holds either way.
    completed = statuses.count("completed")
    assert completed < 100 and set(statuses) <= {"completed", "failed"}
    refused = [e["error"] for e in events if "error" in e]
    assert len(refused) == 100 - completed
    assert all(r["code"] == "budget_exceeded" for r in refused)
    assert "$0.10" in str(refused[0]["message"]) and "resets at" in str(refused[0]["message"])


async def test_a_turn_over_the_cap_is_refused_before_any_call(store: Store) -> None:
    model = priced()
    over = await turn(store, model)
    await store.spend.settle(
        UsageRecord(session_id=over.session_id, turn_id="earlier", org_id=ORG, user_id="ada",
                    role="merger", model=HAIKU, cost_usd_micros=150_000),
        day=utc_day(),
    )  # fmt: skip

    status = await run_turn(store, over, kit(lite=100_000))

    log = [e.type for e in await store.log.read(over.session_id)]
    error = (await closing(store, over.session_id))["error"]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d 00:00")
    assert status == "failed" and log[-2:] == ["error", "done"] and "usage" not in log
    assert error["code"] == "budget_exceeded"
    assert error["message"] == (
        "The daily model budget of $0.10 for this organisation (tier lite) is used up: "
        f"$0.15 spent today. It resets at {tomorrow} UTC."
    )


async def test_a_cap_refusal_at_the_planner_still_ends_the_turn(store: Store) -> None:
    """Unlike a provider failure, which the planner's fallback contains, a refusal under
    the cap is final: no fallback plan runs on a spent budget."""

    def refuse(_request: ModelRequest) -> str:
        raise BudgetExceededError("The daily model budget is used up", resets_at(utc_day()))

    answerer = priced()
    refused = await turn(store, answerer)
    status = await run_turn(store, replace(refused, planner=FunctionModel(refuse)), kit())

    log = [e.type for e in await store.log.read(refused.session_id)]
    assert status == "failed" and log[-2:] == ["error", "done"] and "plan_created" not in log
    assert (await closing(store, refused.session_id))["error"]["code"] == "budget_exceeded"
    assert answerer.calls == []


async def test_an_unmetered_tier_is_never_refused(store: Store) -> None:
    await store.spend.set_tier(ORG, "internal")
    done = await run_turn(store, await turn(store, priced()), kit(lite=0, internal=-1))
    assert done == "completed"
    assert (await store.spend.today(ORG, utc_day())).spent_usd_micros == 2 * CALL_COST


async def test_each_alert_threshold_fires_once_a_day(store: Store) -> None:
    policy = kit(lite=4 * CALL_COST)  # 25 % per call
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):  # 2 calls each: 50 %, 100 %, then refused
            await run_turn(store, await turn(store, priced()), policy)
        await settles_done()  # a turn may end before its settles' alerts (PostgreSQL)
    alerts = [e["threshold_pct"] for e in logs if e["event"] == "cap.threshold"]
    assert alerts == [50, 80, 100]


async def test_the_usage_event_has_the_cache_hit_ratio(store: Store) -> None:
    cached = TokenUsage(input_tokens=100, cache_read_tokens=900, output_tokens=10)
    one = await turn(store, priced(usage=cached), planner=False)
    await run_turn(store, one, kit())
    usage = (await closing(store, one.session_id))["usage"]
    assert usage["cache_hit_ratio"] == 0.9
    assert usage["by_role"] == {
        "merger": {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 900,
                   "cache_write_tokens": 0, "cache_write_1h_tokens": 0,
                   "cost_usd_micros": 100 + 90 + 50},
    }  # fmt: skip


async def test_get_usage_reports_the_day_against_the_cap(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=priced())) as server:
        anonymous = await server.client.get("/v1/usage")
        await server.client.post("/v1/chat", json={"message": "hi"}, headers=server.auth())
        report = (await server.client.get("/v1/usage", headers=server.auth())).json()
        async with server.store.db.read() as conn:
            spent = await conn.scalar(
                select(DailySpendRow.spent_usd_micros).where(DailySpendRow.org_id == ORG)
            )

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert anonymous.status_code == 401
    assert report["tier"] == "lite" and report["cap_usd_micros"] == 1_000_000
    assert report["spent_usd_micros"] == spent == CALL_COST
    assert report["percent"] == round(100 * CALL_COST / 1_000_000, 2)
    assert report["reserved_usd_micros"] == 0
    assert report["resets_at"].startswith(f"{tomorrow}T00:00:00")


async def test_a_dry_run_counts_against_the_cap(make_server: ServerFactory) -> None:
    model = priced()
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        store = server.store
        planned = await server.client.post(
            "/v1/plan", json={"message": "hi"}, headers=server.auth()
        )
        after_one = (await store.spend.today(ORG, utc_day())).spent_usd_micros
        async with store.db.read() as conn:
            rows = await conn.scalar(select(func.count()).select_from(UsageRow))
        await store.spend.settle(
            UsageRecord(session_id="", turn_id="x", org_id=ORG, user_id="ada", role="planner",
                        model=HAIKU, cost_usd_micros=1_000_000),
            day=utc_day(), per_call=False,
        )  # fmt: skip
        refused = await server.client.post(
            "/v1/plan", json={"message": "hi"}, headers=server.auth()
        )

    assert planned.status_code == 200 and after_one == CALL_COST
    assert rows == 0  # a dry run has no session: it is counted per day, not per call
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    assert 1 <= int(refused.headers["Retry-After"]) <= 24 * 3600
