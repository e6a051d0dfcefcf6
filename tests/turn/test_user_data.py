"""An agent's user-data block (spec §4.4): per-user sources fetched afresh on every model
call, sent as their own system block carrying cache breakpoint 3, so a tool-loop request
carries four breakpoints (last tool, system, user data, last message); the planner's
``profile`` section reports what the block used; on the Anthropic wire every breakpoint
has the configured TTL and the second call of a loop reads the repeated prefix from the
(simulated) prompt cache."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from context import Budgets, Source, SourceRegistry, SourceRequest
from context._layout import cache_marks
from events import SessionStarted, UserMessage
from providers import FunctionModel, Model, ModelRequest, Reply, TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import CacheTTL, ProviderConfig
from providers.fake import FakeProvider, FakeServer, PromptCache, anthropic_reply
from store import Store
from tools import ToolContext, ToolRegistry
from turn import Turn, TurnKit, run_turn

ORG = "acme"
PLAN = {
    "strategy": "tool",
    "reasoning": "read the clock",
    "steps": [{"id": "s1", "goal": "Read the clock", "tools": ["clock.now"], "max_tool_calls": 2}],
}


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


class Member:
    """A per-user source counting its fetches; ``revise``: its data changes between
    fetches (the user edits their profile mid-turn)."""

    def __init__(self, *, revise: bool = True) -> None:
        self.fetches: list[SourceRequest] = []
        self.revise = revise

    async def fetch(self, request: SourceRequest) -> str:
        self.fetches.append(request)
        revision = len(self.fetches) if self.revise else 1
        return f"Member: Sam Rivera\nWeight unit: kg\nRevision: {revision}"


def kit(member: Member) -> TurnKit:
    source = Source(
        name="members.profile",
        description="the member and their units",
        fetch=member.fetch,
        user_data=True,
    )
    budgets = Budgets()
    budgets = Budgets(
        executor=budgets.executor.with_section("profile", budgets.planner.tokens("profile"))
    )
    return TurnKit(
        tools=registry(),
        sources=SourceRegistry([source]),
        user_data=("members.profile",),
        budgets=budgets,
    )


def role_of(request: ModelRequest) -> str:
    if any("You are the planner" in b.text for b in request.system):
        return "planner"
    return "executor"


def scripted() -> FunctionModel:
    async def reply(request: ModelRequest) -> Reply:
        if role_of(request) == "planner":
            return Reply(text=json.dumps(PLAN))
        if len(request.messages) == 1:
            return Reply(tool_calls=(ToolCall(id="c1", name="clock_now", input={}),))
        return Reply(text="It is 09:00.")

    return FunctionModel(reply, name="claude-haiku-4-5")


async def start(store: Store, model: Model) -> Turn:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="mem_sam", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="What time is it?")],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id="mem_sam", role="member", message_id="m", text="What time is it?",
                model=model, planner=model)  # fmt: skip


def user_data_block(request: ModelRequest) -> tuple[str, bool]:
    [block] = [b for b in request.system if b.text.startswith("<user_data>")]
    return block.text, block.cache


async def test_tool_loop_requests_carry_four_marks_and_fresh_user_data(store: Store) -> None:
    model, member = scripted(), Member()

    status = await run_turn(store, await start(store, model), kit(member))

    assert status == "completed"
    planner, *executors = model.calls
    assert role_of(planner) == "planner" and len(executors) == 2
    for request in executors:
        assert request.cache_tools and request.tools  # 1: the last tool
        # 2: system, 3: the org/user block (who the caller is, then the user data)
        assert [b.cache for b in request.system] == [True, False, True]
        assert request.system[1].text == '<caller org="acme" user="mem_sam" role="member"/>'
        assert [m.cache for m in request.messages][-1] is True  # 4: the last message
        assert cache_marks(request) == 4
    # Fetched for every call, as the member is (the JWT user), so each call sees the
    # data as it is now: the second executor call shows the later revision.
    assert len(member.fetches) == 3
    assert {(f.org_id, f.user_id) for f in member.fetches} == {(ORG, "mem_sam")}
    texts = [user_data_block(r)[0] for r in model.calls]
    assert texts[0].startswith("<user_data>\n<members_profile>\nMember: Sam Rivera")
    assert texts[0].endswith("</members_profile>\n</user_data>")
    assert [t.rsplit("Revision: ", 1)[1][0] for t in texts] == ["1", "2", "3"]
    assert all(user_data_block(r)[1] for r in model.calls)  # the planner's is marked too


async def test_the_profile_sections_report_what_the_block_used(store: Store) -> None:
    turn = await start(store, scripted())

    await run_turn(store, turn, kit(Member()))

    log = await store.log.read(turn.session_id)
    reports = {e.data["role"]: e.data["report"] for e in log if e.type == "context_budget"}
    for role in ("planner", "executor"):
        [profile] = [s for s in reports[role]["sections"] if s["name"] == "profile"]
        assert 0 < profile["used"] <= profile["allocated"] == 300, role


async def test_an_agent_without_user_data_sends_no_block(store: Store) -> None:
    model = scripted()
    plain = TurnKit(tools=registry())

    await run_turn(store, await start(store, model), plain)

    assert all(not b.text.startswith("<user_data>") for r in model.calls for b in r.system)
    # tools, system, the org/user block (the caller alone), the message tail
    assert all(cache_marks(r) == 4 for r in model.calls[1:])
    assert all(r.system[-1].text.startswith("<caller ") for r in model.calls[1:])


# --- the Anthropic wire ------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


def marked(body: dict[str, Any]) -> dict[str, Any]:
    """Where the request's ``cache_control`` breakpoints are, and what they say."""
    found = {f"tools[{i}]": t["cache_control"] for i, t in enumerate(body.get("tools", []))
             if "cache_control" in t}  # fmt: skip
    found |= {f"system[{i}]": b["cache_control"] for i, b in enumerate(body["system"])
              if "cache_control" in b}  # fmt: skip
    for m, message in enumerate(body["messages"]):
        content = message["content"] if isinstance(message["content"], list) else []
        found |= {f"messages[{m}].content[{i}]": b["cache_control"]
                  for i, b in enumerate(content) if "cache_control" in b}  # fmt: skip
    return found


async def run_on_the_wire(
    store: Store, server: FakeServer, ttl: CacheTTL, tail: CacheTTL = "5m"
) -> Turn:
    cache = PromptCache()
    out = TokenUsage(output_tokens=9)
    server.provider.enqueue(
        anthropic_reply(tool_calls=[ToolCall(id="p", name="plan", input=PLAN)], usage=out),
        anthropic_reply(tool_calls=[ToolCall(id="c1", name="clock_now", input={})],
                        usage=out, cache=cache),
        anthropic_reply(text="It is 09:00.", usage=out, cache=cache),
    )  # fmt: skip
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0,
        cache_ttl=ttl, tail_cache_ttl=tail,
    )  # fmt: skip
    model = AnthropicModel("claude-haiku-4-5", config=config)
    turn = await start(store, model)
    try:
        assert await run_turn(store, turn, kit(Member(revise=False))) == "completed"
    finally:
        await model.aclose()
    return turn


async def test_four_breakpoints_on_the_wire_and_the_second_call_reads_the_cache(
    store: Store, server: FakeServer
) -> None:
    turn = await run_on_the_wire(store, server, "1h")

    _planner, first, second = (r.json for r in server.provider.requests)
    hour, five = {"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}
    for body in (first, second):
        last = len(body["messages"]) - 1
        last_block = len(body["messages"][last]["content"]) - 1
        assert marked(body) == {
            f"tools[{len(body['tools']) - 1}]": hour,
            "system[0]": hour,
            "system[2]": hour,
            f"messages[{last}].content[{last_block}]": five,
        }
        assert body["system"][1]["text"].startswith("<caller ")
        assert body["system"][2]["text"].startswith("<user_data>")
    log = await store.log.read(turn.session_id)
    [usage] = [e.data for e in log if e.type == "usage"]
    executor_calls = [c for c in usage["calls"] if c["role"] == "executor"]
    first_call, second_call = executor_calls
    assert first_call["cache_read_tokens"] == 0 and first_call["cache_write_tokens"] > 0
    # The second call repeats the whole first prompt (tools, system, user data, the task):
    # all of it is read from the cache, only the new messages are written.
    assert second_call["cache_read_tokens"] == first_call["cache_write_tokens"]
    assert second_call["cache_write_tokens"] > 0
    assert 0 < second_call["cache_hit_ratio"] <= 1


async def test_the_one_hour_ttl_reaches_every_breakpoint(store: Store, server: FakeServer) -> None:
    await run_on_the_wire(store, server, "1h", "1h")

    one_hour = {"type": "ephemeral", "ttl": "1h"}
    for sent in server.provider.requests[1:]:
        assert set(map(json.dumps, marked(sent.json).values())) == {json.dumps(one_hour)}
        assert len(marked(sent.json)) == 4
