"""Issue 26's acceptance for budgets on the shipped trainer agent: with default settings
(no budget override), over the fake Anthropic server through the real SDK, a scripted
model generates and delivers a workout in turn 1 and swaps, adjusts and logs it in turns
2-4. Every request's ``tools`` holds every tool the forced loop grants, and the source
the planner loaded in turn 1 reaches turn 3's requests whole."""

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
from providers.fake import FakeProvider, FakeServer, anthropic_reply
from store import Store
from turn import Turn, TurnKit, run_turn

ORG = "acme"
EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "trainer.yaml"
OUT = TokenUsage(input_tokens=10, output_tokens=20)


def _exercise(name: str, kind: str = "reps", **fields: Any) -> dict[str, Any]:
    by_type: dict[str, dict[str, Any]] = {
        "reps": {"sets": 3, "reps": [12, 10, 8], "rest_sec": 60},
        "hold": {"sets": 2, "hold_sec": [30, 30], "rest_sec": 30},
    }
    return {
        "exercise_name": name, "exercise_type": kind, "reasoning": "A staple.",
        "muscles_utilized": [{"muscle": "Chest", "share": 0.7},
                             {"muscle": "Triceps", "share": 0.3}],
        "goals_addressed": [{"goal": "strength", "share": 1.0}], **by_type[kind], **fields,
    }  # fmt: skip


WORKOUT = {"title": "Chest", "exercises": [_exercise("Push-up"), _exercise("Plank", "hold")]}
TURNS: list[tuple[str, str, dict[str, Any]]] = [
    ("Give me a quick chest workout", "trainer_generate_workout", {"workout": WORKOUT}),
    ("Swap the first exercise", "trainer_swap_exercise",
     {"exercise_id": "1", "new_exercise": _exercise("Dip")}),
    ("Make the plank longer", "trainer_adjust_exercise",
     {"exercise_id": "2", "adjustments": {"hold_sec": [45, 45]}}),
    ("Done, log it", "trainer_log_workout",
     {"completed_exercises": [{"exercise_id": "1", "sets_done": 3}, {"exercise_id": "2"}]}),
]  # fmt: skip
SOURCE = {"name": "recent_activity", "why": "recent work", "params": {"days_back": 30}}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


def trainer() -> Agent:
    """The example's trainer profile, as ``bosun agents apply`` would save it."""
    [entry] = yaml.safe_load(EXAMPLE.read_text())
    assert "budgets" not in entry  # the shipped example carries no override
    fields = {k: v for k, v in entry.items() if k != "handle"}
    return Agent(entry["handle"], 1, AgentProfile.model_validate(fields))


def plan(sources: list[dict[str, Any]]) -> Exchange:
    step = {"id": "s1", "goal": "Do it", "tools": ["trainer.generate_workout"]}
    body = {"strategy": "tool", "reasoning": "The loop.", "sources": sources, "steps": [step]}
    return anthropic_reply(tool_calls=[ToolCall(id="p", name="plan", input=body)], usage=OUT)


def notify() -> Exchange:
    """Deliver the artifact the last tool result named (its id is made at run time)."""

    def respond(body: Any) -> tuple[bytes, ...]:
        made = re.findall(r"art_[0-9a-f]+", json.dumps(body["messages"][-1]["content"]))
        call = ToolCall(id="toolu_n", name="message_notify_user",
                        input={"message": "Here it is.", "artifact_id": made[0]})  # fmt: skip
        return anthropic_reply(tool_calls=[call], usage=OUT).chunks

    return Exchange(headers=SSE_HEADERS, respond=respond)


async def open_turn(store: Store, session_id: str, text: str, *, first: bool) -> str:
    turn_id = str(uuid.uuid4())
    opening = [SessionStarted(session_id=session_id, turn_id=turn_id)] if first else []
    await store.log.open_turn(
        session_id, [*opening, UserMessage(message_id=f"m-{turn_id}", text=text)],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return turn_id


async def test_the_shipped_trainer_keeps_every_tool_and_its_knowledge_over_four_turns(
    store: Store, server: FakeServer
) -> None:
    await seed_demo(store, ORG)
    kit = TurnKit(tools=demo_registry(), sources=demo_sources(store))
    directory = AgentDirectory(store, default_policy(kit, []), kit, default_profile(kit))
    setup = await directory.setup(trainer(), org_id=ORG)
    member = seed_id(ORG, "mem", 0)
    config = ProviderConfig(
        anthropic_api_key="test-key", anthropic_base_url=server.url, max_retries=0
    )
    model = AnthropicModel("claude-haiku-4-5", config=config)
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id=member, session_id=session_id, title=None)
    sent: list[list[dict[str, Any]]] = []  # each turn's executor request bodies
    try:
        for n, (text, tool, args) in enumerate(TURNS):
            idle = ToolCall(id=f"i{n}", name="agent_idle", input={"reason": "done"})
            server.provider.enqueue(
                plan([SOURCE] if n == 0 else []),
                anthropic_reply(tool_calls=[ToolCall(id=f"t{n}", name=tool, input=args)]),
                notify(),
                anthropic_reply(tool_calls=[idle], usage=OUT),
            )
            before = len(server.provider.requests)
            turn_id = await open_turn(store, session_id, text, first=n == 0)
            turn = Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                        user_id=member, role="member", message_id=f"m-{turn_id}", text=text,
                        model=model, planner=model)  # fmt: skip
            status = await run_turn(store, turn, setup.kit)
            assert status == "completed", (n, status)
            assert server.provider.pending == 0
            sent.append([r.json for r in server.provider.requests[before + 1 :]])
    finally:
        await model.aclose()

    log = await store.log.read(session_id)
    started = [e.data["tool"] for e in log if e.type == "tool_started"]
    done = [e.data for e in log if e.type == "tool_completed"]
    assert started == [
        name for _, tool, _ in TURNS
        for name in (tool.replace("_", ".", 1), "message.notify_user", "agent.idle")
    ]  # fmt: skip
    assert all(d.get("status", "ok") == "ok" and not d.get("error") for d in done), done

    granted = setup.kit.capabilities.usable(setup.kit.tools.for_role("member"))
    wire = {t.wire_name for t in granted}
    assert {"trainer_generate_workout", "trainer_swap_exercise", "trainer_adjust_exercise",
            "trainer_remove_exercise", "trainer_log_workout", "artifacts_get",
            "message_notify_user", "message_ask_user", "agent_idle"} <= wire  # fmt: skip
    for bodies in sent:
        assert len(bodies) == 3
        for body in bodies:  # every granted tool, whole (its full input schema)
            assert {t["name"] for t in body["tools"]} == wire | {"tool_results_read"}
            assert all(t["input_schema"].get("properties") is not None for t in body["tools"])

    [loaded] = [e.data for e in log if e.type == "context_loaded"]
    assert loaded["source"] == "recent_activity" and not loaded["truncated"]
    assert loaded["tokens"] > 400  # more than the old data section held
    for body in sent[2]:  # turn 3's requests carry turn 1's knowledge whole
        assert loaded["text"] in "\n".join(block["text"] for block in body["system"])
    budgets = [e.data["report"] for e in log if e.type == "context_budget"]
    executor = [b for b in budgets if b["role"] == "executor"]
    assert executor and all(
        c["action"] not in {"dropped", "abbreviated"} or c["section"] == "data"
        for b in executor for c in b["cuts"]
    )  # fmt: skip
