"""A forced-tools agent's turn against the fake Anthropic server, through the real SDK:
every request of its loop forces a tool (``tool_choice {"type": "any"}``) and offers the
communication tools; ``agent_idle`` completes the turn with what message_notify_user
said as its answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from bosun_demo import demo_registry, seed_demo
from events import SessionStarted, UserMessage
from fleet._directory import forced_kit
from providers import TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers._fake_anthropic import anthropic_error, anthropic_reply
from providers._fake_server import FakeProvider, FakeServer
from store import Store
from turn import Turn, TurnKit, run_turn

ORG = "acme"
USAGE = TokenUsage(input_tokens=50, output_tokens=5)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


async def start(store: Store, model: AnthropicModel, *, planner: bool) -> Turn:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="Which programs are there?")],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id="ada", role="owner", message_id="m", text="Which programs are there?",
                model=model, planner=model if planner else None)  # fmt: skip


@pytest.mark.parametrize("planner", [False, True])
async def test_every_loop_request_forces_a_tool_on_the_wire(
    store: Store, server: FakeServer, planner: bool
) -> None:
    await seed_demo(store, ORG)
    loop = [
        ToolCall(id="toolu_1", name="programs_list", input={}),
        ToolCall(id="toolu_2", name="message_notify_user", input={"message": "Three programs."}),
        ToolCall(id="toolu_3", name="agent_idle", input={"reason": "answered"}),
    ]
    plan = ToolCall(id="p", name="plan", input={"strategy": "simple", "reasoning": "chat"})
    server.provider.enqueue(
        *([anthropic_reply(tool_calls=[plan], usage=USAGE)] if planner else []),
        *(anthropic_reply(tool_calls=[call], usage=USAGE) for call in loop),
    )
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    kit = forced_kit(TurnKit(tools=demo_registry()), max_iterations=10)
    try:
        turn = await start(store, model, planner=planner)
        status = await run_turn(store, turn, kit)
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    sent = [r.json for r in server.provider.requests][1 if planner else 0 :]
    assert len(sent) == 3
    for body in sent:
        assert body["tool_choice"] == {"type": "any"}
        names = {tool["name"] for tool in body["tools"]}
        assert {"message_notify_user", "message_ask_user", "agent_idle"} <= names
    log = await store.log.read(turn.session_id)
    answer = "".join(e.data["delta"] for e in log if e.type == "text_delta")
    assert answer == "Three programs."
    [created] = [e.data for e in log if e.type == "plan_created"]
    assert created["strategy"] == "tool" and "programs.list" in created["steps"][0]["tools"]
    assert json.dumps(created).count("agent.idle") == 1  # the loop's tools, once each


async def test_a_planner_outage_still_runs_the_loop(store: Store, server: FakeServer) -> None:
    """Trainer spec §12.3: the initializer's error does not stop the main agent."""
    await seed_demo(store, ORG)
    loop = [
        ToolCall(id="toolu_1", name="message_notify_user", input={"message": "Hello!"}),
        ToolCall(id="toolu_2", name="agent_idle", input={"reason": "answered"}),
    ]
    server.provider.enqueue(
        anthropic_error(529), *(anthropic_reply(tool_calls=[call], usage=USAGE) for call in loop)
    )
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    kit = forced_kit(TurnKit(tools=demo_registry()), max_iterations=10)
    try:
        turn = await start(store, model, planner=True)
        status = await run_turn(store, turn, kit)
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    log = await store.log.read(turn.session_id)
    [created] = [e.data for e in log if e.type == "plan_created"]
    assert created["fallback"] == "planner failed: overloaded"
    assert created["strategy"] == "tool" and "agent.idle" in created["steps"][0]["tools"]
    assert "".join(e.data["delta"] for e in log if e.type == "text_delta") == "Hello!"
    assert [e.data["status"] for e in log if e.type == "done"] == ["completed"]
