"""Idempotency-Key on the turn-starting routes: a retry re-attaches, never starts twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update

from conftest import Server, ServerFactory
from helpers import stream_turn, types
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage
from store import IdempotencyClaim
from store._models import IdempotencyKeyRow
from turn import TurnModels


def slow_model(deltas: int, delay_s: float) -> FunctionModel:
    async def reply(_request: ModelRequest) -> AsyncIterator[str]:
        for i in range(deltas):
            await asyncio.sleep(delay_s)
            yield f"d{i} "

    return FunctionModel(reply)


def _keyed(server: Server, key: str, **claims: str) -> dict[str, str]:
    return {**server.auth(**claims), "Idempotency-Key": key}


async def _user_messages(server: Server, session_id: str) -> list[str]:
    return [
        e.data["text"] for e in await server.store.log.read(session_id) if e.type == "user_message"
    ]


async def test_a_retry_with_the_same_key_streams_the_same_turn(make_server: ServerFactory) -> None:
    model = ScriptedModel(
        [Reply(text="Only once.", usage=TokenUsage(input_tokens=7, output_tokens=3))]
    )
    async with make_server(TurnModels(executor=model)) as server:
        body = {"message": "Say it once"}
        first = await stream_turn(server.client, body, _keyed(server, "retry-1"))
        again = await stream_turn(server.client, body, _keyed(server, "retry-1"))

        assert types(first)[-3:] == ["message_done", "usage", "done"]
        assert again == first  # the whole turn from its start, the same frames
        session_id = first[0].data["session_id"]
        turns = await server.store.sessions.turns(session_id)
        assert [t.id for t in turns] == [first[0].data["turn_id"]]
        assert await _user_messages(server, session_id) == ["Say it once"]
        model.assert_complete()  # one model call: no second turn ran

        # Without the key, or with another one, the same body is a new turn.
        other = await stream_turn(server.client, body, _keyed(server, "retry-2"))
        assert other[0].data["session_id"] != session_id


async def test_concurrent_requests_with_one_key_start_one_turn(make_server: ServerFactory) -> None:
    model = slow_model(10, 0.02)
    async with make_server(TurnModels(executor=model)) as server:
        body = {"message": "once, please"}
        streams = await asyncio.gather(
            *(stream_turn(server.client, body, _keyed(server, "same")) for _ in range(8))
        )
        turn_ids = {frames[0].data["turn_id"] for frames in streams}
        assert len(turn_ids) == 1
        assert all(frames == streams[0] for frames in streams)
        assert types(streams[0])[-1] == "done" and streams[0][-1].data["status"] == "completed"
        session_id = streams[0][0].data["session_id"]
        assert [t.id for t in await server.store.sessions.turns(session_id)] == list(turn_ids)
        assert await _user_messages(server, session_id) == ["once, please"]
        assert len(model.calls) == 1
        sessions = await server.store.sessions.list_for_user(
            org_id="acme", user_id="alice", limit=50
        )
        assert [s.id for s in sessions] == [session_id]


async def test_the_same_key_with_another_body_is_a_conflict(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=FunctionModel(lambda _r: "ok"))) as server:
        first = await server.client.post(
            "/v1/chat", json={"message": "one"}, headers=_keyed(server, "k")
        )
        assert first.status_code == 200
        for body in ({"message": "two"}, {"message": "one", "context": {"page": "home"}}):
            response = await server.client.post(
                "/v1/chat/stream", json=body, headers=_keyed(server, "k")
            )
            assert response.status_code == 422
            error = response.json()["error"]
            assert error["code"] == "idempotency_conflict"
            assert error["message"].startswith("Idempotency-Key 'k' was used for a different")
        # Keys belong to a user: another user's "k" is theirs.
        bob = await server.client.post(
            "/v1/chat", json={"message": "two"}, headers=_keyed(server, "k", user="bob")
        )
        assert bob.status_code == 200
        assert bob.json()["turn_id"] != first.json()["turn_id"]


async def test_a_chat_retry_returns_the_same_answer(make_server: ServerFactory) -> None:
    model = ScriptedModel(["The answer is 42."])
    async with make_server(TurnModels(executor=model)) as server:
        body = {"message": "What is the answer?"}
        first = await server.client.post("/v1/chat", json=body, headers=_keyed(server, "q"))
        again = await server.client.post("/v1/chat", json=body, headers=_keyed(server, "q"))
        assert first.status_code == again.status_code == 200
        assert first.json()["answer"] == "The answer is 42."
        assert again.json() == first.json()
        # The stream route re-attaches to the same turn too.
        frames = await stream_turn(server.client, body, _keyed(server, "q"))
        assert [f.id for f in frames] == [e["seq"] for e in first.json()["events"]]
        model.assert_complete()


async def test_a_retry_on_another_worker_waits_for_the_turn(make_server: ServerFactory) -> None:
    async with (
        make_server(TurnModels(executor=slow_model(20, 0.02))) as first,
        make_server(TurnModels(executor=FunctionModel(lambda _r: "never"))) as second,
    ):
        body = {"message": "slowly"}
        running = asyncio.create_task(
            first.client.post("/v1/chat", json=body, headers=_keyed(first, "w"))
        )
        for _ in range(500):  # until the first worker has recorded its turn under the key
            async with first.store.db.read() as conn:
                recorded = (await conn.execute(select(IdempotencyKeyRow.turn_id))).scalar()
            if recorded is not None:
                break
            await asyncio.sleep(0.01)
        assert not running.done()  # the turn is still running on the first worker
        retried = await second.client.post("/v1/chat", json=body, headers=_keyed(second, "w"))
        original = await running
        assert retried.status_code == 200
        assert retried.json()["status"] == "completed"
        assert retried.json() == original.json()
        assert retried.json()["answer"] == "".join(f"d{i} " for i in range(20))


async def test_invalid_keys_are_refused(make_server: ServerFactory) -> None:
    async with make_server() as server:
        for key in ("x" * 201, "tab\there"):
            response = await server.client.post(
                "/v1/chat", json={"message": "hi"}, headers=_keyed(server, key)
            )
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["code"] == "invalid_request"
            assert error["message"].startswith("Idempotency-Key must be 1-200 printable ASCII")
        ok = await server.client.post(
            "/v1/chat", json={"message": "hi"}, headers=_keyed(server, "x" * 200)
        )
        assert ok.status_code == 200


async def test_retries_are_not_rate_limited_and_a_refused_request_frees_its_key(
    make_server: ServerFactory,
) -> None:
    models = TurnModels(executor=FunctionModel(lambda _r: "ok"))
    async with make_server(models, requests_per_minute=1) as server:
        body = {"message": "hi"}
        first = await server.client.post("/v1/chat", json=body, headers=_keyed(server, "a"))
        retried = await server.client.post("/v1/chat", json=body, headers=_keyed(server, "a"))
        assert retried.json() == first.json()  # re-attached, not counted
        refused = await server.client.post("/v1/chat", json=body, headers=_keyed(server, "b"))
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        # No turn was started for "b", so the key is free for the retry after Retry-After.
        claim = await server.store.idempotency.claim(
            org_id="acme", user_id="alice", key="b", request_hash="any"
        )
        assert isinstance(claim, IdempotencyClaim)


async def test_keys_expire_after_a_day(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=FunctionModel(_echo))) as server:
        first = await server.client.post(
            "/v1/chat", json={"message": "monday"}, headers=_keyed(server, "daily")
        )
        async with server.store.db.write() as conn:
            await conn.execute(
                update(IdempotencyKeyRow).values(
                    created_at=datetime.now(UTC) - timedelta(hours=24, seconds=1)
                )
            )
        # Expired: neither a conflict nor a re-attach; the key starts a new turn.
        later = await server.client.post(
            "/v1/chat", json={"message": "tuesday"}, headers=_keyed(server, "daily")
        )
        assert later.status_code == 200
        assert later.json()["answer"] == "tuesday"
        assert later.json()["turn_id"] != first.json()["turn_id"]
        again = await server.client.post(
            "/v1/chat", json={"message": "tuesday"}, headers=_keyed(server, "daily")
        )
        assert again.json()["turn_id"] == later.json()["turn_id"]


def _echo(request: ModelRequest) -> str:
    return request.messages[-1].text
