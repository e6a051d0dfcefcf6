"""The turn is not the connection: drop the client, the turn completes, re-attach resumes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from httpx_sse import aconnect_sse

from conftest import Server, ServerFactory
from helpers import Frame
from providers import FunctionModel, ModelRequest
from turn import TurnModels


def slow_model(deltas: int, delay_s: float) -> FunctionModel:
    async def reply(_request: ModelRequest) -> AsyncIterator[str]:
        for i in range(deltas):
            await asyncio.sleep(delay_s)
            yield f"d{i} "

    return FunctionModel(reply)


async def _wait_until_finished(server: Server, session_id: str) -> None:
    for _ in range(500):
        if not await server.store.sessions.running_turns(session_id):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("turn did not finish")


async def _reattach(server: Server, session_id: str, headers: dict[str, str]) -> list[Frame]:
    url = f"/v1/sessions/{session_id}/stream"
    async with aconnect_sse(server.client, "GET", url, headers={**server.auth(), **headers}) as es:
        assert es.response.status_code == 200
        return [Frame(int(s.id), s.event, json.loads(s.data)) async for s in es.aiter_sse()]


async def test_dropped_client_loses_nothing_and_reattach_yields_the_rest(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=slow_model(40, 0.01))) as server:
        seen: list[Frame] = []
        body = {"message": "long answer please"}
        async with aconnect_sse(
            server.client, "POST", "/v1/chat/stream", json=body, headers=server.auth()
        ) as es:
            async for sse in es.aiter_sse():
                seen.append(Frame(int(sse.id), sse.event, json.loads(sse.data)))
                if sum(f.event == "text_delta" for f in seen) == 5:
                    break  # the client drops mid-turn
        session_id = seen[0].data["session_id"]
        last_seen = seen[-1].id

        await _wait_until_finished(server, session_id)
        rows = await server.store.log.read(session_id)
        assert [r.type for r in rows][-3:] == ["message_done", "usage", "done"]
        assert sum(r.type == "text_delta" for r in rows) == 40

        rest = await _reattach(server, session_id, {"Last-Event-ID": str(last_seen)})
        assert [(f.id, f.event, f.data) for f in rest] == [
            (r.seq, r.type, r.data) for r in rows if r.seq > last_seen
        ]
        assert rest[-1].event == "done"

        by_query = await _reattach(server, session_id, {})
        assert [f.id for f in by_query] == [r.seq for r in rows]
        after = await server.client.get(
            f"/v1/sessions/{session_id}/stream?after={last_seen}", headers=server.auth()
        )
        assert after.text.count("\nevent: ") + after.text.startswith("event: ") == len(rest)


async def test_reattach_mid_turn_follows_live_events_exactly_once(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=slow_model(30, 0.02))) as server:
        # Start the turn and drop the stream right after its first frame.
        async with aconnect_sse(
            server.client, "POST", "/v1/chat/stream", json={"message": "x"}, headers=server.auth()
        ) as es:
            first = await anext(es.aiter_sse())
        session_id = json.loads(first.data)["session_id"]
        live = await _reattach(server, session_id, {"Last-Event-ID": first.id})
        rows = await server.store.log.read(session_id)
        assert [f.id for f in live] == [r.seq for r in rows if r.seq > int(first.id)]
        assert live[-1].event == "done"
        assert sum(f.event == "text_delta" for f in live) == 30


async def test_reattach_after_the_end_returns_at_once(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=slow_model(2, 0))) as server:
        response = await server.client.post(
            "/v1/chat", json={"message": "x"}, headers=server.auth()
        )
        body = response.json()
        last = body["events"][-1]["seq"]
        assert await _reattach(server, body["session_id"], {"Last-Event-ID": str(last)}) == []


async def test_idle_streams_send_keepalive_comments(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=slow_model(2, 0.3)), keepalive_s=0.05) as server:
        headers = server.auth()
        body = {"message": "x"}
        response = await server.client.post("/v1/chat/stream", json=body, headers=headers)
        raw = response.text
    frames = raw.split("\n\n")
    assert ": keep-alive" in frames
    assert frames[-1] == ""
    assert frames[-2].split("\n")[1] == "event: done"
