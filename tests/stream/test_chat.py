"""A turn end to end through the real app over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from conftest import ServerFactory
from helpers import stream_turn, streaming_model, types
from providers import FunctionModel, ModelError, ModelRequest, Reply, ScriptedModel, TokenUsage
from turn import AGENT_DISABLED, TurnModels


async def test_happy_path_streams_and_logs_the_same_events(make_server: ServerFactory) -> None:
    model = ScriptedModel(
        [Reply(text="Hello there, friend.", usage=TokenUsage(input_tokens=11, output_tokens=5))]
    )
    async with make_server(TurnModels(executor=model)) as server:
        client = server.client
        frames = await stream_turn(client, {"message": "Say hello"}, server.auth())

        session_id = frames[0].data["session_id"]
        assert types(frames) == [
            "session_started",
            "user_message",
            "text_delta",
            "text_delta",
            "text_delta",
            "context_budget",
            "message_done",
            "usage",
            "done",
        ]
        assert "".join(f.data["delta"] for f in frames if f.event == "text_delta") == (
            "Hello there, friend."
        )
        assert frames[1].data["text"] == "Say hello"
        assert frames[-2].data["input_tokens"] == 11
        assert frames[-2].data["by_role"]["merger"]["output_tokens"] == 5
        budget = frames[-4].data
        assert budget["role"] == "merger" and budget["report"]["total_allocated"] == 8_000
        assert frames[-1].data == {"session_id": session_id, "status": "completed", "type": "done"}
        ids = [f.id for f in frames]
        assert ids == sorted(set(ids))
        rows = await server.store.log.read(session_id)
        assert [(r.seq, r.type, r.data) for r in rows] == [(f.id, f.event, f.data) for f in frames]
        model.assert_complete()
        assert model.calls[0].messages[-1].text == "Say hello"


async def test_second_turn_sees_the_conversation(make_server: ServerFactory) -> None:
    model = ScriptedModel(["First answer.", "Second answer."])
    async with make_server(TurnModels(executor=model)) as server:
        client = server.client
        first = await stream_turn(client, {"message": "one"}, server.auth())
        session_id = first[0].data["session_id"]
        second = await stream_turn(
            client, {"message": "two", "session_id": session_id}, server.auth()
        )
        assert second[0].data["session_id"] == session_id
        assert second[0].id > first[-1].id
        history = [(m.role, m.text) for m in model.calls[1].messages]
        assert history == [("user", "one"), ("assistant", "First answer."), ("user", "two")]

        detail = (await client.get(f"/v1/sessions/{session_id}", headers=server.auth())).json()
        assert detail["status"] == "completed"
        assert [m["text"] for m in detail["messages"]] == [
            "one",
            "First answer.",
            "two",
            "Second answer.",
        ]
        assert len(detail["turns"]) == 2


async def test_without_a_model_the_turn_says_how_to_configure_one(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        client = server.client
        frames = await stream_turn(client, {"message": "hello?"}, server.auth())
    assert types(frames) == ["session_started", "user_message", "error", "done"]
    assert frames[2].data["code"] == "agent_disabled"
    assert frames[2].data["message"] == AGENT_DISABLED
    assert "--model" in AGENT_DISABLED
    assert frames[-1].data["status"] == "failed"


async def test_a_model_that_raises_mid_stream_leaves_a_consistent_log(
    make_server: ServerFactory,
) -> None:
    async def breaks(_request: ModelRequest) -> AsyncIterator[str]:
        yield "partial "
        yield "answer"
        raise ModelError("provider_overloaded", "Overloaded", status=529, request_id="req_42")

    async with make_server(TurnModels(executor=FunctionModel(breaks))) as server:
        client = server.client
        frames = await stream_turn(client, {"message": "go"}, server.auth())
        session_id = frames[0].data["session_id"]
        assert types(frames)[-2:] == ["error", "done"]
        assert "message_done" not in types(frames)
        error = frames[-2].data
        assert error["code"] == "provider_overloaded"
        assert "req_42" in error["message"]
        assert error["trace_id"]
        assert frames[-1].data["status"] == "failed"
        rows = await server.store.log.read(session_id)
        assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
        assert [r.type for r in rows] == types(frames)
        turns = await server.store.sessions.turns(session_id)
        assert [t.status for t in turns] == ["failed"]


async def test_a_model_slower_than_the_turn_limit_times_out(make_server: ServerFactory) -> None:
    async def stalls(_request: ModelRequest) -> AsyncIterator[str]:
        yield "thinking "
        await asyncio.sleep(30)
        yield "never sent"

    async with make_server(
        TurnModels(executor=FunctionModel(stalls)), turn_timeout_s=0.3
    ) as server:
        frames = await stream_turn(server.client, {"message": "go"}, server.auth())
    assert types(frames) == ["session_started", "user_message", "text_delta", "error", "done"]
    assert frames[3].data["code"] == "provider_timeout"
    assert "0.3 s" in frames[3].data["message"]
    assert frames[-1].data["status"] == "failed"


async def test_an_unexpected_exception_becomes_an_internal_error(
    make_server: ServerFactory,
) -> None:
    def boom(_request: ModelRequest) -> str:
        raise ZeroDivisionError("secret user words")

    async with make_server(TurnModels(executor=FunctionModel(boom))) as server:
        client = server.client
        frames = await stream_turn(client, {"message": "go"}, server.auth())
    assert types(frames) == ["session_started", "user_message", "error", "done"]
    assert frames[2].data["code"] == "internal"
    assert "secret user words" not in frames[2].data["message"]


async def test_chat_waits_for_the_end_and_returns_the_answer(make_server: ServerFactory) -> None:
    model = ScriptedModel([Reply(text="All done.", usage=TokenUsage(input_tokens=3))])
    async with make_server(TurnModels(executor=model)) as server:
        client = server.client
        response = await client.post("/v1/chat", json={"message": "hi"}, headers=server.auth())
    assert response.status_code == 200
    body = response.json()
    assert body["answer"] == "All done."
    assert body["status"] == "completed"
    assert body["usage"]["input_tokens"] == 3
    assert [e["type"] for e in body["events"]][-1] == "done"


async def test_concurrent_turns_get_gap_free_unique_sequence_numbers(
    make_server: ServerFactory,
) -> None:
    """25 turns on one session (queued: one runs at a time there) and 50 on 50 sessions,
    all at once. (25, not more: the last queued turn's stream waits for all the others,
    and a busy 2-core machine took 47 s for 50 on PostgreSQL, near the client's 60 s.)"""
    model = streaming_model([f"w{i} " for i in range(20)])
    async with make_server(TurnModels(executor=model)) as server:
        client = server.client
        enqueue = {"name": "Default", "double_texting": "enqueue"}
        owner = server.auth(role="owner")
        assert (await client.put("/v1/agents/default", json=enqueue, headers=owner)).is_success
        first = await stream_turn(client, {"message": "start"}, server.auth())
        shared = first[0].data["session_id"]
        same_session = [
            stream_turn(client, {"message": f"m{i}", "session_id": shared}, server.auth())
            for i in range(25)
        ]
        own_sessions = [stream_turn(client, {"message": f"n{i}"}, server.auth()) for i in range(50)]
        results = await asyncio.gather(*same_session, *own_sessions)

        for frames in results:
            assert types(frames)[-1] == "done"
            assert frames[-1].data["status"] == "completed"
            assert sum(f.event == "text_delta" for f in frames) == 20
            assert [f.id for f in frames] == sorted({f.id for f in frames})
        shared_rows = await server.store.log.read(shared)
        assert [r.seq for r in shared_rows] == list(range(1, 26 * 26 + 1))
        assert sum(r.type == "done" for r in shared_rows) == 26
        for frames in results[25:]:
            rows = await server.store.log.read(frames[0].data["session_id"])
            assert [r.seq for r in rows] == list(range(1, 27))
