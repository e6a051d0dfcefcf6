"""The approval inbox over the real app: a background run's risky call is queued (defer)
and the run goes on; an owner approves it (it runs once, with the recorded input, even
after a restart), rejects it (it never runs) or lets it expire (410, never runs); a chat's
suspended confirmation is answered from the inbox and its turn goes on."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select

from bosun_demo import demo_registry, seed_demo
from bosun_demo._seed import seed_id
from bosun_demo._tables import WorkoutRow
from conftest import Server, ServerFactory
from events import parse_event
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import Store
from tools import Capabilities, ToolRegistry
from turn import TurnModels

CLEANER: dict[str, Any] = {
    "handle": "cleaner",
    "name": "Cleaner",
    "tools": ["workouts.*", "members.*"],
    "runs_per_minute": 10,
}
WORKOUT = seed_id("acme", "wo", 0)


def models() -> TurnModels:
    """A planner with one step that deletes the first demo workout; an executor that
    calls the delete once, then reports what the tool said."""

    async def planner(request: ModelRequest) -> Reply:
        step = {"id": "s1", "goal": "Delete the old workout", "tools": ["workouts.delete"]}
        return Reply(text=json.dumps({"strategy": "tool", "reasoning": "r", "steps": [step]}))

    async def executor(request: ModelRequest) -> Reply:
        if len(request.messages) == 1:
            call = ToolCall(id="toolu_del", name="workouts_delete", input={"workout_id": WORKOUT})
            return Reply(tool_calls=(call,))
        return Reply(text="The delete waits for approval.")

    return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


async def workouts(store: Store) -> int:
    async with store.db.read() as conn:
        query = select(func.count()).select_from(WorkoutRow).where(WorkoutRow.id == WORKOUT)
        return int((await conn.execute(query)).scalar_one())


async def setup(server: Server, **profile: Any) -> None:
    await seed_demo(server.store, "acme")
    made = await server.client.post(
        "/v1/agents", json={**CLEANER, **profile}, headers=server.auth(role="owner")
    )
    assert made.status_code == 201, made.text


async def run_to_end(server: Server) -> dict[str, Any]:
    """Trigger a run of the cleaner (as staff: deletes are staff's) and wait for its end."""
    queued = await server.client.post(
        "/v1/agents/cleaner/runs", json={"task": "Tidy old workouts"},
        headers=server.auth(role="staff"),
    )  # fmt: skip
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["run_id"]
    deadline = time.monotonic() + 15
    while True:
        detail = (await server.client.get(f"/v1/runs/{run_id}", headers=server.auth())).json()
        if detail["status"] in ("completed", "failed", "suspended") or time.monotonic() > deadline:
            return detail  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)


async def inbox(server: Server, **params: str) -> dict[str, Any]:
    page = await server.client.get(
        "/v1/approvals", params=params, headers=server.auth(role="owner")
    )
    assert page.status_code == 200, page.text
    return page.json()  # type: ignore[no-any-return]


async def answer(
    server: Server, approval_id: str, verb: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    return await server.client.post(
        f"/v1/approvals/{approval_id}/{verb}", json=body, headers=server.auth(role="owner")
    )


async def until_ran(server: Server, approval_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        got = await server.client.get(
            f"/v1/approvals/{approval_id}", headers=server.auth(role="owner")
        )
        if got.json()["outcome"] is not None or time.monotonic() > deadline:
            return got.json()  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)


async def session_events(store: Store, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in await store.log.read(session_id) if e.type == kind]


async def notices(store: Store, kind: str) -> list[dict[str, Any]]:
    return [n.data for n in await store.notices.after("acme", 0) if n.type == kind]


async def test_a_deferred_call_is_queued_and_runs_once_when_approved_after_a_restart(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        await setup(server)
        run = await run_to_end(server)
        listed = await inbox(server, status="pending", agent="cleaner")
        left = await workouts(server.store)
    [call] = run["tool_calls"]
    [approval] = listed["approvals"]

    async with make_server(models()) as server:  # a restart: the inbox is in the database
        approved = await answer(server, approval["id"], "approve", {"reason": "old data"})
        ran = await until_ran(server, approval["id"])
        again = await answer(server, approval["id"], "approve")
        rejected_late = await answer(server, approval["id"], "reject")
        gone = await workouts(server.store)
        resolved = await session_events(server.store, run["session_id"], "approval_resolved")
        requested = await notices(server.store, "approval_requested")
        ended = await notices(server.store, "approval_resolved")

    assert run["status"] == "completed", run
    assert call["status"] == "pending"  # recorded, not run
    answer_text = run["answer"]
    assert answer_text == "The delete waits for approval."
    assert left == 1  # nothing deleted while it waits
    assert approval["tool"] == "workouts.delete" and approval["input"] == {"workout_id": WORKOUT}
    assert approval["mode"] == "defer" and approval["status"] == "pending"
    assert approval["agent"] == "cleaner" and approval["run_id"] == run["run_id"]
    assert approval["summary"] == "Delete the old workout"
    assert approval["links"]["run"] == f"/v1/runs/{run['run_id']}"
    assert approval["expires_at"] > approval["requested_at"]
    assert listed["counts"] == {"pending": 1}
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert approved.json()["reason"] == "old data"
    assert ran["outcome"]["ok"] is True and ran["outcome"]["output"]["id"] == WORKOUT
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_answered"
    assert rejected_late.status_code == 409
    assert gone == 0
    [event] = resolved
    assert (event["decision"], event["ok"], event["tool_use_id"]) == ("approved", True, "toolu_del")
    assert [n["approval_id"] for n in requested] == [approval["id"]]
    assert [(n["status"], n["ok"]) for n in ended] == [("approved", True)]


async def test_the_model_is_told_its_call_is_queued(make_server: ServerFactory) -> None:
    seen: list[str] = []

    def executor(request: ModelRequest) -> Reply:
        if len(request.messages) == 1:
            call = ToolCall(id="toolu_del", name="workouts_delete", input={"workout_id": WORKOUT})
            return Reply(tool_calls=(call,))
        seen.append(repr(request.messages[-1].parts))
        return Reply(text="Queued.")

    planner = models().planner
    async with make_server(TurnModels(planner=planner, executor=FunctionModel(executor))) as s:
        await setup(s)
        run = await run_to_end(s)
        frames = await s.client.get(f"/v1/sessions/{run['session_id']}/events", headers=s.auth())

    completed = next(e["data"] for e in frames.json()["events"] if e["type"] == "tool_completed")
    assert completed["ok"] is True and completed["output"]["status"] == "queued_for_approval"
    assert "queued_for_approval" in seen[0] and completed["output"]["approval_id"] in seen[0]


async def test_a_rejected_call_never_runs(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await setup(server)
        run = await run_to_end(server)
        [approval] = (await inbox(server))["approvals"]
        rejected = await answer(server, approval["id"], "reject", {"reason": "keep it"})
        approved_late = await answer(server, approval["id"], "approve")
        await asyncio.sleep(0.2)
        left = await workouts(server.store)
        execution = await server.store.tool_executions.get("toolu_del", turn_id=run["turn_id"])
        resolved = await session_events(server.store, run["session_id"], "approval_resolved")

    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert rejected.json()["resolved_by"] is not None and rejected.json()["outcome"] is None
    assert approved_late.status_code == 409
    assert left == 1
    assert execution is not None and execution.status == "rejected_by_user"
    assert [(e["decision"], e["reason"]) for e in resolved] == [("rejected", "keep it")]


async def test_an_expired_approval_answers_410_and_never_runs(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await setup(server, approval_ttl_s=1)
        await run_to_end(server)
        [approval] = (await inbox(server))["approvals"]
        deadline = time.monotonic() + 5
        while True:  # nobody answers: a worker's sweep expires it (and says so, last)
            ended = await notices(server.store, "approval_resolved")
            if ended or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        listed = await inbox(server, status="expired")
        late = await answer(server, approval["id"], "approve")
        resolved = await session_events(server.store, approval["session_id"], "approval_resolved")
        left = await workouts(server.store)

    assert late.status_code == 410 and late.json()["error"]["code"] == "expired"
    assert [a["id"] for a in listed["approvals"]] == [approval["id"]]
    assert left == 1
    assert [n["status"] for n in ended] == ["expired"]
    assert [e["decision"] for e in resolved] == ["expired"]


async def test_a_suspended_chat_confirmation_is_answered_from_the_inbox(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        await setup(server)
        headers = server.auth(role="owner")
        frames = await stream_turn(server.client, {"message": "tidy", "agent": "cleaner"}, headers)
        session_id = frames[0].data["session_id"]
        [approval] = (await inbox(server, status="pending"))["approvals"]
        approved = await answer(server, approval["id"], "approve")
        deadline = time.monotonic() + 10
        while True:
            events = await server.store.log.read(session_id)
            done = [parse_event(e.data) for e in events if e.type == "done"]
            if len(done) == 2 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        again = await answer(server, approval["id"], "approve")
        gone = await workouts(server.store)
        ended = await notices(server.store, "approval_resolved")

    assert [(n["status"], n["mode"]) for n in ended] == [("approved", "suspend")]
    assert frames[-1].data["status"] == "suspended"
    assert approval["mode"] == "suspend" and approval["links"] == {
        "session": f"/v1/sessions/{session_id}"
    }
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert [d.status for d in done] == ["suspended", "completed"]  # type: ignore[union-attr]
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_answered"
    assert gone == 0


async def test_the_inbox_is_for_owners_and_staff_of_the_org(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await setup(server)
        await run_to_end(server)
        [approval] = (await inbox(server))["approvals"]
        member = await server.client.get("/v1/approvals", headers=server.auth(role="member"))
        member_answer = await server.client.post(
            f"/v1/approvals/{approval['id']}/approve", headers=server.auth(role="member")
        )
        other_org = await server.client.post(
            f"/v1/approvals/{approval['id']}/approve", headers=server.auth(role="owner", org="o2")
        )
        other_list = await server.client.get(
            "/v1/approvals", headers=server.auth(role="owner", org="o2")
        )
        bad_status = await server.client.get(
            "/v1/approvals?status=maybe", headers=server.auth(role="owner")
        )
        unknown = await answer(server, "apr_nope", "approve")
        still = await workouts(server.store)

    assert member.status_code == 403 and member_answer.status_code == 403
    assert other_org.status_code == 404 and other_list.json()["approvals"] == []
    assert bad_status.status_code == 400
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert still == 1


async def test_a_profile_can_defer_a_tool_in_chats(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await setup(server, approval_modes={"workouts.delete": "defer"})
        frames = await stream_turn(
            server.client, {"message": "tidy", "agent": "cleaner"}, server.auth(role="owner")
        )
        [approval] = (await inbox(server))["approvals"]

    completed = next(f.data for f in frames if f.event == "tool_completed")
    assert completed["output"]["status"] == "queued_for_approval"
    assert frames[-1].data["status"] == "completed" and approval["mode"] == "defer"


def test_approval_modes_name_tools_or_routers_and_default_by_trigger() -> None:
    registry: ToolRegistry = demo_registry()
    delete, create = registry.get("workouts.delete"), registry.get("workouts.create")
    chat = Capabilities(defer=frozenset({"workouts.*"}), suspend=frozenset({"workouts.create"}))
    run = Capabilities(mode="defer", suspend=frozenset({"workouts.delete"}))

    assert chat.approval_mode(delete) == "defer"
    assert chat.approval_mode(create) == "suspend"  # the tool's own entry beats its router
    assert run.approval_mode(delete) == "suspend" and run.approval_mode(create) == "defer"
    assert Capabilities().approval_mode(delete) == "suspend"


async def test_prune_keeps_a_session_whose_call_waits_in_the_inbox(
    make_server: ServerFactory,
) -> None:
    later = datetime.now(UTC) + timedelta(days=1)  # every session is idle before it
    async with make_server(models()) as server:
        await setup(server)
        await run_to_end(server)
        [approval] = (await inbox(server))["approvals"]
        waiting = await server.store.retention.prune(before=later, apply=True)
        kept = await server.store.approvals.get("acme", approval["id"])
        await answer(server, approval["id"], "reject")
        answered = await server.store.retention.prune(before=later, apply=True)
        gone = await server.store.approvals.get("acme", approval["id"])

    assert waiting.sessions == 0 and waiting.kept_waiting == 1 and kept is not None
    assert answered.sessions == 1 and answered.approvals == 1 and gone is None


async def test_an_approved_call_whose_worker_died_mid_run_shows_as_interrupted(
    make_server: ServerFactory,
) -> None:
    async with make_server(models()) as server:
        await setup(server)
        run = await run_to_end(server)
        [approval] = (await inbox(server, status="pending"))["approvals"]
        store, desk = server.store, server.app.state["services"].approvals
        # A worker took the answer and claimed the call, then died before any outcome.
        assert await store.approvals.decide(approval["id"], "approved", by="bob", reason=None)
        assert await store.approvals.claim(approval["id"])
        before = await inbox(server)
        desk.interrupted_s = 0.05  # claimed longer ago than any call runs
        await asyncio.sleep(0.1)
        await asyncio.gather(desk.sweep(), desk.sweep())  # two sweeps (workers) at once
        await desk.sweep()  # and later ones: it is never run again
        shown = await inbox(server, status="interrupted")
        late = await answer(server, approval["id"], "approve")
        left = await workouts(store)
        ended = await notices(store, "approval_resolved")
        await store.approvals.finish(approval["id"], {"ok": True})  # it ended after all
        finished = await inbox(server)

    assert run["status"] == "completed", run
    assert before["approvals"][0]["status"] == "approved"
    [interrupted] = shown["approvals"]
    assert (interrupted["id"], interrupted["status"]) == (approval["id"], "interrupted")
    assert interrupted["outcome"] is None and interrupted["resolved_by"] == "bob"
    assert shown["counts"] == {"interrupted": 1}
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_answered"
    assert left == 1  # not run again
    assert [(n["approval_id"], n["status"]) for n in ended] == [(approval["id"], "interrupted")]
    assert finished["approvals"][0]["status"] == "approved"
    assert finished["approvals"][0]["outcome"] == {"ok": True}
