"""The trainer spec's smoke test (§12.9) on Bosun, against the fake Anthropic server through
the real SDK: the example trainer agent (``examples/agents/trainer.yaml``, a forced-tools
agent with the member's data as its user-data block) answers "Give me a quick chest
workout" with ``generate_workout``, then ``message_notify_user`` naming the artifact it
made (the event carries the payload), then ``idle``. Every request forces a tool and
carries the spec's four cache breakpoints; the second iteration reads the cache."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bosun_demo import demo_registry, demo_sources, seed_demo
from bosun_demo._seed import seed_id
from events import SessionStarted, UserMessage
from fleet import Agent, AgentDirectory, AgentProfile, default_policy, default_profile
from providers import TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers._fake_anthropic import SSE_HEADERS
from providers._fake_server import Exchange
from providers.fake import FakeProvider, FakeServer, PromptCache, anthropic_reply
from store import Store
from turn import Turn, TurnKit, run_turn

ORG = "acme"
ASK = "Give me a quick chest workout"
EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "trainer.yaml"
OUT = TokenUsage(output_tokens=20)
WORKOUT = {
    "title": "Quick chest workout",
    "exercises": [
        {
            "exercise_name": "Push-up", "exercise_type": "reps", "sets": 3, "reps": [12, 10, 8],
            "rest_sec": 60, "reasoning": "Bodyweight chest staple.",
            "muscles_utilized": [{"muscle": "Chest", "share": 0.7},
                                 {"muscle": "Triceps", "share": 0.3}],
            "goals_addressed": [{"goal": "strength", "share": 1.0}],
        },
        {
            "exercise_name": "Plank", "exercise_type": "hold", "sets": 2, "hold_sec": [30, 30],
            "rest_sec": 30, "reasoning": "Core to finish.",
            "muscles_utilized": [{"muscle": "Abs", "share": 1.0}],
            "goals_addressed": [{"goal": "stability", "share": 1.0}],
        },
    ],
}  # fmt: skip


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


def trainer() -> Agent:
    """The example's trainer profile, as ``bosun agents apply`` would save it."""
    [entry] = yaml.safe_load(EXAMPLE.read_text())
    fields = {k: v for k, v in entry.items() if k != "handle"}
    return Agent(entry["handle"], 1, AgentProfile.model_validate(fields))


def notify_made(cache: PromptCache) -> Exchange:
    """The model's second reply: deliver the artifact the first call's result named (its
    id is made at run time, so it is read from the request, as a model would)."""

    def respond(body: Any) -> tuple[bytes, ...]:
        result = json.dumps(body["messages"][-1]["content"])
        [made] = set(re.findall(r"art_[0-9a-f]+", result))
        notify = {"message": "Here is a quick chest workout.", "artifact_id": made}
        call = ToolCall(id="toolu_2", name="message_notify_user", input=notify)
        return anthropic_reply(tool_calls=[call], usage=cache.usage(body, 20)).chunks

    return Exchange(headers=SSE_HEADERS, respond=respond)


async def start(store: Store, model: AnthropicModel, user_id: str) -> Turn:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id=user_id, session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text=ASK)],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id=user_id, role="member", message_id="m", text=ASK, model=model)  # fmt: skip


async def test_the_spec_smoke_test_on_the_anthropic_wire(store: Store, server: FakeServer) -> None:
    await seed_demo(store, ORG)
    kit = TurnKit(tools=demo_registry(), sources=demo_sources(store))
    directory = AgentDirectory(store, default_policy(kit, []), kit, default_profile(kit))
    setup = await directory.setup(trainer(), org_id=ORG)
    cache = PromptCache()
    generate = ToolCall(id="toolu_1", name="trainer_generate_workout", input={"workout": WORKOUT})
    idle = ToolCall(id="toolu_3", name="agent_idle", input={"reason": "delivered"})
    server.provider.enqueue(
        anthropic_reply(tool_calls=[generate], usage=OUT, cache=cache),
        notify_made(cache),
        anthropic_reply(tool_calls=[idle], usage=OUT, cache=cache),
    )
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    member = seed_id(ORG, "mem", 0)  # Sam Rivera: the user-data block is theirs
    try:
        turn = await start(store, model, member)
        status = await run_turn(store, turn, setup.kit)
    finally:
        await model.aclose()
    log = await store.log.read(turn.session_id)
    kinds = [e.type for e in log]
    sent = [r.json for r in server.provider.requests]
    [saved] = [e.data for e in log if e.type == "artifact"]
    [message] = [e.data for e in log if e.type == "agent_message"]
    [usage] = [e.data for e in log if e.type == "usage"]
    stored = await store.artifacts.get(turn.session_id, saved["artifact_id"])

    assert status == "completed" and server.provider.pending == 0
    assert 2 <= len(sent) <= 10  # iterations: generate, notify, idle
    calls = [e.data["tool"] for e in log if e.type == "tool_started"]
    assert calls == ["trainer.generate_workout", "message.notify_user", "agent.idle"]
    assert kinds.index("user_message") < kinds.index("tool_started") < kinds.index("artifact")
    assert kinds.index("artifact") < kinds.index("agent_message") < kinds.index("done")
    assert message["artifact_id"] == saved["artifact_id"] and message["in_answer"]
    assert message["artifact"]["payload"]["exercises"][0]["exercise_name"] == "Push-up"
    assert stored is not None and stored.payload == message["artifact"]["payload"]
    for body in sent:  # forced, with the spec's four breakpoints
        assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
        assert "cache_control" in body["tools"][-1]
        assert [("cache_control" in b) for b in body["system"]][-2:] == [True, True]
        assert body["system"][-1]["text"].startswith("<user_data>")
        assert "Sam Rivera" in body["system"][-1]["text"]
        assert "cache_control" in body["messages"][-1]["content"][-1]
        assert json.dumps(body).count('"cache_control"') == 4
    second = [c for c in usage["calls"] if c["role"] == "executor"][1]
    assert second["cache_read_tokens"] > 0
    assert usage["output_tokens"] > 0 and usage["cost_usd_micros"] > 0
