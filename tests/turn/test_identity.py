"""An agent profile's identity prompt reaches every role's model request (planner,
executors, merge, direct answer) as the first system block, inside the cached prefix
and without a cache mark of its own; its tokens count in the ``system`` section."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from context import EXECUTOR_BUDGET, PLANNER_BUDGET, TokenCounter
from context._layout import MAX_CACHE_MARKS, cache_marks
from events import SessionStarted, UserMessage
from executors._prompt import Voice, build_prompt
from planner import Catalogue, Planning, make_plan
from providers import FunctionModel, Model, ModelRequest, Reply, TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers._fake_anthropic import anthropic_reply
from providers._fake_server import FakeProvider, FakeServer
from store import Store
from tools import ToolContext, ToolRegistry
from turn import Turn, TurnKit, run_turn

ORG = "acme"
IDENTITY = "You are Coach, the studio's scheduling assistant. Be brief."
STEP = {"id": "s1", "goal": "Read the clock", "tools": ["clock.now"], "max_tool_calls": 2}
PLANS: dict[str, dict[str, Any]] = {
    "simple": {"strategy": "simple", "reasoning": "chat"},
    "tool": {"strategy": "tool", "reasoning": "read", "steps": [STEP]},
    "complex": {"strategy": "complex", "reasoning": "two reads", "steps": [
        STEP, {**STEP, "id": "s2", "goal": "Read the clock again"},
    ]},
}  # fmt: skip


class Nothing(BaseModel):
    pass


class Clock(BaseModel):
    time: str


def registry() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(name="clock.now", summary="The studio's clock.", category="read")
    async def now(_args: Nothing, _ctx: ToolContext) -> Clock:
        return Clock(time="09:00")

    return tools


def role_of(request: ModelRequest) -> str:
    if any("You are the planner" in b.text for b in request.system):
        return "planner"
    return "executor" if any("ONE step" in b.text for b in request.system) else "writer"


def scripted(strategy: str) -> FunctionModel:
    """Plans ``strategy``; an executor reads the clock once, then answers."""

    async def reply(request: ModelRequest) -> Reply:
        match role_of(request):
            case "planner":
                return Reply(text=json.dumps(PLANS[strategy]))
            case "executor" if len(request.messages) == 1:
                return Reply(tool_calls=(ToolCall(id="c1", name="clock_now", input={}),))
            case _:
                return Reply(text="It is 09:00.")

    return FunctionModel(reply, name="claude-haiku-4-5")


async def start(store: Store, model: Model) -> Turn:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="What time is it?")],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id="ada", role="owner", message_id="m", text="What time is it?",
                model=model, planner=model)  # fmt: skip


def assert_identity_first(request: ModelRequest) -> None:
    first, *rest = request.system
    assert (first.text, first.cache) == (IDENTITY, False)
    assert rest and rest[0].cache  # the static block's mark covers the identity
    assert cache_marks(request) <= MAX_CACHE_MARKS


@pytest.mark.parametrize(
    ("strategy", "roles"),
    [
        ("simple", ["planner", "writer"]),
        ("tool", ["planner", "executor", "executor"]),
        ("complex", ["planner", *["executor"] * 4, "writer"]),
    ],
)
async def test_every_role_is_asked_with_the_identity_in_its_cached_prefix(
    store: Store, strategy: str, roles: list[str]
) -> None:
    model = scripted(strategy)
    kit = TurnKit(tools=registry(), identity=IDENTITY)

    status = await run_turn(store, await start(store, model), kit)

    assert status == "completed"
    assert sorted(role_of(r) for r in model.calls) == sorted(roles)
    for request in model.calls:
        assert_identity_first(request)


async def test_without_an_identity_no_block_is_added(store: Store) -> None:
    model = scripted("complex")

    await run_turn(store, await start(store, model), TurnKit(tools=registry()))

    assert all(IDENTITY not in b.text for r in model.calls for b in r.system)
    planner = next(r for r in model.calls if role_of(r) == "planner")
    assert [b.cache for b in planner.system] == [True]


async def test_the_identity_counts_in_each_system_section(store: Store) -> None:
    async def reports(identity: str) -> dict[str, dict[str, Any]]:
        turn = await start(store, scripted("complex"))
        await run_turn(store, turn, TurnKit(tools=registry(), identity=identity))
        log = await store.log.read(turn.session_id)
        return {
            e.data["role"]: next(s for s in e.data["report"]["sections"] if s["name"] == "system")
            for e in log
            if e.type == "context_budget"
        }

    plain, coached = await reports(""), await reports(IDENTITY)

    tokens = TokenCounter("claude-haiku-4-5").count(IDENTITY)
    assert set(coached) == {"planner", "executor", "merger"}
    for role, section in coached.items():
        assert section["used"] == plain[role]["used"] + tokens, role
        assert section["used"] <= section["allocated"]


async def test_an_over_long_identity_is_cut_and_the_cut_reported() -> None:
    identity = "Always greet the member by name. " * 100
    counter = TokenCounter("claude-haiku-4-5")
    prompt = build_prompt(
        step_id="s1", goal="Read the clock", tools=[], data=[], budget=EXECUTOR_BUDGET,
        counter=counter, voice=Voice(identity=identity),
    )  # fmt: skip

    [system] = [s for s in prompt.report.sections if s.name == "system"]
    assert system.used <= system.allocated == EXECUTOR_BUDGET.tokens("system")
    assert any(c.section == "system" and "identity" in c.detail for c in prompt.report.cuts)
    assert prompt.parts.identity.startswith("Always greet")


async def test_the_planner_abbreviates_its_catalogue_to_make_room() -> None:
    tools = {f"tool.{i}": f"tool.{i}: Does thing number {i} for the studio." for i in range(300)}
    catalogue = Catalogue(tools=tools, read_tools=[])
    model = FunctionModel(lambda _r: json.dumps(PLANS["simple"]), name="claude-haiku-4-5")

    outcome = await make_plan(model, "hi", Planning(catalogue=catalogue, identity=IDENTITY))

    [request] = model.calls
    assert_identity_first(request)
    assert outcome.budget is not None and outcome.budget.within_budget
    [system] = [s for s in outcome.budget.sections if s.name == "system"]
    assert system.allocated == PLANNER_BUDGET.tokens("system")
    assert any(c.action == "abbreviated" for c in outcome.budget.cuts)
    text = "\n".join(block.text for block in request.system)
    assert [n for n in tools if f"- {n}" not in text] == []  # every name, whole


# --- the Anthropic wire ------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


async def test_the_identity_is_sent_before_the_cache_breakpoint(
    store: Store, server: FakeServer
) -> None:
    plan = ToolCall(id="p", name="plan", input=PLANS["complex"])
    server.provider.enqueue(
        anthropic_reply(tool_calls=[plan], usage=TokenUsage(input_tokens=9, output_tokens=9)),
        *[anthropic_reply(text="It is 09:00.") for _ in range(3)],  # two steps, the merge
    )
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    kit = TurnKit(tools=registry(), identity=IDENTITY)
    try:
        status = await run_turn(store, await start(store, model), kit)
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    assert len(server.provider.requests) == 4  # planner, two executors, merge
    for sent in server.provider.requests:
        system = sent.json["system"]
        marked = [i for i, block in enumerate(system) if "cache_control" in block]
        assert system[0] == {"type": "text", "text": IDENTITY}
        assert marked and marked[0] == 1
        assert sum("cache_control" in str(block) for block in _blocks(sent.json)) <= 4


def _blocks(body: dict[str, Any]) -> list[Any]:
    """Every block of a Messages API body that may carry ``cache_control``."""
    messages = [m["content"] for m in body["messages"]]
    content = [block for blocks in messages if isinstance(blocks, list) for block in blocks]
    return [*body.get("tools", []), *body["system"], *content]
