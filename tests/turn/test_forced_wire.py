"""A forced-tools agent's turn against the fake Anthropic server, through the real SDK:
every request of its loop forces one tool (``tool_choice {"type": "any",
"disable_parallel_tool_use": true}``; OpenAI: ``parallel_tool_calls: false``) and offers
the communication tools; ``agent_idle`` completes the turn with what message_notify_user
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
from providers._fake_openai import openai_reply
from providers._fake_server import FakeProvider, FakeServer
from providers._openai import OpenAIModel
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
        assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
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


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_reply_with_two_tool_calls_runs_one(
    store: Store, server: FakeServer, provider: str
) -> None:
    """Trainer spec §12.1, asked of the provider and enforced when it sends two anyway:
    the second call gets a typed result and never runs."""
    await seed_demo(store, ORG)
    two = [
        ToolCall(id="call_1", name="programs_list", input={}),
        ToolCall(id="call_2", name="message_notify_user", input={"message": "Too soon."}),
    ]
    rest = [
        ToolCall(id="call_3", name="message_notify_user", input={"message": "Three programs."}),
        ToolCall(id="call_4", name="agent_idle", input={"reason": "answered"}),
    ]
    reply = anthropic_reply if provider == "anthropic" else openai_reply
    server.provider.enqueue(
        reply(tool_calls=two, usage=USAGE), *(reply(tool_calls=[c], usage=USAGE) for c in rest)
    )
    model: AnthropicModel | OpenAIModel
    if provider == "anthropic":
        config = ProviderConfig(anthropic_api_key="k", anthropic_base_url=server.url, max_retries=0)
        model = AnthropicModel("claude-haiku-4-5", config=config)
    else:
        config = ProviderConfig(
            openai_api_key="k", openai_base_url=f"{server.url}/v1", max_retries=0
        )
        model = OpenAIModel("gpt-4.1-mini", config=config)
    kit = forced_kit(TurnKit(tools=demo_registry()), max_iterations=10)
    try:
        turn = await start(store, model, planner=False)
        status = await run_turn(store, turn, kit)
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    sent = [r.json for r in server.provider.requests]
    assert len(sent) == 3
    for body in sent:
        if provider == "anthropic":
            assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
        else:
            assert (body["tool_choice"], body["parallel_tool_calls"]) == ("required", False)
    log = await store.log.read(turn.session_id)
    completed = {e.data["tool_use_id"]: e.data for e in log if e.type == "tool_completed"}
    assert [k for k, v in completed.items() if v["ok"]] == ["call_1", "call_3", "call_4"]
    assert completed["call_2"]["error"]["code"] == "one_tool_per_turn"
    answer = "".join(e.data["delta"] for e in log if e.type == "text_delta")
    assert answer == "Three programs."  # the refused message never reached the user
    # the next request answers both calls: the transcript stays valid on the wire
    assert _results(sent[1], provider) == {"call_1": False, "call_2": True}


def _results(body: dict[str, object], provider: str) -> dict[str, bool]:
    """tool_use id -> whether its result is an error, in a request's last message(s)."""
    messages = body["messages"]
    assert isinstance(messages, list)
    if provider == "anthropic":
        return {
            b["tool_use_id"]: b["is_error"]
            for b in messages[-1]["content"]
            if b["type"] == "tool_result"
        }
    tools = [m for m in messages if m["role"] == "tool"]
    return {m["tool_call_id"]: m["content"].startswith("Error: ") for m in tools}
