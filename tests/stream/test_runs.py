"""Background runs over the real app: queued at once, run with no client attached, listed
with their steps, calls and what they created; idempotent, rate-limited, cancellable,
followed over SSE; and started fairly across orgs."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from bosun_demo import seed_demo
from conftest import Server, ServerFactory
from fleet import fair_order
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import RunRecord
from turn import TurnModels

AGENT: dict[str, Any] = {
    "handle": "planner-bot",
    "name": "Planner bot",
    "identity_prompt": "You schedule workouts.",
    "tools": ["workouts.*", "members.*"],
    "runs_per_minute": 10,
}


def models(pause_s: float = 0.0) -> TurnModels:
    """A planner that plans one write step; an executor that creates a workout, then says so."""

    async def planner(request: ModelRequest) -> Reply:
        step = {"id": "s1", "goal": "Create it", "tools": ["workouts.create"]}
        return Reply(text=json.dumps({"strategy": "tool", "reasoning": "r", "steps": [step]}))

    async def executor(request: ModelRequest) -> Reply:
        await asyncio.sleep(pause_s)
        if len(request.messages) == 1:
            call = ToolCall(id="toolu_1", name="workouts_create", input={"title": "Morning run"})
            return Reply(tool_calls=(call,))
        return Reply(text="Created the Morning run.")

    return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


async def agent(server: Server, **changes: Any) -> None:
    made = await server.client.post(
        "/v1/agents", json={**AGENT, **changes}, headers=server.auth(role="owner")
    )
    assert made.status_code == 201, made.text


async def trigger(server: Server, body: dict[str, Any], role: str = "staff") -> httpx.Response:
    """Trigger a run as staff (a run acts with its trigger's role: workouts.create is staff's)."""
    return await server.client.post(
        "/v1/agents/planner-bot/runs", json=body, headers=server.auth(role=role)
    )


async def until_status(server: Server, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60  # a hang guard, not a timing
    while True:
        detail = (await server.client.get(f"/v1/runs/{run_id}", headers=server.auth())).json()
        if detail["status"] in statuses or time.monotonic() > deadline:
            return detail  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)


async def test_a_run_is_queued_at_once_and_completes_with_no_client(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        await seed_demo(server.store, "acme")
        await agent(server)
        started = time.perf_counter()
        queued = await trigger(server, {"task": "Create a morning run", "context": {"day": "mon"}})
        answered_s = time.perf_counter() - started
        run_id = queued.json()["run_id"]
        detail = await until_status(server, run_id, "completed", "failed")
        history = await server.client.get("/v1/agents/planner-bot/runs", headers=server.auth())
        other_org = await server.client.get(f"/v1/runs/{run_id}", headers=server.auth(org="o2"))

    assert queued.status_code == 202 and queued.json()["status"] in ("queued", "running")
    assert answered_s < 1.0  # the server answers at once (the run has not run yet)
    assert detail["status"] == "completed", detail
    assert detail["agent_version"] == 1 and detail["trigger"] == "api"
    assert [s["ok"] for s in detail["steps"]] == [True]
    [call] = detail["tool_calls"]
    assert (call["tool"], call["status"]) == ("workouts.create", "succeeded")
    [created] = detail["resources"]
    assert created["action"] == "workout.created" and created["tool_use_id"] == "toolu_1"
    assert created["target"] == f"workout:{call['output']['id']}"
    assert detail["answer"] == "Created the Morning run."
    assert detail["usage"] is not None and detail["started_at"] and detail["finished_at"]
    [row] = history.json()["runs"]
    assert row["run_id"] == run_id and (row["steps"], row["tool_calls"]) == (1, 1)
    assert row["status"] == "completed" and row["cost_usd_micros"] >= 0
    assert other_org.status_code == 404


async def test_an_idempotency_key_makes_a_retry_the_same_run(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await seed_demo(server.store, "acme")
        await agent(server)
        first = await trigger(server, {"task": "Create a run", "idempotency_key": "k-1"})
        again = await trigger(server, {"task": "Create a run", "idempotency_key": "k-1"})
        await until_status(server, first.json()["run_id"], "completed", "failed")
        history = await server.client.get("/v1/agents/planner-bot/runs", headers=server.auth())

    assert first.json()["run_id"] == again.json()["run_id"]
    assert len(history.json()["runs"]) == 1


async def test_the_agent_rate_limit_covers_its_triggers(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await agent(server, runs_per_minute=3)
        statuses = [(await trigger(server, {"task": f"run {i}"})).status_code for i in range(3)]
        fourth = await trigger(server, {"task": "one too many"})
        await agent(server, handle="sleepy", paused=True)
        paused = await server.client.post(
            "/v1/agents/sleepy/runs", json={"task": "x"}, headers=server.auth()
        )
        unknown = await server.client.post(
            "/v1/agents/nobody/runs", json={"task": "x"}, headers=server.auth()
        )

    assert statuses == [202, 202, 202]
    assert fourth.status_code == 429
    assert fourth.json()["error"]["code"] == "agent_rate_limited"
    assert 1 <= int(fourth.headers["Retry-After"]) <= 60
    assert paused.status_code == 409 and paused.json()["error"]["code"] == "agent_paused"
    assert unknown.status_code == 404


async def test_runs_wait_their_turn_can_be_cancelled_and_followed(
    make_server: ServerFactory,
) -> None:
    async with make_server(models(pause_s=0.5)) as server:
        await seed_demo(server.store, "acme")
        await agent(server)
        ids = [(await trigger(server, {"task": f"run {i}"})).json()["run_id"] for i in range(3)]
        await asyncio.sleep(0.3)
        third = (await server.client.get(f"/v1/runs/{ids[2]}", headers=server.auth())).json()
        member = await server.client.post(
            f"/v1/runs/{ids[2]}/cancel", headers=server.auth(user="someone-else")
        )
        cancelled = await server.client.post(f"/v1/runs/{ids[2]}/cancel", headers=server.auth())
        frames: list[str] = []
        async with server.client.stream(
            "GET", f"/v1/runs/{ids[0]}/stream", headers=server.auth()
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    frames.append(line.removeprefix("event:").strip())
        done = await until_status(server, ids[1], "completed", "failed")

    assert third["status"] == "queued"  # two runs per agent at a time
    assert member.status_code == 404  # another member does not see the run at all
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert frames[0] in ("session_started", "user_message") and frames[-1] == "done"
    assert "tool_completed" in frames
    assert done["status"] == "completed"


async def test_a_run_ending_starts_the_next_queued_one_at_once(
    make_server: ServerFactory,
) -> None:
    """No poll in sight (an hour): the third run, queued behind the agent's two, still
    starts, because a run ending here wakes the dispatcher (and a run queued here does)."""
    async with make_server(models(pause_s=0.3)) as server:
        await seed_demo(server.store, "acme")
        await agent(server)
        server.app.state.services.runs.poll_s = 3600.0
        await asyncio.sleep(1.1)  # the loop's current 1 s wait ends; the next is the hour
        ids = [(await trigger(server, {"task": f"run {i}"})).json()["run_id"] for i in range(3)]
        details = [await until_status(server, run_id, "completed", "failed") for run_id in ids]

    assert [d["status"] for d in details] == ["completed"] * 3


def _run(org: str, agent: str, n: int) -> RunRecord:
    at = datetime(2026, 11, 24, 9, n, tzinfo=UTC)
    return RunRecord(
        id=f"{org}-{agent}-{n}", org_id=org, agent=agent, agent_version=1, session_id="s",
        turn_id=None, user_id="u", role="member", trigger="api", task="t", context=None,
        idempotency_key=None, created_at=at, claimed_at=None, cancelled_at=None, trace_link=None,
        status="queued", started_at=None, finished_at=None,
    )  # fmt: skip


def test_runs_start_one_org_at_a_time_and_never_past_an_agents_limit() -> None:
    busy = [_run("busy", "a", n) for n in range(5)] + [_run("busy", "b", 5)]
    queued = [*busy, _run("quiet", "a", 6), _run("quiet", "a", 7)]
    order = fair_order(queued, {("busy", "a"): 1}, per_agent=2)
    assert [r.id for r in order] == ["quiet-a-6", "busy-a-0", "quiet-a-7", "busy-b-5"]


async def test_a_run_past_its_step_limit_fails_with_a_partial_summary(
    make_server: ServerFactory,
) -> None:
    async def planner(request: ModelRequest) -> Reply:
        step = {"id": "s1", "goal": "Look everyone up", "tools": ["members.search"],
                "max_tool_calls": 10}  # fmt: skip
        return Reply(text=json.dumps({"strategy": "tool", "reasoning": "r", "steps": [step]}))

    async def executor(request: ModelRequest) -> Reply:  # never stops on its own
        call = ToolCall(id=f"toolu_{len(request.messages)}", name="members_search",
                        input={"query": "sam"})  # fmt: skip
        return Reply(text="Still looking.", tool_calls=(call,))

    looping = TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))
    async with make_server(looping) as server:
        await seed_demo(server.store, "acme")
        await agent(server, limits={"max_steps": 3})
        run_id = (await trigger(server, {"task": "Find every Sam"})).json()["run_id"]
        detail = await until_status(server, run_id, "completed", "failed")

    assert detail["status"] == "failed", (detail["steps"], detail["answer"], detail["error"])
    assert detail["error"]["code"] == "max_steps"
    assert "limit of 3 steps" in detail["error"]["message"]
    assert "Done so far" in detail["error"]["message"]  # the partial summary
    assert "members.search" in detail["error"]["message"]
    assert len(detail["tool_calls"]) == 3  # three steps, each one call, then it stopped


async def test_a_run_past_its_wall_time_is_stopped(make_server: ServerFactory) -> None:
    # Each executor call takes 120 s; the agent's 6 s leave the planner (and the step's
    # share of them, half) room on a busy machine.
    async with make_server(models(pause_s=120.0)) as server:
        await seed_demo(server.store, "acme")
        await agent(server, limits={"wall_time_s": 6.0})
        started = time.monotonic()
        run_id = (await trigger(server, {"task": "Create a run"})).json()["run_id"]
        detail = await until_status(server, run_id, "completed", "failed")

    assert time.monotonic() - started < 60  # stopped by the agent's 6 s, not the model's 120
    [step] = detail["steps"]
    assert not step["ok"] and "wall time" in step["summary"]
    assert detail["tool_calls"] == []  # the write never ran
