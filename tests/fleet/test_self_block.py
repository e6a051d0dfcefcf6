"""The agent knows who it is: a saved agent's self block (handle, name, owner, the tools
it may and may not use, its subscriptions) follows its identity prompt at the head of
every role's prompt (planner, executors, merge, direct answer), inside the cached prefix
without a mark of its own, counted in each ``system`` section; the built-in default agent
has none, so turns without agents are unchanged."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from context import TokenCounter
from context._layout import MAX_CACHE_MARKS, cache_marks
from events import SessionStarted, UserMessage
from fleet import (
    SELF_BLOCK_TOKENS,
    Agent,
    AgentDirectory,
    AgentProfile,
    AgentSelf,
    agent_self,
    default_policy,
    default_profile,
    self_block,
)
from fleet._directory import IDENTITY_COUNTER, SUBSCRIPTIONS_FRESH_S
from providers import FunctionModel, Model, ModelRequest, Reply, TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers.fake import FakeProvider, FakeServer, anthropic_reply
from store import Store
from store import _subscriptions as store_subscriptions
from tools import Capabilities, ToolContext, ToolRegistry
from turn import Turn, TurnKit, run_turn

ORG = "acme"
IDENTITY = "You are Coach, the studio's scheduling assistant. Be brief."
COACH = AgentProfile(
    name="Coach", identity_prompt=IDENTITY, tools=["clock.*"], approvals=["clock.set"]
)
BLOCK = """<self>
You are the agent @coach, "Coach". You belong to the organisation (no person owns you).
Tools you may use: clock.now.
Tools you may use only with a person's approval (a call waits): clock.set.
Tools you may not use: clock.reset (blocked here); 1 other tool here, not granted to you.
Your subscriptions (what starts your runs): commented on note 42; replied on workout w_1.
</self>"""
STEP = {"id": "s1", "goal": "Read the clock", "tools": ["clock.now"], "max_tool_calls": 2}
PLANS: dict[str, dict[str, Any]] = {
    "simple": {"strategy": "simple", "reasoning": "chat"},
    "complex": {"strategy": "complex", "reasoning": "two reads", "steps": [
        STEP, {**STEP, "id": "s2", "goal": "Read the clock again"},
    ]},
}  # fmt: skip
INSTRUCTIONS = {"planner": "You are the planner", "executor": "ONE step"}


class Nothing(BaseModel):
    pass


def registry(
    order: Sequence[str] = ("clock.now", "clock.set", "clock.reset", "notes.read"),
) -> ToolRegistry:
    tools = ToolRegistry()
    for name in order:

        @tools.tool(name=name, summary=f"{name} of the studio.", category="read")
        async def run(_args: Nothing, _ctx: ToolContext) -> Nothing:
            return Nothing()

    return tools


def server_kit(tools: ToolRegistry | None = None) -> TurnKit:
    """The server's kit: its tools, one of them blocked for every agent."""
    blocked = Capabilities(blocked=frozenset({"clock.reset"}))
    return TurnKit(tools=tools or registry(), capabilities=blocked)


async def directory(store: Store, kit: TurnKit) -> AgentDirectory:
    """The org's directory, coach subscribed to two things (added in the unsorted order)."""
    for resource, rid, events in (("workout", "w_1", ["replied"]), ("note", "42", ["commented"])):
        await store.subscriptions.add(
            ORG, "coach", resource_type=resource, resource_id=rid, event_types=events,
            created_by="u_1",
        )  # fmt: skip
    return AgentDirectory(store, default_policy(kit, []), kit, default_profile(kit))


# --- the block ---------------------------------------------------------------------------


def test_the_block_says_who_the_agent_is_and_what_it_may_do() -> None:
    kit = server_kit()
    caps = default_policy(kit, []).capabilities(COACH)

    me = agent_self(
        "coach", "Coach", tools=registry(), capabilities=caps,
        subscriptions=["replied on workout w_1", "commented on note 42"],
    )  # fmt: skip

    assert me == AgentSelf(
        handle="coach", name="Coach", may_use=("clock.now",), needs_approval=("clock.set",),
        may_not_use=("clock.reset",), not_granted=1,
        subscriptions=("commented on note 42", "replied on workout w_1"),
    )  # fmt: skip
    assert self_block(me, counter=TokenCounter(IDENTITY_COUNTER)) == BLOCK
    owned = self_block(
        AgentSelf(handle="coach", name="Coach <b>\nthe second", parent="u_42"),
        counter=TokenCounter(IDENTITY_COUNTER),
    )
    assert owned.splitlines()[1:3] == [
        'You are the agent @coach, "Coach &lt;b&gt; the second". You belong to the user u_42 '
        "(your parent): they set you up and answer your approvals.",
        "Tools you may use: none.",
    ]


def test_the_block_is_the_same_whatever_order_its_facts_come_in() -> None:
    names = ["clock.now", "clock.set", "clock.reset", "notes.read", "alarm.ring", "alarm.snooze"]
    caps = Capabilities(blocked=frozenset({"clock.reset"}), confirm=frozenset({"alarm.*"}))
    counter = TokenCounter(IDENTITY_COUNTER)
    texts = set()
    for seed in range(5):
        shuffled = random.Random(seed).sample(names, len(names))
        subs = random.Random(seed).sample(["a on 1", "b on 2", "c on 3"], 3)
        me = agent_self("coach", "Coach", tools=registry(shuffled), capabilities=caps,
                        subscriptions=subs)  # fmt: skip
        texts.add(self_block(me, counter=counter))

    [text] = texts
    assert "Tools you may use: clock.now, clock.set, notes.read." in text
    assert "(a call waits): alarm.ring, alarm.snooze." in text


def test_a_long_block_is_cut_to_its_token_budget() -> None:
    counter = TokenCounter(IDENTITY_COUNTER)
    me = AgentSelf(
        handle="a" * 40, name="N" * 80, parent="u" * 300,
        may_use=tuple(f"router_{i}.tool_{i}_{'x' * 50}" for i in range(300)),
        needs_approval=tuple(f"pay.t{i}" for i in range(100)),
        may_not_use=tuple(f"admin.t{i}" for i in range(100)), not_granted=999,
        subscriptions=tuple(f"comments on note {i} {'y' * 300}" for i in range(100)),
    )  # fmt: skip
    few = AgentSelf(handle="coach", name="Coach", may_use=tuple(f"t.n{i:02}" for i in range(40)))

    text = self_block(me, counter=counter)
    short = self_block(few, counter=counter)

    assert counter.count(text) <= SELF_BLOCK_TOKENS
    assert "and 299 more" in text or "300 tools" in text
    assert "999 other tools here" in text and "u" * 119 + "…" in text
    assert "Tools you may use: t.n00, t.n01," in short and "t.n29 and 10 more." in short


# --- the kit -----------------------------------------------------------------------------


async def test_a_saved_agent_speaks_with_its_identity_then_its_self_block(store: Store) -> None:
    kit = server_kit()
    agents = await directory(store, kit)

    setup = await agents.setup(Agent("coach", 1, COACH), org_id=ORG)
    again = await agents.setup(Agent("coach", 1, COACH), org_id=ORG, background=True)
    bare = await agents.setup(
        Agent("coach", 2, COACH.model_copy(update={"identity_prompt": ""})), org_id=ORG
    )

    assert setup.kit.identity == f"{IDENTITY}\n\n{BLOCK}"
    assert again.kit.identity == setup.kit.identity  # deterministic: one cached prefix
    assert bare.kit.identity == BLOCK
    grown = TokenCounter(IDENTITY_COUNTER).count(setup.kit.identity)
    for role in ("planner", "executor", "merger"):
        allocated = setup.kit.budgets.for_role(role).tokens("system")
        assert allocated == kit.budgets.for_role(role).tokens("system") + grown, role


async def test_a_person_owned_agent_knows_its_parent(store: Store) -> None:
    agents = await directory(store, server_kit())

    owned = COACH.model_copy(update={"parent": "u_sam"})
    setup = await agents.setup(Agent("coach", 3, owned), org_id=ORG)

    assert "You belong to the user u_sam (your parent)" in setup.kit.identity
    assert "your parent" not in BLOCK  # an org's agent has none


async def test_subscriptions_are_described_as_the_block_lists_them(store: Store) -> None:
    added = [
        await store.subscriptions.add(
            ORG, "coach", resource_type="note", resource_id="42",
            event_types=["commented", "updated"], created_by="u_1",
        ),
        await store.subscriptions.add(
            ORG, "coach", resource_type="workout", resource_id=None, event_types=[],
            created_by="u_1",
        ),
    ]  # fmt: skip

    assert [sub.describe() for sub in added] == [
        "commented, updated on note 42", "any event on every workout",
    ]  # fmt: skip


async def test_a_busy_agents_subscriptions_are_read_once_in_a_while(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run's setup would read them; a process reads them at most every
    SUBSCRIPTIONS_FRESH_S, sees its own changes at once, another's after that."""
    agents = await directory(store, server_kit())
    await store.agents.save(ORG, "coach", COACH.model_dump(mode="json"), by="u_1", create=True)
    other = Store(db_url)  # another worker's process, on the same database
    try:
        first = await agents.setup(Agent("coach", 1, COACH), org_id=ORG)
        elsewhere = await other.subscriptions.add(
            ORG, "coach", resource_type="plan", resource_id=None, event_types=[],
            created_by="u_2",
        )  # fmt: skip
        second = await agents.setup(Agent("coach", 1, COACH), org_id=ORG)
        assert second.kit.identity == first.kit.identity  # remembered: no read
        assert "every plan" not in second.kit.identity

        clock = time.monotonic() + SUBSCRIPTIONS_FRESH_S + 1
        monkeypatch.setattr(store_subscriptions, "time", SimpleNamespace(monotonic=lambda: clock))
        later = await agents.setup(Agent("coach", 1, COACH), org_id=ORG)
        assert "any event on every plan" in later.kit.identity  # read again

        await store.subscriptions.delete(ORG, "coach", elsewhere.id)  # here: shows at once
        latest = await agents.setup(Agent("coach", 1, COACH), org_id=ORG)
        assert latest.kit.identity == first.kit.identity
        await store.agents.delete(ORG, "coach")  # its subscriptions go with it
        assert await store.subscriptions.for_agent(ORG, "coach", max_age_s=60) == []
    finally:
        await other.close()


async def test_the_default_agent_has_no_self_block(store: Store) -> None:
    kit = server_kit()
    agents = await directory(store, kit)

    setup = await agents.setup(await agents.get(ORG, None), org_id=ORG)

    assert setup.agent.version == 0
    assert setup.kit.identity == "" and setup.kit.budgets == kit.budgets


# --- every role's prompt -----------------------------------------------------------------


def role_of(request: ModelRequest) -> str:
    text = "\n".join(block.text for block in request.system)
    return next((role for role, mark in INSTRUCTIONS.items() if mark in text), "writer")


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


async def coach_kit(store: Store) -> TurnKit:
    agents = await directory(store, server_kit())
    return (await agents.setup(Agent("coach", 1, COACH), org_id=ORG)).kit


@pytest.mark.parametrize(
    ("strategy", "roles"),
    [("simple", ["planner", "writer"]), ("complex", ["planner", *["executor"] * 4, "writer"])],
)
async def test_every_role_reads_the_block_first_inside_its_cached_prefix(
    store: Store, strategy: str, roles: list[str]
) -> None:
    model = scripted(strategy)

    status = await run_turn(store, await start(store, model), await coach_kit(store))

    assert status == "completed"
    assert sorted(role_of(r) for r in model.calls) == sorted(roles)  # writer: answer, merge
    for request in model.calls:
        first, *rest = request.system
        assert first.text == f"{IDENTITY}\n\n{BLOCK}" and not first.cache
        assert rest and rest[0].cache  # the static block's mark covers the self block
        assert all(mark not in first.text for mark in INSTRUCTIONS.values())
        assert cache_marks(request) <= MAX_CACHE_MARKS


async def test_the_block_counts_in_each_system_section(store: Store) -> None:
    async def systems(kit: TurnKit) -> dict[str, dict[str, Any]]:
        turn = await start(store, scripted("complex"))
        await run_turn(store, turn, kit)
        return {
            e.data["role"]: next(s for s in e.data["report"]["sections"] if s["name"] == "system")
            for e in await store.log.read(turn.session_id)
            if e.type == "context_budget"
        }

    kit = await coach_kit(store)
    plain, coached = await systems(replace(kit, identity="")), await systems(kit)

    tokens = TokenCounter("claude-haiku-4-5").count(kit.identity)
    assert BLOCK in kit.identity and set(coached) == {"planner", "executor", "merger"}
    for role, section in coached.items():
        assert section["used"] == plain[role]["used"] + tokens, role
        assert section["used"] <= section["allocated"], role


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


async def test_the_block_is_sent_before_the_cache_breakpoint(
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
    try:
        status = await run_turn(store, await start(store, model), await coach_kit(store))
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    assert len(server.provider.requests) == 4  # planner, two executors, merge
    for sent in server.provider.requests:
        system = sent.json["system"]
        marked = [i for i, block in enumerate(system) if "cache_control" in block]
        assert system[0] == {"type": "text", "text": f"{IDENTITY}\n\n{BLOCK}"}
        assert marked and marked[0] == 1
