"""Who may act with an agent (its profile's ``access``), over the real app on SQLite and
PostgreSQL: a role it leaves out is 403 ``forbidden_role`` on the native, AI SDK and AG-UI
routes, for chat, confirm and pick and in the approval inbox, before any model call and
before anything is stored or counted; the default lets members chat and answer in their
own sessions."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from sqlalchemy import select

from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import WorkoutRow
from conftest import Server, ServerFactory
from helpers import stream_turn
from providers import FunctionModel, Reply, ScriptedModel, ToolCall
from turn import TurnModels

ORG = "acme"
RIVERA, OKAFOR = seed_id(ORG, "mem", 0), seed_id(ORG, "mem", 1)
DELETE, PICK = "Delete the old workout", "Find which Sam to book"
STAFF_ONLY = {"chat": ["owner", "staff"], "answer": ["owner", "staff"]}


async def create(server: Server, handle: str, access: dict[str, Any] | None) -> None:
    body: dict[str, Any] = {"handle": handle, "name": handle.title(), "runs_per_minute": 10}
    if access is not None:
        body["access"] = access
    made = await server.client.post("/v1/agents", json=body, headers=server.auth(role="owner"))
    assert made.status_code == 201, made.text


def refused(response: httpx.Response) -> bool:
    """A 403 ``forbidden_role``."""
    return response.status_code == 403 and response.json()["error"]["code"] == "forbidden_role"


def _plan(goal: str, tool: str) -> dict[str, Any]:
    steps = [{"id": "s1", "goal": goal, "tools": [tool]}]
    plan = {"strategy": "tool", "reasoning": "test", "steps": steps}
    return {"match": ["You are the planner", goal], "text": json.dumps(plan)}


def deletes(*workouts: int) -> list[dict[str, Any]]:
    """One turn per workout: the plan, the delete (a destructive call: it waits for a
    confirmation), then the answer."""
    steps: list[dict[str, Any]] = []
    for n in workouts:
        call = {"id": "t_del", "name": "workouts_delete", "input": {"workout_id": wo(n)}}
        steps += [_plan(DELETE, "workouts.delete"), {"match": DELETE, "tool_calls": [call]}]
        steps.append({"match": DELETE, "text": "Deleted it."})
    return steps


def picks() -> list[dict[str, Any]]:
    """A turn that asks the user to pick a Sam, then answers."""
    candidates = [{"id": RIVERA, "label": "Sam Rivera"}, {"id": OKAFOR, "label": "Sam Okafor"}]
    ask = {"kind": "member", "prompt": "Which Sam?", "candidates": candidates}
    call = {"id": "t_pick", "name": "ui_ask_user_to_pick", "input": ask}
    return [
        _plan(PICK, "ui.ask_user_to_pick"),
        {"match": PICK, "tool_calls": [call]},
        {"match": PICK, "text": "Booked the Sam you picked."},
    ]


def wo(n: int) -> str:
    return seed_id(ORG, "wo", n)


async def present(server: Server, workout: str) -> bool:
    async with server.store.db.read() as conn:
        found = await conn.scalar(select(WorkoutRow.id).where(WorkoutRow.id == workout))
    return found is not None


async def status_of(server: Server, session_id: str, call: str) -> str | None:
    row = await server.store.tool_executions.latest(call, session_id=session_id)
    return row.status if row is not None else None


async def test_a_staff_only_agent_refuses_a_members_chat_on_every_route(
    make_server: ServerFactory,
) -> None:
    model = ScriptedModel([  # each session starts the script over: the caller picks
        {"match": 'role="owner"', "text": "Hello, owner."},
        {"match": 'role="staff"', "text": "Hello, staff."},
    ])  # fmt: skip
    # One request a minute: a refused request that counted would leave alice none.
    async with make_server(TurnModels(executor=model), requests_per_minute=1) as server:
        await create(server, "desk", STAFF_ONLY)
        member, key = server.auth(role="member"), {"Idempotency-Key": "k1"}
        chat = {"message": "hi", "agent": "desk"}
        answers = [
            await server.client.post("/v1/chat", json=chat, headers=member | key),
            await server.client.post("/v1/chat/stream", json=chat, headers=member),
            await server.client.post("/v1/ai-sdk/chat", headers=member, json={
                "id": "c1", "trigger": "submit-message", "agent": "desk",
                "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text",
                                                                     "text": "hi"}]}]}),
            await server.client.post("/v1/ag-ui", headers=member, json={
                "threadId": "t1", "runId": "r1", "forwardedProps": {"agent": "desk"},
                "messages": [{"id": "m1", "role": "user", "content": "hi"}]}),
            await server.client.post("/v1/agents/desk/runs", json={"task": "hi"}, headers=member),
        ]  # fmt: skip
        calls = len(model.calls)
        sessions = await server.client.get("/v1/sessions", headers=server.auth(role="owner"))
        threads = [await server.store.threads.find(ORG, "alice", t) for t in ("c1", "t1")]
        # The same user as owner, with the same key: a new turn, within the rate limit.
        owner = await server.client.post(
            "/v1/chat", json=chat, headers=server.auth(role="owner") | key
        )
        staff = await server.client.post(
            "/v1/chat", json=chat, headers=server.auth(role="staff", user="bob")
        )

    assert all(refused(r) for r in answers), [(r.status_code, r.text) for r in answers]
    assert "talks only to owner or staff" in answers[0].json()["error"]["message"]
    assert calls == 0  # no model call
    assert sessions.json()["sessions"] == [] and threads == [None, None]  # nothing stored
    assert owner.status_code == 200 and owner.json()["answer"] == "Hello, owner."
    assert staff.status_code == 200 and staff.json()["answer"] == "Hello, staff."


async def test_a_members_confirm_and_pick_are_refused_where_owners_and_staff_answer(
    make_server: ServerFactory,
) -> None:
    model = ScriptedModel([*deletes(0), *picks()])
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        await create(server, "desk", {"answer": ["owner", "staff"]})  # chat: every role
        owner, member = server.auth(role="owner"), server.auth(role="member")
        deleting = await stream_turn(
            server.client, {"message": DELETE, "agent": "desk"}, owner
        )  # alice's own session: alice as a member is still refused
        session = deleting[-1].data["session_id"]
        calls = len(model.calls)
        confirm = await server.client.post(
            f"/v1/sessions/{session}/confirm/t_del", json={"approved": True}, headers=member
        )
        left = await status_of(server, session, "t_del"), len(model.calls) - calls
        by_staff = await server.client.post(
            f"/v1/sessions/{session}/confirm/t_del", json={"approved": True},
            headers=server.auth(role="staff", user="bob"),
        )  # fmt: skip
        picking = await stream_turn(server.client, {"message": PICK, "agent": "desk"}, member)
        picked_in = picking[-1].data["session_id"]
        calls = len(model.calls)
        pick = await server.client.post(
            f"/v1/sessions/{picked_in}/pick/t_pick", json={"id": OKAFOR}, headers=member
        )
        pick_left = await status_of(server, picked_in, "t_pick"), len(model.calls) - calls
        by_owner = await server.client.post(
            f"/v1/sessions/{picked_in}/pick/t_pick", json={"id": OKAFOR}, headers=owner
        )
        gone = not await present(server, wo(0))

    assert deleting[-1].data["status"] == "suspended" and picking[-1].data["status"] == "suspended"
    assert refused(confirm) and refused(pick), (confirm.text, pick.text)
    assert left == ("pending", 0) and pick_left == ("pending", 0)  # nothing recorded, no call
    assert by_staff.status_code == 200 and by_owner.status_code == 200
    assert "Booked the Sam you picked." in by_owner.text
    assert gone
    model.assert_complete()


async def ai_sdk(server: Server, role: str, *messages: dict[str, Any]) -> httpx.Response:
    body = {"id": "c1", "trigger": "submit-message", "agent": "desk", "messages": list(messages)}
    return await server.client.post("/v1/ai-sdk/chat", json=body, headers=server.auth(role=role))


async def test_the_ai_sdk_route_refuses_a_members_answer(make_server: ServerFactory) -> None:
    model = ScriptedModel(deletes(1))
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        await create(server, "desk", STAFF_ONLY)
        asked = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": DELETE}]}
        first = await ai_sdk(server, "owner", asked)
        session = first.headers["x-session-id"]
        message_id = json.loads(first.text.split("\n\n")[0].removeprefix("data: "))["messageId"]
        approval = {"type": "dynamic-tool", "toolName": "workouts_delete", "toolCallId": "t_del",
                    "state": "approval-responded", "input": {"workout_id": wo(1)},
                    "approval": {"id": "t_del", "approved": True}}  # fmt: skip
        reply = {"id": message_id, "role": "assistant", "parts": [approval]}
        calls = len(model.calls)
        member = await ai_sdk(server, "member", asked, reply)
        left = await status_of(server, session, "t_del"), len(model.calls) - calls
        owner = await ai_sdk(server, "owner", asked, reply)
        gone = not await present(server, wo(1))

    assert "tool-approval-request" in first.text
    assert refused(member), member.text
    assert left == ("pending", 0)
    assert owner.status_code == 200 and "Deleted it." in owner.text and gone


async def test_the_ag_ui_route_refuses_a_members_resume(make_server: ServerFactory) -> None:
    model = ScriptedModel(picks())
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        await create(server, "desk", STAFF_ONLY)
        start = {"threadId": "t1", "runId": "r1", "forwardedProps": {"agent": "desk"},
                 "messages": [{"id": "m1", "role": "user", "content": PICK}]}  # fmt: skip
        first = await server.client.post("/v1/ag-ui", json=start, headers=server.auth(role="staff"))
        session = first.headers["x-session-id"]
        entry = {"interruptId": "t_pick", "status": "resolved", "payload": {"id": RIVERA}}
        resume = {"threadId": "t1", "runId": "r2", "messages": [], "resume": [entry]}
        calls = len(model.calls)
        member = await server.client.post(
            "/v1/ag-ui", json=resume, headers=server.auth(role="member")
        )
        left = await status_of(server, session, "t_pick"), len(model.calls) - calls
        staff = await server.client.post(
            "/v1/ag-ui", json=resume, headers=server.auth(role="staff")
        )

    assert '"interrupts"' in first.text
    assert refused(member), member.text
    assert left == ("pending", 0)
    assert staff.status_code == 200 and "RUN_FINISHED" in staff.text
    deltas = [json.loads(f.removeprefix("data: ")) for f in staff.text.split("\n\n") if f]
    said = "".join(e["delta"] for e in deltas if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "Booked the Sam you picked."


async def test_by_default_members_chat_and_answer_only_in_their_own_sessions(
    make_server: ServerFactory,
) -> None:
    model = ScriptedModel(picks())
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        alice = server.auth(role="member")
        frames = await stream_turn(server.client, {"message": PICK}, alice)
        session = frames[-1].data["session_id"]
        path = f"/v1/sessions/{session}/pick/t_pick"
        bob = await server.client.post(
            path, json={"id": RIVERA}, headers=server.auth(role="member", user="bob")
        )
        own = await server.client.post(path, json={"id": RIVERA}, headers=alice)
        agent = await server.client.get("/v1/agents/default", headers=alice)

    assert frames[-1].data["status"] == "suspended"
    assert bob.status_code == 404  # another member's session is not even visible
    assert own.status_code == 200 and "Booked the Sam you picked." in own.text
    assert agent.json()["access"] == {
        "chat": ["owner", "staff", "member"],
        "answer": ["owner", "staff", "member"],
    }


async def test_the_inbox_answers_only_with_a_role_the_agent_names(
    make_server: ServerFactory,
) -> None:
    model = ScriptedModel([*deletes(2)[:2], {"match": DELETE, "text": "Queued it."}])
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        await create(server, "desk", {"chat": ["owner", "staff"], "answer": ["owner"]})
        staff, owner = server.auth(role="staff", user="bob"), server.auth(role="owner")
        queued = await server.client.post(
            "/v1/agents/desk/runs", json={"task": DELETE}, headers=staff
        )
        approval = await _pending_approval(server)
        by_staff = await server.client.post(f"/v1/approvals/{approval}/approve", headers=staff)
        still = await server.client.get(f"/v1/approvals/{approval}", headers=owner)
        by_owner = await server.client.post(f"/v1/approvals/{approval}/approve", headers=owner)

    assert queued.status_code == 202, queued.text
    assert refused(by_staff), by_staff.text
    assert still.json()["status"] == "pending"
    assert by_owner.status_code == 200, by_owner.text


async def _pending_approval(server: Server) -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        page = await server.client.get(
            "/v1/approvals", params={"status": "pending"}, headers=server.auth(role="owner")
        )
        if found := page.json()["approvals"]:
            return str(found[0]["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("no approval was requested")


async def test_a_profile_naming_an_unknown_role_is_422(make_server: ServerFactory) -> None:
    async with make_server() as server:
        owner = server.auth(role="owner")
        body = {"handle": "desk", "name": "Desk", "access": {"chat": ["owner", "admin"]}}
        made = await server.client.post("/v1/agents", json=body, headers=owner)
        good = await server.client.post(
            "/v1/agents", json=body | {"access": {"answer": ["owner"]}}, headers=owner
        )

    assert made.status_code == 422 and made.json()["error"]["code"] == "unknown_role"
    assert "'admin'" in made.json()["error"]["message"]
    assert good.json()["access"] == {"chat": ["owner", "staff", "member"], "answer": ["owner"]}


async def test_a_question_is_answered_as_chat_so_the_chat_roles_decide(
    make_server: ServerFactory,
) -> None:
    """A question (``message_ask_user``) is answered by the user's next message: ``chat``
    decides, on the native route and in an AG-UI ``resume`` alike."""
    ask = {"question": "Which days?", "options": ["Mon", "Tue"]}
    replies = iter([
        Reply(tool_calls=(ToolCall(id="q1", name="message_ask_user", input=ask),)),
        Reply(tool_calls=(ToolCall(id="n1", name="message_notify_user",
                                   input={"message": "Booked for Monday."}),)),
        Reply(tool_calls=(ToolCall(id="i1", name="agent_idle", input={"reason": "done"}),)),
    ])  # fmt: skip
    executor = FunctionModel(lambda _request: next(replies))
    planner = FunctionModel(lambda _r: json.dumps({"strategy": "simple", "reasoning": "chat"}))
    async with make_server(TurnModels(planner=planner, executor=executor)) as server:
        body = {"handle": "trainer", "name": "Trainer", "tools": [], "loop": "forced_tools",
                "access": {"chat": ["owner", "staff"]}}  # fmt: skip
        made = await server.client.post("/v1/agents", json=body, headers=server.auth(role="owner"))
        assert made.status_code == 201, made.text
        start = {"threadId": "q", "runId": "r1", "forwardedProps": {"agent": "trainer"},
                 "messages": [{"id": "m1", "role": "user", "content": "Book me in"}]}  # fmt: skip
        first = await server.client.post("/v1/ag-ui", json=start, headers=server.auth(role="owner"))
        session = first.headers["x-session-id"]
        entry = {"interruptId": "q1", "status": "resolved", "payload": {"answer": "Monday"}}
        resume = {"threadId": "q", "runId": "r2", "messages": [], "resume": [entry]}
        member = server.auth(role="member")
        calls = len(executor.calls)
        refusals = [
            await server.client.post("/v1/ag-ui", json=resume, headers=member),
            await server.client.post(
                "/v1/chat", json={"message": "Monday", "session_id": session}, headers=member
            ),
        ]
        left = await status_of(server, session, "q1"), len(executor.calls) - calls
        owner = await server.client.post(
            "/v1/ag-ui", json=resume, headers=server.auth(role="owner")
        )

    assert all(refused(r) for r in refusals), [r.text for r in refusals]
    assert left == ("pending", 0)
    assert owner.status_code == 200 and "Booked for Monday." in owner.text


async def test_a_plan_dry_run_is_a_chat_with_the_default_agent(make_server: ServerFactory) -> None:
    plan = json.dumps({"strategy": "simple", "reasoning": "chat"})
    planner = ScriptedModel([{"match": "You are the planner", "text": plan}])
    async with make_server(TurnModels(planner=planner, executor=ScriptedModel([]))) as server:
        owner = server.auth(role="owner")
        staff_only = {"name": "Default", "access": {"chat": ["owner", "staff"]}}
        saved = await server.client.put("/v1/agents/default", json=staff_only, headers=owner)
        member = await server.client.post(
            "/v1/plan", json={"message": "hi"}, headers=server.auth(role="member")
        )
        calls = len(planner.calls)
        planned = await server.client.post("/v1/plan", json={"message": "hi"}, headers=owner)

    assert saved.status_code == 200, saved.text
    assert refused(member) and calls == 0
    assert planned.status_code == 200 and planned.json()["plan"]["strategy"] == "simple"
