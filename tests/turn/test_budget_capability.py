"""Budgets cut data, never capability (issue 26, item 2): a step gets every tool it was
granted, whole, with the overrun reported; the planner sees every tool's name in catalogues
of 60, 120 and 400 tools; knowledge loaded for a turn reaches the executor, the direct
answer and the merge whole up to the per-source cap, and a cut says so."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from bosun.budget_report import render_table
from context import (
    PLANNER_BUDGET,
    Source,
    SourceRegistry,
    SourceRequest,
    TokenCounter,
    read_session_budget,
)
from events import SessionStarted, UserMessage
from planner import Catalogue, Planning, make_plan
from providers import FunctionModel, ModelRequest, Reply, TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers.fake import FakeProvider, FakeServer, anthropic_reply
from store import Store
from stream._budget import CallOut
from tools import ToolContext, ToolRegistry
from turn import Turn, TurnKit, run_turn

ORG = "acme"
LONG = (
    "Looks up the studio's records of one kind for the signed-in coach, with filters for "
    "dates, members, programs and classes; returns at most fifty rows, newest first, each "
    "with its id, its title, who owns it and when it last changed, so a later step can act "
    "on an exact id rather than a name that several records share."
)


class Lookup(BaseModel):
    member_id: str = Field(description="The member's id (mem_…), from members.search.")
    days_back: int = Field(default=30, description="How many days back to look, from today.")
    program_id: str | None = Field(default=None, description="Only rows of this program (prg_…).")
    class_id: str | None = Field(default=None, description="Only rows of this class (cls_…).")
    include_archived: bool = Field(default=False, description="Include archived rows too.")


class Found(BaseModel):
    rows: list[str]


def twelve_tools() -> ToolRegistry:
    tools = ToolRegistry()
    for i in range(12):

        async def handler(_args: Lookup, _ctx: ToolContext) -> Found:
            return Found(rows=[])

        tools.tool(name=f"records.lookup_{i}", summary=f"Kind {i}. {LONG}", category="read")(
            handler
        )
    return tools


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


async def open_turn(store: Store, session_id: str, text: str, *, first: bool) -> str:
    turn_id = str(uuid.uuid4())
    if first:
        await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    opening = [SessionStarted(session_id=session_id, turn_id=turn_id)] if first else []
    await store.log.open_turn(
        session_id, [*opening, UserMessage(message_id=f"m-{turn_id}", text=text)],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return turn_id


def turn_of(session_id: str, turn_id: str, text: str, model: Any) -> Turn:
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id="ada", role="owner", message_id=f"m-{turn_id}", text=text,
                model=model, planner=model)  # fmt: skip


async def test_a_step_granted_12_tools_with_long_descriptions_gets_all_12(
    store: Store, server: FakeServer
) -> None:
    tools = twelve_tools()
    names = [t.name for t in tools]
    step = {"id": "s1", "goal": "Look everything up", "tools": names, "max_tool_calls": 3}
    plan = {"strategy": "tool", "reasoning": "one job", "steps": [step]}
    server.provider.enqueue(
        anthropic_reply(tool_calls=[ToolCall(id="p", name="plan", input=plan)]),
        anthropic_reply(text="Nothing found.", usage=TokenUsage(input_tokens=9, output_tokens=9)),
    )
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    session_id = str(uuid.uuid4())
    try:
        turn_id = await open_turn(store, session_id, "Look it all up", first=True)
        status = await run_turn(
            store, turn_of(session_id, turn_id, "", model), TurnKit(tools=tools)
        )
    finally:
        await model.aclose()

    assert status == "completed" and server.provider.pending == 0
    _, executor = (r.json for r in server.provider.requests)
    sent = {t["name"]: t for t in executor["tools"]}
    # all 12, callable (and the built-in reader of earlier results)
    assert sorted(sent) == sorted([*(t.wire_name for t in tools), "tool_results_read"])
    granted = [sent[t.wire_name] for t in tools]
    assert all(LONG in t["description"] for t in granted)  # whole, not summarised
    fields = set(Lookup.model_fields)
    assert all(set(t["input_schema"]["properties"]) == fields for t in granted)
    assert "not callable" not in json.dumps(executor)

    log = await store.log.read(session_id)
    reports = [e.data["report"] for e in log if e.type == "context_budget"]
    [report] = [r for r in reports if r["role"] == "executor"]
    [overrun] = [c for c in report["cuts"] if c["action"] == "overrun"]
    [tools_section] = [s for s in report["sections"] if s["name"] == "tools"]
    assert overrun["section"] == "tools" and overrun["tokens_before"] == tools_section["allocated"]
    assert overrun["tokens_after"] == tools_section["used"] > tools_section["allocated"]
    assert "13 granted tools are sent whole" in overrun["detail"]  # and the result reader
    assert CallOut.model_validate(report).cuts[0].action == "overrun"  # the budget route's shape
    table = render_table(await read_session_budget(store, session_id))  # what `bosun budget` prints
    assert "tools overrun" in table and "13 granted tools are sent whole" in table


ROUTERS = ("members", "classes", "programs", "workouts", "bookings", "forms", "messages")


def catalogue(n: int) -> dict[str, str]:
    """``n`` tools across routers, each with a demo-like one-line summary."""
    tools = {}
    for i in range(n):
        name = f"{ROUTERS[i % len(ROUTERS)]}.action_{i}"
        tools[name] = f"{name}: Does one specific thing {i} for the studio's coaches, by id."
    return tools


@pytest.mark.parametrize(
    ("n", "cuts"), [(60, []), (120, ["abbreviated"]), (600, ["overrun", "abbreviated"])]
)
async def test_the_planner_sees_every_tool_name_and_plans_naming_them_validate(
    n: int, cuts: list[str]
) -> None:
    tools = catalogue(n)
    picked = [*list(tools)[:2], *list(tools)[-3:]]
    step = {"id": "s1", "goal": "Do it", "tools": picked, "max_tool_calls": 3}
    reply = json.dumps({"strategy": "tool", "reasoning": "one job", "steps": [step]})
    model = FunctionModel(lambda _r: Reply(text=reply), name="claude-haiku-4-5")
    planning = Planning(
        catalogue=Catalogue(tools=tools, read_tools=[]), counter=TokenCounter("claude-haiku-4-5")
    )

    outcome = await make_plan(model, "do it", planning)

    [request] = model.calls
    system = "\n".join(block.text for block in request.system)
    assert [name for name in tools if f"- {name}" not in system] == []
    assert outcome.fallback is None and outcome.attempts == 1
    assert outcome.plan.steps[0].tools == picked
    assert outcome.budget is not None
    assert [c.action for c in outcome.budget.cuts] == cuts
    if n == 60:  # the default budget holds a 60-tool catalogue with every summary
        assert all(line in system for line in tools.values())
        assert outcome.budget.within_budget
    [section] = [s for s in outcome.budget.sections if s.name == "system"]
    assert section.allocated == PLANNER_BUDGET.tokens("system")


# --- knowledge ---------------------------------------------------------------------------

SMALL = "\n".join(f"- visit {i}: member mem_{i:03d} booked Spin at 07:{i:02d}" for i in range(60))
LARGE = "\n".join(
    f"- note {i}: member mem_{i:04d} asked about plan prg_{i:04d}" for i in range(900)
)


def sources() -> SourceRegistry:
    async def small(_request: SourceRequest) -> str:
        return SMALL

    async def large(_request: SourceRequest) -> str:
        return LARGE

    return SourceRegistry([
        Source(name="visits", description="Recent visits.", fetch=small, estimate_tokens=2_000),
        Source(name="notes", description="Coach notes.", fetch=large, estimate_tokens=20_000),
    ])  # fmt: skip


class Clock(BaseModel):
    time: str


class Nothing(BaseModel):
    pass


def clock() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(name="clock.now", summary="The studio's clock.", category="read")
    async def now(_args: Nothing, _ctx: ToolContext) -> Clock:
        return Clock(time="09:00")

    return tools


STEP = {"id": "s1", "goal": "Read the clock", "tools": ["clock.now"], "max_tool_calls": 2}
PICK = [{"name": "visits", "why": "needed"}, {"name": "notes", "why": "needed"}]
PLANS: list[dict[str, Any]] = [
    {"strategy": "tool", "reasoning": "one job", "sources": PICK, "steps": [STEP]},
    {"strategy": "simple", "reasoning": "from knowledge"},
    {"strategy": "complex", "reasoning": "two jobs", "steps": [STEP, {**STEP, "id": "s2"}]},
]


def text_of(request: ModelRequest) -> str:
    return "\n".join(block.text for block in request.system)


async def test_knowledge_reaches_every_call_whole_up_to_the_per_source_cap(store: Store) -> None:
    turn_plans = iter(PLANS)

    async def reply(request: ModelRequest) -> Reply:
        if "You are the planner" in text_of(request):
            return Reply(text=json.dumps(next(turn_plans)))
        return Reply(text="Done.")

    model = FunctionModel(reply, name="claude-haiku-4-5")
    kit = TurnKit(tools=clock(), sources=sources(), knowledge_source_tokens=3_000)
    session_id = str(uuid.uuid4())
    for n in range(3):
        turn_id = await open_turn(store, session_id, f"question {n}", first=n == 0)
        status = await run_turn(store, turn_of(session_id, turn_id, f"question {n}", model), kit)
        assert status == "completed"

    log = await store.log.read(session_id)
    loaded = {e.data["source"]: e.data for e in log if e.type == "context_loaded"}
    counter = TokenCounter("claude-haiku-4-5")
    assert counter.count(SMALL) > 1_000 and counter.count(LARGE) > 3_000
    assert not loaded["visits"]["truncated"] and SMALL in loaded["visits"]["text"]
    notes = loaded["notes"]
    assert notes["truncated"] and notes["tokens"] <= 3_000
    assert "[This source was cut to fit its budget of 3,000 tokens" in notes["text"]
    assert [c["action"] for c in notes["cuts"]] == ["truncated"]
    assert "source notes over its own budget of 3,000 tokens" in notes["cuts"][0]["detail"]

    answering = [r for r in model.calls if "You are the planner" not in text_of(r)]
    assert len(answering) == 1 + 1 + 2 + 1  # executor; direct answer; two steps and the merge
    for request in answering:  # executor, direct answer, executors and merge: all of it
        assert SMALL in text_of(request) and notes["text"] in text_of(request)
    budgets = [e.data["report"] for e in log if e.type == "context_budget"]
    knowledge = [s for b in budgets for s in b["sections"] if s["name"] == "knowledge"]
    assert len(knowledge) == len(answering)
    assert all(s["used"] > 4_000 for s in knowledge)  # above the section: grown, reported
    overruns = [c for b in budgets for c in b["cuts"] if c["section"] == "knowledge"]
    assert [c["action"] for c in overruns] == ["overrun"] * len(answering)
    assert all("2 loaded sources are sent whole" in c["detail"] for c in overruns)
