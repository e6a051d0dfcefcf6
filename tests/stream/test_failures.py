"""One failure rule on every path: a provider outage fails the turn, truthfully.

A turn whose work could not be done because the provider failed ends with ``error``
(``provider_*``) then ``done {"status": "failed"}``, in the stream, in ``POST /v1/chat``,
in the turn row and in ``turn.failed``: on the simple, tool and complex paths, after a
resume and after a takeover. A complex plan with some steps done still merges and says
which steps failed (``done.partial``, ``failed_steps``). The planner's failure alone is
contained (trainer spec §12.3): its fallback plan still runs the main loop.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import demo_registry, seed_demo, seed_id
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from events import (
    Event,
    PlanCreated,
    PlanStep,
    SessionStarted,
    StepCompleted,
    StepError,
    StepStarted,
    UserMessage,
)
from helpers import Frame, stream_post, stream_turn, types
from providers import ScriptedModel, TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers.fake import (
    FakeProvider,
    FakeServer,
    anthropic_error,
    anthropic_reply,
    json_exchange,
)
from store import Store, StoredEvent
from turn import TurnKit, TurnModels, TurnRunner
from turn._keeper import Keeper
from turn._models import ModelResolver

ORG = "acme"
PLANNER = "You are the planner"
OVERLOADED = {"error": {"code": "provider_overloaded", "message": "Overloaded"}}


def plan(strategy: str, *steps: dict[str, Any]) -> dict[str, Any]:
    body = {"strategy": strategy, "reasoning": "test", "steps": list(steps), "executors": 2}
    return {"match": PLANNER, "text": json.dumps(body)}


def step(id: str, goal: str, tools: list[str], **more: Any) -> dict[str, Any]:
    return {"id": id, "goal": goal, "tools": tools, **more}


SCHEDULE, MEMBERS = "Look up the class schedule", "Count the active members"


def two_steps(*replies: dict[str, Any]) -> ScriptedModel:
    """A complex plan of two independent lookups, then ``replies``."""
    steps = step("s1", SCHEDULE, ["programs.list"]), step("s2", MEMBERS, ["members.search"])
    return ScriptedModel([plan("complex", *steps), *replies])


def done(frames: list[Frame]) -> dict[str, Any]:
    assert frames[-1].event == "done"
    return frames[-1].data


async def turn_status(store: Store, session_id: str) -> str:
    return (await store.sessions.turns(session_id))[-1].status


# --- a stand-in provider that fails every request, through the real SDK -------------


def outage(status: int) -> list[Any]:
    """Enough failing replies for every call a turn makes (and the SDK's retries)."""
    if status == 429:  # the provider says how long to wait: the error event passes it on
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        return [json_exchange(429, body, (("retry-after", "7"),)) for _ in range(20)]
    return [anthropic_error(status) for _ in range(20)]


OUTAGES = [
    pytest.param(529, "provider_overloaded", id="529"),
    pytest.param(429, "provider_rate_limited", id="429"),
    pytest.param(500, "provider_unavailable", id="500"),
]


@contextlib.asynccontextmanager
async def anthropic_server(db_url: str, fake: FakeServer) -> AsyncIterator[Server]:
    """The app as ``make serve`` runs it with a key: the demo toolset, every role on
    Anthropic (here the local fake), no SDK retries so the test stays quick."""
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,
        models={"default": "anthropic:claude-haiku-4-5"},  # type: ignore[arg-type]
        providers={  # type: ignore[arg-type]
            "anthropic_api_key": "sk-test",
            "anthropic_base_url": fake.url,
            "max_retries": 0,
        },
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    assert settings.toolset_names() == [DEMO]  # as `make serve` loads it
    models = build_models(settings)
    async with Server(settings, models) as server:
        yield server
    assert isinstance(models.executor, AnthropicModel)
    await models.executor.aclose()  # one instance serves every role


@pytest.mark.parametrize(("status", "code"), OUTAGES)
async def test_an_outage_fails_the_turn_on_the_demo_toolset(
    db_url: str, status: int, code: str
) -> None:
    with FakeServer(FakeProvider().enqueue(*outage(status))) as fake:
        async with anthropic_server(db_url, fake) as server:
            with capture_logs() as logs:
                frames = await stream_turn(
                    server.client,
                    {"message": "How many members are active?"},
                    server.auth(role="owner"),
                )
            reply = await server.client.post(
                "/v1/chat", json={"message": "And classes?"}, headers=server.auth(role="owner")
            )
            session_id = frames[0].data["session_id"]
            stored = await turn_status(server.store, session_id)

    assert types(frames)[-2:] == ["error", "done"]
    error = frames[-2].data
    assert error["code"] == code and done(frames)["status"] == "failed"
    assert error.get("retry_after_s") == (7.0 if status == 429 else None)
    # the planner's failure is contained (its fallback runs the main loop), which fails too
    [created] = [f.data for f in frames if f.event == "plan_created"]
    assert created["fallback"] == "planner failed: " + code.removeprefix("provider_")
    assert "text_delta" not in types(frames) and stored == "failed"
    [failed] = [e for e in logs if e["event"] == "turn.failed"]
    assert failed["code"] == code and not [e for e in logs if e["event"] == "turn.completed"]
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "failed" and body["answer"] == ""
    assert body["error"]["code"] == code and body["partial"] is False


def planned(**plan: Any) -> Any:
    """The planner's reply through Anthropic: its structured output is a ``plan`` call."""
    usage = TokenUsage(input_tokens=900, output_tokens=60)
    return anthropic_reply(tool_calls=[ToolCall(id="p", name="plan", input=plan)], usage=usage)


async def test_a_planner_overload_is_contained_and_the_turn_answers(db_url: str) -> None:
    """A 529 from the planner: the fallback (a direct answer with the agent's tools)
    answers, and ``plan_created`` says why."""
    answer = "There are 12 active members."
    provider = FakeProvider().enqueue(
        anthropic_error(529),  # the planner
        anthropic_reply(text=answer, usage=TokenUsage(input_tokens=400, output_tokens=9)),
        anthropic_reply(text="Active members"),  # the new session's title
    )
    with FakeServer(provider) as fake:
        async with anthropic_server(db_url, fake) as server:
            with capture_logs() as logs:
                frames = await stream_turn(
                    server.client, {"message": "How many members are active?"}, server.auth()
                )
    assert "error" not in types(frames) and done(frames)["status"] == "completed"
    [logged] = [e for e in logs if e["event"] == "planner.fallback"]
    assert (logged["code"], logged["attempts"]) == ("provider_overloaded", 1)
    [created] = [f.data for f in frames if f.event == "plan_created"]
    assert created["fallback"] == "planner failed: overloaded"
    assert created["strategy"] == "tool" and created["reasoning"].startswith("Fallback plan:")
    assert created["steps"][0]["goal"] == "How many members are active?"
    assert "".join(f.data["delta"] for f in frames if f.event == "text_delta") == answer
    step_request = provider.requests[1].json
    assert step_request["tools"] and "tool_choice" in step_request  # the agent's tools
    [usage] = [f.data for f in frames if f.event == "usage"]
    assert "planner" not in usage["by_role"]  # the failed call cost nothing
    assert provider.pending == 0


@pytest.mark.parametrize("repair", ["invalid", "529"])
async def test_an_invalid_plans_valid_sources_are_still_loaded(db_url: str, repair: str) -> None:
    """The plan named an unknown tool and an unknown source beside a valid one; its repair
    was invalid too (or failed): the fallback loads the valid source, names the first
    problem, and the planner's calls are metered."""
    bad = {
        "strategy": "tool", "reasoning": "x",
        "steps": [{"id": "s1", "goal": "find Sam", "tools": ["members.nuke"]}],
        "sources": [{"name": "schedule", "params": {"days_ahead": 3}}, {"name": "weather"}],
    }  # fmt: skip
    second = planned(strategy="sometimes") if repair == "invalid" else anthropic_error(529)
    provider = FakeProvider().enqueue(
        planned(**bad), second, anthropic_reply(text="Sam is here."), anthropic_reply(text="T")
    )
    with FakeServer(provider) as fake:
        async with anthropic_server(db_url, fake) as server:
            await seed_demo(server.store, ORG)
            frames = await stream_turn(server.client, {"message": "find Sam"}, server.auth())
    assert done(frames)["status"] == "completed"
    [created] = [f.data for f in frames if f.event == "plan_created"]
    cause = (
        "the plan was still invalid after one repair"
        if repair == "invalid"
        else ("planner failed: overloaded")
    )
    first = "step 's1' uses unknown tools ['members.nuke']"
    assert created["fallback"] == f"{cause}; the first problem: {first}"
    assert created["sources"] == ["schedule"]
    [loaded] = [f.data for f in frames if f.event == "context_loaded"]
    assert (loaded["source"], loaded["params"], loaded.get("error")) == (
        "schedule", {"days_ahead": 3}, None,
    )  # fmt: skip
    [usage] = [f.data for f in frames if f.event == "usage"]
    planner_tokens = 1_800 if repair == "invalid" else 900
    assert usage["by_role"]["planner"]["input_tokens"] == planner_tokens


async def test_a_dry_run_reports_an_outage_instead_of_a_fallback_plan(db_url: str) -> None:
    with FakeServer(FakeProvider().enqueue(*outage(529))) as fake:
        async with anthropic_server(db_url, fake) as server:
            reply = await server.client.post(
                "/v1/plan", json={"message": "Find Sam"}, headers=server.auth(role="owner")
            )
    assert reply.status_code == 502
    assert reply.json()["error"]["code"] == "provider_overloaded"


# --- every path, with the project's doubles -------------------------------------------


async def test_the_simple_path_fails_on_an_outage(make_server: ServerFactory) -> None:
    model = ScriptedModel([plan("simple"), OVERLOADED])
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        frames = await stream_turn(server.client, {"message": "hi"}, server.auth(role="owner"))
        stored = await turn_status(server.store, frames[0].data["session_id"])
    assert types(frames)[-2:] == ["error", "done"] and frames[-2].data["code"] == (
        "provider_overloaded"
    )
    assert done(frames)["status"] == stored == "failed"


async def test_the_tool_path_fails_when_its_step_model_fails(make_server: ServerFactory) -> None:
    goal = "Count the active members"
    model = ScriptedModel(
        [plan("tool", step("s1", goal, ["members.search"])), {"match": goal, **OVERLOADED}]
    )
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        frames = await stream_turn(server.client, {"message": goal}, server.auth(role="owner"))
        stored = await turn_status(server.store, frames[0].data["session_id"])

    completed = next(f.data for f in frames if f.event == "step_completed")
    assert completed["ok"] is False and completed["error"]["code"] == "provider_overloaded"
    assert types(frames)[-2:] == ["error", "done"]
    assert frames[-2].data["code"] == "provider_overloaded"
    assert "step s1" in frames[-2].data["message"]
    assert done(frames)["status"] == stored == "failed"
    assert "message_done" not in types(frames)


async def test_a_complex_plan_with_one_failed_step_merges_a_partial_answer(
    make_server: ServerFactory,
) -> None:
    model = two_steps(
        {"match": SCHEDULE, **OVERLOADED},
        {"match": MEMBERS, "text": "120 active members."},
        {"match": "You write the answer", "text": "120 members are active; no schedule."},
    )
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        reply = await server.client.post(
            "/v1/chat", json={"message": "Classes and members?"}, headers=server.auth(role="owner")
        )

    body = reply.json()
    end = body["events"][-1]["data"]
    assert body["status"] == end["status"] == "completed"
    assert body["partial"] is end["partial"] is True
    [failed] = body["failed_steps"]
    assert failed == end["failed_steps"][0]
    assert (failed["step_id"], failed["code"]) == ("s1", "provider_overloaded")
    kinds = [e["type"] for e in body["events"]]
    assert "error" not in kinds and "message_done" in kinds and body["error"] is None
    assert body["answer"] == "120 members are active; no schedule."
    model.assert_complete()


async def test_a_complex_plan_whose_every_step_failed_fails_without_merging(
    make_server: ServerFactory,
) -> None:
    model = two_steps({"match": SCHEDULE, **OVERLOADED}, {"match": MEMBERS, **OVERLOADED})
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        frames = await stream_turn(
            server.client, {"message": "Classes and members?"}, server.auth(role="owner")
        )

    assert types(frames)[-2:] == ["error", "done"]
    assert frames[-2].data["code"] == "provider_overloaded"
    assert done(frames)["status"] == "failed" and "partial" not in done(frames)
    model.assert_complete()  # three calls: the planner and two steps, no merge


async def test_step_completed_counts_the_failed_tool_calls(make_server: ServerFactory) -> None:
    goal = "Look up member mem_nobody"
    model = ScriptedModel(
        [
            plan("tool", step("s1", goal, ["members.get"])),
            {
                "match": goal,
                "tool_calls": [
                    {"id": "t1", "name": "members_get", "input": {"member_id": "mem_nobody"}}
                ],
            },
            {"match": goal, "text": "There is no such member."},
        ]
    )
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        frames = await stream_turn(server.client, {"message": goal}, server.auth(role="owner"))

    completed = next(f.data for f in frames if f.event == "step_completed")
    tool = next(f.data for f in frames if f.event == "tool_completed")
    assert tool["ok"] is False
    assert (completed["ok"], completed["tool_calls"], completed["failed_tool_calls"]) == (
        True,
        1,
        1,
    )
    assert done(frames)["status"] == "completed" and "partial" not in done(frames)


async def test_a_resumed_turn_fails_when_the_provider_fails_after_the_answer(
    make_server: ServerFactory,
) -> None:
    goal = "Delete the Engine builder workout"
    call = {
        "id": "t_del",
        "name": "workouts_delete",
        "input": {"workout_id": seed_id(ORG, "wo", 4)},
    }
    model = ScriptedModel(
        [
            plan("tool", step("s1", goal, ["workouts.delete"])),
            {"match": goal, "tool_calls": [call]},
            {"match": goal, **OVERLOADED},
        ]
    )
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        await seed_demo(server.store, ORG)
        owner = server.auth(role="owner")
        first = await stream_turn(server.client, {"message": goal}, owner)
        session_id = first[0].data["session_id"]
        path = f"/v1/sessions/{session_id}/confirm/t_del"
        resumed = await stream_post(server.client, path, {"approved": True}, owner)
        stored = await turn_status(server.store, session_id)

    assert done(first)["status"] == "suspended"
    assert types(resumed)[-2:] == ["error", "done"]
    assert resumed[-2].data["code"] == "provider_overloaded"
    assert done(resumed)["status"] == stored == "failed"


# --- after a takeover: the log's step failures count, and a failing provider fails ---


async def dead_worker_turn(
    store: Store, plan: PlanCreated, progress: list[Event]
) -> tuple[str, str]:
    """What a worker logged before it died: its plan and ``progress``; its lease is out."""
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    opening: list[Event] = [
        SessionStarted(session_id=session_id, turn_id=turn_id),
        UserMessage(message_id="msg_1", text="Classes and members?"),
    ]
    await store.log.open_turn(
        session_id, opening, turn_id=turn_id, trace_id="trace-1", worker_id="dead:1",
        lease_until=datetime.now(UTC) - timedelta(seconds=1),
        job={"org_id": ORG, "user_id": "ada", "role": "owner", "model": None},
    )  # fmt: skip
    await store.log.append(session_id, [plan, *progress], turn_id=turn_id, epoch=0)
    return session_id, turn_id


async def take_over(store: Store, model: ScriptedModel, ids: tuple[str, str]) -> list[StoredEvent]:
    session_id, turn_id = ids
    kit = TurnKit(tools=demo_registry())
    runner = TurnRunner(store, turn_timeout_s=30, kit=kit, worker_id="live:2", lease_s=30)
    keeper = Keeper(store, runner, ModelResolver(TurnModels(executor=model), store.org_keys))
    assert await keeper.tick() == [turn_id]
    await runner.wait(turn_id)
    return await store.log.read(session_id, turn_id=turn_id)


TWO_STEPS = PlanCreated(
    strategy="complex",
    reasoning="two lookups",
    steps=[
        PlanStep(id="s1", goal=SCHEDULE, tools=["programs.list"]),
        PlanStep(id="s2", goal=MEMBERS, tools=["members.search"]),
    ],
)


async def test_a_taken_over_plan_keeps_its_failed_step_and_merges_a_partial_answer(
    store: Store,
) -> None:
    failure = StepError(code="provider_overloaded", message="Overloaded")
    ids = await dead_worker_turn(
        store,
        TWO_STEPS,
        [
            StepStarted(step_id="s1", executor_id="s1-exec"),
            StepCompleted(
                step_id="s1",
                executor_id="s1-exec",
                ok=False,
                summary="Incomplete",
                tool_calls=0,
                tokens=0,
                duration_ms=5,
                error=failure,
            ),
        ],
    )
    model = ScriptedModel(
        [
            {"match": MEMBERS, "text": "120 active members."},
            {"match": "You write the answer", "text": "120 members; no schedule."},
        ]
    )
    log = await take_over(store, model, ids)

    end = log[-1].data
    assert end["status"] == "completed" and end["partial"] is True
    assert end["failed_steps"] == [
        {"step_id": "s1", "code": "provider_overloaded", "message": "Overloaded"}
    ]
    model.assert_complete()


async def test_a_taken_over_step_whose_provider_fails_fails_the_turn(store: Store) -> None:
    plan = PlanCreated(
        strategy="tool",
        reasoning="one lookup",
        steps=[PlanStep(id="s1", goal=MEMBERS, tools=["members.search"])],
    )
    started = StepStarted(step_id="s1", executor_id="s1-exec")
    ids = await dead_worker_turn(store, plan, [started])
    log = await take_over(store, ScriptedModel([{"match": MEMBERS, **OVERLOADED}]), ids)

    assert [e.type for e in log][-2:] == ["error", "done"]
    assert log[-2].data["code"] == "provider_overloaded"
    assert log[-1].data["status"] == "failed"
