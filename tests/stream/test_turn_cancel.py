"""Cancelling a turn closes the in-flight provider stream and still ends the log in done."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from providers import AnthropicModel, ProviderConfig
from providers.fake import FakeProvider, FakeServer, anthropic_reply
from store import Store
from turn import TurnOrder, TurnRoleModels, TurnRunner


async def test_cancelling_a_turn_closes_the_provider_stream(store: Store) -> None:
    slow = anthropic_reply(text="one two three four five six seven eight", text_chunk_size=4)
    provider = FakeProvider().enqueue(dataclasses.replace(slow, chunk_delay_s=0.2))
    with FakeServer(provider) as server:
        model = AnthropicModel(
            "claude-haiku-4-5",
            config=ProviderConfig(anthropic_api_key="test", anthropic_base_url=server.url),
        )
        session_id = str(uuid.uuid4())
        await store.sessions.create(org_id="acme", user_id="u", session_id=session_id, title="t")
        runner = TurnRunner(store, turn_timeout_s=30)
        await runner.start(
            TurnOrder(org_id="acme", user_id="u"),
            session_id=session_id,
            text="count slowly",
            models=TurnRoleModels(answer=model, planner=None, summariser=None),
            trace_id="trace-1",
        )
        for _ in range(200):
            if provider.requests:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # a chunk or two is in flight
        await runner.shutdown(grace_s=0)  # cancels the turn
        for _ in range(100):
            if provider.disconnects:
                break
            await asyncio.sleep(0.02)
        assert provider.disconnects == 1

    rows = await store.log.read(session_id)
    assert [r.type for r in rows][-2:] == ["error", "done"]
    assert rows[-2].data["code"] == "cancelled"
    assert rows[-1].data["status"] == "cancelled"
    assert [t.status for t in await store.sessions.turns(session_id)] == ["cancelled"]
