"""Per-user rate limits over HTTP: requests and tokens per minute, shared by workers."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select, update

from conftest import Server, ServerFactory
from providers import FunctionModel, Reply, ScriptedModel
from store._models import RateWindowRow, UsageRow
from turn import TurnModels


async def _fresh_minute(needed_s: float = 15.0) -> None:
    """Wait for the next minute if less than ``needed_s`` is left of this one: request
    windows are fixed minutes, and a test must not straddle two."""
    left = 60 - time.time() % 60
    if left < needed_s:
        await asyncio.sleep(left + 0.2)


def _answers() -> TurnModels:
    return TurnModels(executor=FunctionModel(lambda _r: "ok"))


async def _chat(server: Server, message: str = "hi", **claims: str) -> httpx.Response:
    return await server.client.post(
        "/v1/chat", json={"message": message}, headers=server.auth(**claims)
    )


def _assert_limited(response: httpx.Response) -> tuple[int, str]:
    """The 429's ``Retry-After`` seconds and its message."""
    assert response.status_code == 429, response.text
    body = response.json()["error"]
    assert body["code"] == "rate_limited"
    assert body["trace_id"]
    wait = int(response.headers["Retry-After"])
    assert 1 <= wait <= 60
    assert body["message"].endswith(f"per minute; retry in {wait} s")
    return wait, body["message"]


async def _turn_count(server: Server, user: str) -> int:
    sessions = await server.store.sessions.list_for_user(org_id="acme", user_id=user, limit=500)
    return sum([len(await server.store.sessions.turns(s.id)) for s in sessions])


async def test_the_21st_request_in_a_minute_gets_429_with_retry_after(
    make_server: ServerFactory,
) -> None:
    async with make_server(_answers(), requests_per_minute=20) as server:
        await _fresh_minute()
        replies = await asyncio.gather(*(_chat(server) for _ in range(20)))
        assert [r.status_code for r in replies] == [200] * 20
        assert {r.json()["status"] for r in replies} == {"completed"}

        wait, message = _assert_limited(await _chat(server, "three"))
        assert message.startswith("This is request 21 this minute; the limit is 20 per minute")
        assert wait >= 60 - time.time() % 60 - 1  # the window ends at the minute
        assert await _turn_count(server, "alice") == 20  # the refused request started nothing

        # Others are not limited: another user, and the same user id in another org.
        assert (await _chat(server, user="bob")).status_code == 200
        assert (await _chat(server, org="globex")).status_code == 200
        # The stream route shares the limit, and refuses before any stream starts.
        stream = await server.client.post(
            "/v1/chat/stream", json={"message": "hi"}, headers=server.auth()
        )
        _assert_limited(stream)
        assert stream.headers["content-type"].startswith("application/json")


async def test_limits_are_shared_by_workers_on_one_database(make_server: ServerFactory) -> None:
    async with (
        make_server(_answers(), requests_per_minute=4) as first,
        make_server(_answers(), requests_per_minute=4) as second,
    ):
        await _fresh_minute()
        assert [(await _chat(s)).status_code for s in (first, second, first, second)] == [200] * 4
        _assert_limited(await _chat(first))
        _assert_limited(await _chat(second))
        assert (await _chat(second, user="bob")).status_code == 200


async def test_tokens_per_minute_stop_new_turns_until_the_usage_ages_out(
    make_server: ServerFactory,
) -> None:
    def step(match: str, text: str, tokens_in: int, tokens_out: int) -> dict[str, Any]:
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        return {"match": match, "text": text, "usage": usage}

    model = ScriptedModel(  # a new session per message: each finds its step by its text
        [
            step("one", "big answer", 20_000, 9_000),
            step("two", "over now", 2_000, 1_000),
            step("bob's", "hi bob", 10, 1),
            step("again", "free again", 10, 1),
        ]
    )
    async with make_server(
        TurnModels(executor=model), tokens_per_minute=30_000, requests_per_minute=0
    ) as server:
        started = time.time()
        first = await _chat(server, "one")
        assert first.json()["usage"]["input_tokens"] == 20_000
        second = await _chat(server, "two")  # 29,000 used: under the limit, so it may start
        assert second.json()["answer"] == "over now"

        wait, message = _assert_limited(await _chat(server))
        assert message.startswith(
            "You used 32000 model tokens in the last minute; the limit is 30000 per minute"
        )
        # It frees up when the first turn's 29,000 tokens are a minute old.
        assert 60 - (time.time() - started) - 1 <= wait <= 60
        assert await _turn_count(server, "alice") == 2
        assert (await _chat(server, "bob's", user="bob")).json()["answer"] == "hi bob"  # used none

        # Usage older than a minute no longer counts.
        async with server.store.db.write() as conn:
            await conn.execute(
                update(UsageRow).values(created_at=datetime.now(UTC) - timedelta(seconds=61))
            )
        again = await _chat(server, "again")
        assert (again.status_code, again.json()["answer"]) == (200, "free again")
        model.assert_complete()


async def test_plans_are_counted_too(make_server: ServerFactory) -> None:
    plan = {"strategy": "simple", "reasoning": "Just answer.", "sources": [], "steps": []}
    planner = FunctionModel(
        lambda _r: Reply(text=json.dumps(plan)), name="anthropic:claude-haiku-4-5"
    )
    async with make_server(TurnModels(planner=planner), requests_per_minute=2) as server:
        await _fresh_minute()
        body = {"message": "plan this"}
        plans = [
            await server.client.post("/v1/plan", json=body, headers=server.auth()) for _ in range(2)
        ]
        assert [p.status_code for p in plans] == [200, 200]
        _assert_limited(await server.client.post("/v1/plan", json=body, headers=server.auth()))
        _assert_limited(await _chat(server))  # one budget for plans and turns


async def test_request_windows_roll_over_and_old_ones_are_deleted(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        limits = server.store.rate_limits
        now = datetime(2026, 11, 22, 10, 0, 30, tzinfo=UTC)
        counts = [(await limits.hit("k", now=now)).count for _ in range(3)]
        assert counts == [1, 2, 3]
        window = await limits.hit("k", now=now + timedelta(seconds=29, microseconds=999_999))
        assert (window.count, window.resets_at) == (4, datetime(2026, 11, 22, 10, 1, tzinfo=UTC))
        assert (await limits.hit("k", now=now + timedelta(seconds=30))).count == 1
        assert (await limits.hit("other", now=now + timedelta(seconds=31))).count == 1

        # The first hit of a window ten minutes later sweeps the windows of every key.
        await limits.hit("k", now=now + timedelta(minutes=10))
        async with server.store.db.read() as conn:
            rows = (await conn.execute(select(RateWindowRow.key, RateWindowRow.count))).all()
        assert [tuple(r) for r in rows] == [("k", 1)]
