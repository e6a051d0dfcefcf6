"""Undo a tool's write and cancel a running turn: over the real app and database."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from httpx_sse import ServerSentEvent, aconnect_sse
from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from bosun_demo import seed_demo
from bosun_demo._tables import WorkoutRow
from conftest import Server, ServerFactory
from helpers import Frame, stream_turn, types
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall
from store import Store
from store._models import AuditLogRow
from tools import ToolContext, ToolRegistry
from turn import TurnKit, TurnModels, TurnOrder, TurnRoleModels, TurnRunner


def plan(**fields: Any) -> str:
    return json.dumps({"reasoning": "r", **fields})


def frame(sse: ServerSentEvent) -> Frame:
    return Frame(int(sse.id), sse.event, json.loads(sse.data))


def error_code(response: Any) -> str:
    return str(response.json()["error"]["code"])


# undo


async def _create_workout_turn(server: Server, headers: dict[str, str]) -> tuple[str, str]:
    """Run a turn whose step creates a workout; return (session id, workout id)."""
    frames = await stream_turn(server.client, {"message": "add an intro workout"}, headers)
    assert frames[-1].data["status"] == "completed", types(frames)
    created = next(f.data for f in frames if f.event == "tool_completed")
    assert created["ok"] and created["inverse_available"]
    return frames[0].data["session_id"], created["output"]["id"]


def _create_workout_models() -> TurnModels:
    planner = ScriptedModel(
        [
            plan(
                strategy="tool",
                steps=[
                    {
                        "id": "s1",
                        "goal": "Create an intro workout",
                        "tools": ["workouts.create"],
                        "max_tool_calls": 1,
                    }
                ],
            )
        ]
    )
    create = ToolCall(id="toolu_create", name="workouts_create", input={"title": "Intro"})
    executor = ScriptedModel([Reply(tool_calls=(create,)), Reply(text="Created it.")])
    return TurnModels(planner=planner, executor=executor)


async def _audit_trail(store: Store) -> list[tuple[str, str | None]]:
    async with store.db.read() as conn:
        rows = await conn.execute(
            select(AuditLogRow.action, AuditLogRow.tool_use_id)
            .where(AuditLogRow.org_id == "acme", AuditLogRow.action.like("workout.%"))
            .order_by(AuditLogRow.created_at, AuditLogRow.id)
        )
        return [(r.action, r.tool_use_id) for r in rows]


async def _workout_exists(store: Store, workout_id: str) -> bool:
    async with store.db.read() as conn:
        return (
            await conn.scalar(select(WorkoutRow.id).where(WorkoutRow.id == workout_id)) is not None
        )


async def test_undo_runs_the_inverse_logs_both_events_and_links_the_audit_rows(
    make_server: ServerFactory,
) -> None:
    async with make_server(_create_workout_models()) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        session_id, workout_id = await _create_workout_turn(server, headers)
        assert await _workout_exists(server.store, workout_id)
        last_seq = (await server.store.log.read(session_id))[-1].seq

        undo = await server.client.post(
            f"/v1/sessions/{session_id}/undo/toolu_create", headers=headers
        )
        again = await server.client.post(
            f"/v1/sessions/{session_id}/undo/toolu_create", headers=headers
        )
        logged = await server.store.log.read(session_id, after=last_seq)
        exists = await _workout_exists(server.store, workout_id)
        trail = await _audit_trail(server.store)
        original = await server.store.tool_executions.latest("toolu_create", session_id=session_id)

    deleted = {"id": workout_id, "title": "Intro", "deleted": True}
    assert undo.status_code == 200, undo.text
    assert undo.json() == {
        "tool_use_id": "toolu_create-undo",
        "undone": "toolu_create",
        "ok": True,
        "output": deleted,
        "error": None,
    }
    assert [(e.type, e.turn_id, e.data) for e in logged] == [
        (
            "tool_started",
            None,
            {
                "type": "tool_started",
                "tool_use_id": "toolu_create-undo",
                "tool": "workouts.delete",
                "input": {"workout_id": workout_id},
            },
        ),
        (
            "tool_completed",
            None,
            {
                "type": "tool_completed",
                "tool_use_id": "toolu_create-undo",
                "ok": True,
                "output": deleted,
                "inverse_available": False,
            },
        ),
    ]
    assert logged[1].seq == logged[0].seq + 1  # one append
    assert not exists
    assert trail == [("workout.created", "toolu_create"), ("workout.deleted", "toolu_create-undo")]
    assert original is not None and original.undone_by == "toolu_create-undo"
    assert (again.status_code, error_code(again)) == (422, "already_undone")
    assert "was undone by 'toolu_create-undo'" in again.json()["error"]["message"]


async def _session(store: Store, *, user: str, org: str = "acme") -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=org, user_id=user, session_id=session_id, title=None)
    return session_id


async def _execution(
    store: Store,
    session_id: str,
    tool_use_id: str,
    tool: str,
    *,
    status: str = "succeeded",
    inverse: dict[str, Any] | None = None,
) -> None:
    await store.tool_executions.start(
        tool_use_id=tool_use_id, session_id=session_id, turn_id="turn_0", tool=tool, input={}
    )
    if status != "pending":
        error = {"code": "not_found", "message": "m"} if status == "failed" else None
        await store.tool_executions.finish(
            tool_use_id,
            turn_id="turn_0",
            status=status,  # type: ignore[arg-type]
            output=None if error else {"id": "x"},
            error=error,
            inverse=inverse,
        )


async def test_undo_refusals_have_clear_codes_and_leave_the_log_alone(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels()) as server:
        store = server.store
        await seed_demo(store, "acme")
        await seed_demo(store, "rival")
        mine = await _session(store, user="alice")
        other = await _session(store, user="alice")
        undo_delete = {"tool": "workouts.delete", "input": {"workout_id": "wo_x"}}
        await _execution(store, mine, "tu_read", "members.search")
        await _execution(store, mine, "tu_failed", "workouts.create", status="failed")
        await _execution(store, mine, "tu_pending", "workouts.delete", status="pending")
        await _execution(store, other, "tu_elsewhere", "workouts.create", inverse=undo_delete)
        owner = server.auth(user="alice", role="owner")

        async def undo(tool_use_id: str, headers: dict[str, str] = owner) -> Any:
            return await server.client.post(
                f"/v1/sessions/{mine}/undo/{tool_use_id}", headers=headers
            )

        refusals = {
            tool_use_id: ((r := await undo(tool_use_id)).status_code, error_code(r))
            for tool_use_id in ("tu_read", "tu_failed", "tu_pending", "tu_none", "tu_elsewhere")
        }
        rival = await undo("tu_read", server.auth(user="eve", org="rival", role="owner"))
        no_inverse = await undo("tu_read")
        logged = await store.log.read(mine)

    assert refusals == {
        "tu_read": (422, "no_inverse"),
        "tu_failed": (422, "not_undoable"),
        "tu_pending": (422, "not_undoable"),
        "tu_none": (404, "not_found"),
        "tu_elsewhere": (404, "not_found"),  # another session's call, even the same user's
    }
    assert (rival.status_code, error_code(rival)) == (404, "not_found")
    error = no_inverse.json()["error"]
    assert error["message"].startswith("members.search declares no way to undo it.")
    assert set(error) == {"code", "message", "trace_id"}
    assert logged == []


async def test_undo_applies_the_inverse_tools_roles_and_reports_a_failed_inverse(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels()) as server:
        store = server.store
        await seed_demo(store, "acme")
        bobs = await _session(store, user="bob")
        undo_missing = {"tool": "workouts.delete", "input": {"workout_id": "wo_missing"}}
        await _execution(store, bobs, "tu_bob", "workouts.create", inverse=undo_missing)

        url = f"/v1/sessions/{bobs}/undo/tu_bob"
        as_member = await server.client.post(url, headers=server.auth(user="bob"))
        after_member = await store.log.read(bobs)
        as_staff = await server.client.post(url, headers=server.auth(user="sue", role="staff"))
        logged = await store.log.read(bobs)
        original = await store.tool_executions.get("tu_bob", turn_id="turn_0")

    # workouts.delete is for owners and staff: a member may not run it, even to undo.
    assert (as_member.status_code, error_code(as_member)) == (403, "forbidden")
    assert "The member role may not use workouts.delete" in as_member.json()["error"]["message"]
    assert after_member == []
    # The inverse ran and failed (the workout is gone): reported, logged, and retryable.
    assert as_staff.status_code == 200, as_staff.text
    body = as_staff.json()
    assert (body["tool_use_id"], body["undone"], body["ok"], body["output"]) == (
        "tu_bob-undo",
        "tu_bob",
        False,
        None,
    )
    assert body["error"]["code"] == "not_found"
    assert [(e.type, e.data.get("ok"), e.data.get("error", {}).get("code")) for e in logged] == [
        ("tool_started", None, None),
        ("tool_completed", False, "not_found"),
    ]
    assert original is not None and original.undoable


# cancel


async def test_cancel_stops_a_streaming_turn_within_a_second(make_server: ServerFactory) -> None:
    closed = asyncio.Event()

    async def slow(_request: ModelRequest) -> AsyncIterator[str]:
        try:
            for n in range(100):
                yield f"word{n} "
                await asyncio.sleep(0.2)
        finally:
            closed.set()

    async with make_server(TurnModels(executor=FunctionModel(slow))) as server:
        headers = server.auth()
        loop = asyncio.get_running_loop()
        frames: list[Frame] = []
        cancel: Any = None
        cancelled_at = 0.0
        async with aconnect_sse(
            server.client, "POST", "/v1/chat/stream", json={"message": "count"}, headers=headers
        ) as events:
            async for sse in events.aiter_sse():
                frames.append(frame(sse))
                if sse.event == "text_delta" and cancel is None:
                    session_id = frames[0].data["session_id"]
                    cancelled_at = loop.time()
                    cancel = await server.client.post(
                        f"/v1/sessions/{session_id}/cancel", headers=headers
                    )
        ended_after = loop.time() - cancelled_at
        again = await server.client.post(f"/v1/sessions/{session_id}/cancel", headers=headers)
        other_org = await server.client.post(
            f"/v1/sessions/{session_id}/cancel", headers=server.auth(user="eve", org="rival")
        )
        rows = await server.store.log.read(session_id)
        turns = await server.store.sessions.turns(session_id)

    turn_id = frames[0].data["turn_id"]
    assert (cancel.status_code, cancel.json()) == (200, {"cancelled": [turn_id]})
    assert ended_after < 1.0
    assert closed.is_set()  # the model stream was closed
    kinds = types(frames)
    assert kinds[:2] == ["session_started", "user_message"]
    assert set(kinds[2:-2]) == {"text_delta"} and len(kinds[2:-2]) < 10
    assert kinds[-2:] == ["error", "done"]
    assert (frames[-2].data["code"], frames[-1].data["status"]) == ("cancelled", "cancelled")
    assert [r.type for r in rows][-2:] == ["error", "done"]
    assert [t.status for t in turns] == ["cancelled"]
    assert (again.status_code, again.json()) == (200, {"cancelled": []})
    assert (other_org.status_code, error_code(other_org)) == (404, "not_found")


async def test_cancel_mid_plan_starts_no_further_tools_or_steps(
    make_server: ServerFactory,
) -> None:
    closed = asyncio.Event()
    planner = ScriptedModel(
        [
            plan(
                strategy="complex",
                steps=[
                    {"id": "s1", "goal": "Find Sam", "tools": ["members.search", "programs.list"]},
                    {
                        "id": "s2",
                        "goal": "List programs for Sam",
                        "tools": ["programs.list"],
                        "depends_on": ["s1"],
                    },
                ],
            )
        ]
    )

    async def slow_then_call(_request: ModelRequest) -> AsyncIterator[str | ToolCall]:
        try:
            for n in range(50):
                yield f"thinking{n} "
                await asyncio.sleep(0.2)
            yield ToolCall(id="toolu_list", name="programs_list", input={})
        finally:
            closed.set()

    def executor(request: ModelRequest) -> Reply | AsyncIterator[str | ToolCall]:
        assert request.messages[0].text == "Find Sam", "s2 must never start"
        if len(request.messages) == 1:
            call = ToolCall(id="toolu_search", name="members_search", input={"query": "Sam"})
            return Reply(tool_calls=(call,))
        return slow_then_call(request)

    models = TurnModels(planner=planner, executor=FunctionModel(executor))
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        frames: list[Frame] = []
        seen_at_cancel = 0
        cancel: Any = None
        async with aconnect_sse(
            server.client, "POST", "/v1/chat/stream", json={"message": "Sam?"}, headers=headers
        ) as events:
            async for sse in events.aiter_sse():
                frames.append(frame(sse))
                if sse.event == "text_delta" and cancel is None:  # s1's second model turn
                    seen_at_cancel = len(frames)
                    session_id = frames[0].data["session_id"]
                    cancel = await server.client.post(
                        f"/v1/sessions/{session_id}/cancel", headers=headers
                    )
        executions = await server.store.tool_executions.list_for_turn(frames[0].data["turn_id"])

    assert cancel.json() == {"cancelled": [frames[0].data["turn_id"]]}
    assert closed.is_set()
    started = [f.data["tool_use_id"] for f in frames if f.event == "tool_started"]
    assert started == ["toolu_search"]
    after = types(frames[seen_at_cancel:])
    assert "tool_started" not in after and "step_started" not in after
    assert [f.data["step_id"] for f in frames if f.event == "step_started"] == ["s1"]
    assert after[-2:] == ["error", "done"] and frames[-1].data["status"] == "cancelled"
    assert [e.tool_use_id for e in executions] == ["toolu_search"]


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: str


def _slow_tools(started: asyncio.Event, ran: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(name="slow.read", summary="Read slowly.", category="read")
    async def slow_read(args: _Query, ctx: ToolContext) -> None:
        ran.append("slow.read")
        started.set()
        await asyncio.sleep(30)

    @registry.tool(name="fast.read", summary="Read at once.", category="read")
    async def fast_read(args: _Query, ctx: ToolContext) -> None:
        ran.append("fast.read")

    return registry


async def test_cancel_cuts_a_running_tool_off_and_never_starts_the_next_one(
    store: Store,
) -> None:
    started = asyncio.Event()
    ran: list[str] = []
    planner = ScriptedModel(
        [
            plan(
                strategy="tool",
                steps=[{"id": "s1", "goal": "Read twice", "tools": ["slow.read", "fast.read"]}],
            )
        ]
    )
    both = (
        ToolCall(id="toolu_slow", name="slow_read", input={"q": "a"}),
        ToolCall(id="toolu_fast", name="fast_read", input={"q": "b"}),
    )
    executor = ScriptedModel([Reply(tool_calls=both)])
    runner = TurnRunner(store, turn_timeout_s=30, kit=TurnKit(tools=_slow_tools(started, ran)))
    session_id = await _session(store, user="u")
    handle = await runner.start(
        TurnOrder(org_id="acme", user_id="u"),
        session_id=session_id,
        text="read twice",
        models=TurnRoleModels(answer=executor, planner=planner, summariser=None, executor=executor),
        trace_id="trace-1",
    )
    await asyncio.wait_for(started.wait(), timeout=5)
    loop = asyncio.get_running_loop()
    begun = loop.time()

    cancelled = await runner.cancel(session_id)

    took = loop.time() - begun
    rows = await store.log.read(session_id)
    tail = [(r.type, r.data.get("tool_use_id"), r.data.get("error", {}).get("code")) for r in rows]
    assert cancelled == [handle.turn_id] and took < 1.0
    assert ran == ["slow.read"]
    assert tail[-5:] == [
        ("tool_started", "toolu_slow", None),
        ("tool_completed", "toolu_slow", "cancelled"),
        ("usage", None, None),  # the model call that asked for the tool was paid for
        ("error", None, None),
        ("done", None, None),
    ]
    assert (rows[-2].data["code"], rows[-1].data["status"]) == ("cancelled", "cancelled")
    assert [t.status for t in await store.sessions.turns(session_id)] == ["cancelled"]


async def test_a_turn_cancelled_before_it_ran_is_still_closed(store: Store) -> None:
    runner = TurnRunner(store, turn_timeout_s=30)
    session_id = await _session(store, user="u")
    model = FunctionModel(lambda _request: "never said")
    handle = await runner.start(
        TurnOrder(org_id="acme", user_id="u"),
        session_id=session_id,
        text="hi",
        models=TurnRoleModels(answer=model, planner=None, summariser=None),
        trace_id="trace-2",
    )

    cancelled = await runner.cancel(session_id)  # the task has not taken a step yet

    rows = await store.log.read(session_id)
    assert cancelled == [handle.turn_id]
    assert [r.type for r in rows] == ["session_started", "user_message", "error", "done"]
    assert rows[2].data == {
        "type": "error",
        "code": "cancelled",
        "message": "The turn was cancelled",
        "trace_id": "trace-2",
    }
    assert rows[3].data["status"] == "cancelled"
    assert [t.status for t in await store.sessions.turns(session_id)] == ["cancelled"]
    assert model.calls == []
    assert await runner.cancel(session_id) == []
