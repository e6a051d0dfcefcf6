"""The seeds' cache layout over HTTP (issue 26): a multi-turn chat through the real app and
the real Anthropic SDK against the fake server, which simulates the provider's prompt
cache (prefix hashes, TTLs, the model's minimum cacheable length). Every executor and
answer request carries four breakpoints (tools, static system, the org/user block, the
conversation tail; a call without tools marks the earlier turns instead of tools) with
1 h on the stable ones and 5 min on the tail; from the second call on at least 80% of the
input tokens are read from the cache; 1-hour writes are recorded and priced apart; the
budget report shows each call's hit ratio and flags prompts below the model's minimum."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, OPEN_EGRESS, Server
from helpers import stream_turn
from providers import TokenUsage, ToolCall, cost_usd_micros
from providers._anthropic import AnthropicModel
from providers._fake_anthropic import SSE_HEADERS
from providers._fake_server import Exchange
from providers.fake import FakeProvider, FakeServer, PromptCache, anthropic_reply

ORG = "acme"
MODEL = "claude-sonnet-4-6"  # minimum cacheable prefix: 1,024 tokens
# A realistic grant from the demo catalogue: a step's tools are what make an executor's
# prompt long enough to cache (Bosun's own executor instructions are ~300 tokens).
TOOLS = [
    "members.search", "members.get", "programs.list", "tasks.list", "artifacts.get",
    "workouts.create", "workouts.update", "tasks.create", "class_sessions.schedule",
    "programs.publish_bulk",
]  # fmt: skip
TURNS = 12  # long enough for the answers' prompts to pass the minimum cacheable length
ONE_HOUR, FIVE_MINUTES = {"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}


def plan(turn: int) -> dict[str, Any]:
    """Odd turns: one tool step; even turns: a direct answer, but every sixth: two steps
    and a merge."""
    step = {"goal": f"Look up the member Sam Rivera (turn {turn})", "tools": TOOLS}
    if turn % 6 == 0:
        steps = [{"id": "s1", **step}, {"id": "s2", **step, "goal": "List the programs"}]
        return {"strategy": "complex", "reasoning": "two lookups", "steps": steps}
    if turn % 2 == 0:
        return {"strategy": "simple", "reasoning": "a plain reply", "steps": []}
    return {"strategy": "tool", "reasoning": "one lookup", "steps": [{"id": "s1", **step}]}


def system_text(body: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in body.get("system") or [])


def role_of(body: dict[str, Any]) -> str:
    system = system_text(body)
    if "You are the planner" in system:
        return "planner"
    if "You carry out ONE step" in system:
        return "executor"
    if "You write the answer" in system:
        return "merge"
    if "You are Bosun, an assistant" in system:
        return "answer"
    return "upkeep"  # the session's title


class Chat:
    """The stand-in model: a reply for each role, usage from the simulated cache."""

    def __init__(self) -> None:
        self.cache = PromptCache(min_tokens=None)  # each model's own minimum
        self.turn = 0

    def respond(self, body: Any) -> tuple[bytes, ...]:
        role = role_of(body)
        last = body["messages"][-1]["content"]
        calls: list[ToolCall] = []
        text = ""
        if role == "planner":
            self.turn += 1
            calls = [ToolCall(id=f"p{self.turn}", name="plan", input=plan(self.turn))]
        elif role == "executor" and not any(b.get("type") == "tool_result" for b in last):
            query = {"query": "Sam Rivera"}
            calls = [ToolCall(id=f"toolu_{self.turn}_{len(body['messages'])}",
                              name="members_search", input=query)]  # fmt: skip
        else:
            text = "Sam Rivera is an active member." if role != "upkeep" else "Sam's plan"
        usage = self.cache.usage(body, 12)
        return anthropic_reply(text=text, tool_calls=calls, usage=usage, model=MODEL).chunks


@pytest.fixture
def provider() -> Iterator[FakeServer]:
    chat = Chat()
    fake = FakeProvider().enqueue(
        *(Exchange(headers=SSE_HEADERS, respond=chat.respond) for _ in range(150))
    )
    with FakeServer(fake) as started:
        yield started


@pytest.fixture
async def served(db_url: str, provider: FakeServer) -> AsyncIterator[Server]:
    """The app over HTTP with one Anthropic model for every role, closed afterwards."""
    settings = Settings(
        database_url=db_url, jwt_secret=JWT_SECRET, toolsets=[DEMO],
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
        egress=OPEN_EGRESS,  # type: ignore[arg-type]
        models={"default": f"anthropic:{MODEL}"},  # type: ignore[arg-type]
        providers={"anthropic_api_key": "test-key", "anthropic_base_url": provider.url,
                   "max_retries": 0},  # type: ignore[arg-type]
    )  # fmt: skip
    models = build_models(settings)
    async with Server(settings, models) as server:
        yield server
    assert isinstance(models.executor, AnthropicModel)
    await models.executor.aclose()  # one instance serves every role


def marks(body: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """Each ``cache_control`` in prompt order, with the kind of block carrying it."""
    found = [("tools", t["cache_control"]) for t in body.get("tools", []) if "cache_control" in t]
    found += [("system", b["cache_control"]) for b in body["system"] if "cache_control" in b]
    found += [
        ("messages", block["cache_control"])
        for message in body["messages"]
        for block in message["content"]
        if "cache_control" in block
    ]
    return found


async def test_a_chat_carries_four_marks_and_reads_its_prompts_from_the_cache(
    served: Server, provider: FakeServer
) -> None:
    server = served
    await seed_demo(server.store, ORG)
    headers = server.auth(org=ORG, role="owner")
    session: dict[str, str] = {}
    for turn in range(1, TURNS + 1):
        frames = await stream_turn(
            server.client, {"message": f"Tell me about Sam Rivera ({turn})", **session}, headers
        )
        assert frames[-1].data["status"] == "completed", frames[-1].data
        session = {"session_id": frames[0].data["session_id"]}
    log = await server.store.log.read(session["session_id"])
    report = (
        await server.client.get(f"/v1/sessions/{session['session_id']}/budget", headers=headers)
    ).json()

    bodies = [r.json for r in provider.provider.requests]
    roles = [role_of(b) for b in bodies]
    assert {"planner", "executor", "answer", "merge"} <= set(roles)
    for body, role in zip(bodies, roles, strict=True):
        if role not in {"executor", "answer", "merge"}:
            continue
        placed = marks(body)
        assert len(placed) == 4, (role, placed)
        kinds = [kind for kind, _ in placed]
        if body.get("tools"):  # tools, static system, org/user block, tail
            assert kinds == ["tools", "system", "system", "messages"]
        else:  # no tools: static system, org/user block, the earlier turns, the tail
            assert kinds == ["system", "system", "messages", "messages"]
        assert [ttl for _, ttl in placed] == [
            ONE_HOUR if kind != "messages" else FIVE_MINUTES for kind in kinds
        ]
        [org_user] = [b for b in body["system"] if b["text"].startswith("<caller ")]
        assert org_user["text"].startswith('<caller org="acme"') and "cache_control" in org_user

    calls = [call for e in log if e.type == "usage" for call in e.data["calls"]]
    assert len(calls) == len(bodies)
    later = calls[1:]
    read = sum(c["cache_read_tokens"] for c in later)
    prompt = sum(
        c["input_tokens"] + c["cache_read_tokens"] + c["cache_write_tokens"] for c in later
    )
    share = read / prompt
    print(f"cache reads from the second call on: {read}/{prompt} = {share:.1%}")
    assert share >= 0.8

    # 1-hour writes are recorded apart and priced at their rate, call by call
    first_executor = next(c for c in calls if c["role"] == "executor")
    assert 0 < first_executor["cache_write_1h_tokens"] < first_executor["cache_write_tokens"]
    for call in calls:
        usage = TokenUsage(**{k: call[k] for k in (
            "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
            "cache_write_1h_tokens")})  # fmt: skip
        assert call["cost_usd_micros"] == cost_usd_micros(MODEL, usage)
    five = TokenUsage(**{**vars_of(first_executor), "cache_write_1h_tokens": 0})
    assert first_executor["cost_usd_micros"] > cost_usd_micros(MODEL, five)

    # the report: a hit ratio per call, and the calls too short to be cached at all
    rows = [row for turn in report["turns"] for row in turn["model_calls"]]
    assert len(rows) == len(calls)
    assert all(row["min_cacheable_tokens"] == 1024 for row in rows)
    for row in rows:
        assert row["below_min_cacheable"] == (row["prompt_tokens"] < 1024)
        if row["below_min_cacheable"]:
            assert row["cache_read_tokens"] == row["cache_write_tokens"] == 0
    assert any(row["below_min_cacheable"] for row in rows)  # the session title, at least
    print(json.dumps([(r["role"], r["prompt_tokens"], r["cache_hit_ratio"]) for r in rows]))


def vars_of(call: dict[str, Any]) -> dict[str, int]:
    names = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    return {name: int(call[name]) for name in names}
