"""POST /v1/ag-ui over the real app (SQLite and PostgreSQL): what the real client tests
(tests/node/ag_ui.test.mjs) do not cover cheaply. The framing, every event as the
``ag-ui-protocol`` package reads it, org isolation before any stream, bad bodies and bad
resumes (400/404/409/422 with stable codes, nothing recorded), two interrupts answered in
one run, questions and cancels."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter
from sqlalchemy import select

from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import ProgramRow, WorkoutRow
from conftest import Server, ServerFactory
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall, ToolResult
from turn import TurnModels

ORG = "acme"
ENGINE = seed_id(ORG, "wo", 4)  # "Engine builder"
RIVERA, OKAFOR = seed_id(ORG, "mem", 0), seed_id(ORG, "mem", 1)
COMP_PREP = seed_id(ORG, "prg", 2)  # unpublished
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def plan(goal: str, tools: list[str]) -> dict[str, Any]:
    body = {
        "strategy": "tool",
        "reasoning": "test",
        "steps": [{"id": "s1", "goal": goal, "tools": tools}],
    }
    return {"match": "You are the planner", "text": json.dumps(body)}


def calls(goal: str, *tool_calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "match": goal,
        "tool_calls": [{"id": i, "name": n, "input": args} for i, n, args in tool_calls],
    }


def scripted(*steps: dict[str, Any]) -> tuple[TurnModels, ScriptedModel]:
    model = ScriptedModel(list(steps))
    return TurnModels(executor=model, planner=model), model


def body(thread: str, text: str | None = None, **more: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": "m1", "role": "user", "content": text}]
    return {"threadId": thread, "runId": "run-1", "messages": messages, **more}


def resume(*entries: tuple[str, str, Any]) -> list[dict[str, Any]]:
    return [{"interruptId": i, "status": s, "payload": p} for i, s, p in entries]


async def frames_of(response: httpx.Response) -> list[str]:
    """The response's SSE frames, each as sent (without its blank line)."""
    text = (await response.aread()).decode()
    assert text.endswith("\n\n"), text[-200:]
    return text[:-2].split("\n\n")


async def run(
    server: Server, payload: dict[str, Any], *, role: str = "owner"
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """POST a run; its AG-UI events, each checked against the protocol package's schema."""
    async with server.client.stream(
        "POST", "/v1/ag-ui", json=payload, headers=server.auth(role=role)
    ) as response:
        assert response.status_code == 200, await response.aread()
        frames = await frames_of(response)
    events = []
    for frame in frames:
        if frame.startswith(":"):
            continue  # a keep-alive comment
        assert frame.startswith("data: ") and "\n" not in frame, frame
        event = json.loads(frame.removeprefix("data: "))
        EVENTS.validate_python(event)
        events.append(event)
    return response, events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def workouts(server: Server) -> set[str]:
    async with server.store.db.read() as conn:
        rows = await conn.execute(select(WorkoutRow.id).where(WorkoutRow.org_id == ORG))
        return set(rows.scalars())


async def test_a_run_is_one_ag_ui_run_in_sse_frames(make_server: ServerFactory) -> None:
    model = ScriptedModel(["Hello there, friend.", "Again."])
    async with make_server(TurnModels(executor=model)) as server:
        response, events = await run(server, body("chat-1", "Say hello"))
        session = response.headers["x-session-id"]
        detail = await server.client.get(f"/v1/sessions/{session}", headers=server.auth())
        again, second = await run(server, body("chat-1", "Say it again"))

    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    started, finished = events[0], events[-1]
    assert started["type"] == "RUN_STARTED" and finished["type"] == "RUN_FINISHED"
    assert (started["threadId"], started["runId"]) == ("chat-1", "run-1")
    assert (finished["threadId"], finished["runId"]) == ("chat-1", "run-1")
    assert started["metadata"]["bosun"] == {
        "sessionId": session,
        "turnId": response.headers["x-turn-id"],
    }
    assert "outcome" not in finished  # success
    assert text_of(events) == "Hello there, friend."
    assert kinds(events).count("TEXT_MESSAGE_START") == kinds(events).count("TEXT_MESSAGE_END") == 1
    assert {e["name"] for e in events if e["type"] == "CUSTOM"} == {"bosun.usage"}
    # The thread is a Bosun session like any other, and the next run goes on in it.
    assert [m["text"] for m in detail.json()["messages"]] == ["Say hello", "Hello there, friend."]
    assert again.headers["x-session-id"] == session
    assert again.headers["x-turn-id"] != response.headers["x-turn-id"]
    assert text_of(second) == "Again."


async def test_each_thread_starts_a_scripted_model_at_its_first_step(
    make_server: ServerFactory,
) -> None:
    """A thread is a session: its own place in a shared script, whatever other threads
    did; one with no step left fails ``script_exhausted``."""
    model = ScriptedModel(["First.", "Second."])
    async with make_server(TurnModels(executor=model)) as server:
        _, one = await run(server, body("chat-a", "Hello"))
        _, two = await run(server, body("chat-b", "Hello"))
        _, again = await run(server, body("chat-a", "Hello again"))
        _, over = await run(server, body("chat-a", "And again"))

    assert [text_of(one), text_of(two), text_of(again)] == ["First.", "First.", "Second."]
    [error] = [e for e in over if e["type"] == "RUN_ERROR"]
    assert error["code"] == "script_exhausted" and "'scripted'" in error["message"]


@pytest.mark.parametrize("thread", ["mine", "0b7c6a52-1f0e-4d3a-8e2b-5c4d3e2f1a0b"])
async def test_another_orgs_or_users_thread_id_is_a_thread_of_their_own(
    make_server: ServerFactory, thread: str
) -> None:
    """The same thread id (made up, or a UUID as HttpAgent makes), and even the id of
    Alice's session, is a thread of its own for Eve (another org) and Bob (Alice's org):
    using it first takes nothing from Alice; resuming or re-attaching there finds nothing."""

    async def noted(request: ModelRequest) -> Reply:
        return Reply(text="Noted.")

    async with make_server(TurnModels(executor=FunctionModel(noted))) as server:
        others = [server.auth(org="globex", role="owner"), server.auth(user="bob")]
        early = [
            await server.client.post("/v1/ag-ui", json=body(thread, "Me first"), headers=h)
            for h in others
        ]
        response, events = await run(server, body(thread, "Say hi"), role="member")
        session = response.headers["x-session-id"]
        again, _ = await run(server, body(thread, "Say hi again"), role="member")
        answers = []
        for headers in others:
            for payload in (
                body(session, "Say hi"),
                body(session, resume=resume(("t1", "cancelled", None))),
                body(session),  # re-attach
            ):
                answers.append(await server.client.post("/v1/ag-ui", json=payload, headers=headers))
        detail = await server.client.get(f"/v1/sessions/{session}", headers=server.auth())

    assert [r.status_code for r in early] == [200, 200]
    assert len({r.headers["x-session-id"] for r in early} | {session}) == 3
    assert text_of(events) == "Noted." and again.headers["x-session-id"] == session
    own, resumed, reattached = answers[0::3], answers[1::3], answers[2::3]
    assert [r.status_code for r in own] == [200, 200]
    assert session not in {r.headers["x-session-id"] for r in own}
    for answer in resumed:  # before any stream: a JSON error
        assert answer.status_code == 404, answer.text
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["error"]["code"] == "not_found"
    assert [r.json()["error"]["code"] for r in reattached] == ["nothing_to_answer"] * 2
    said = [m["text"] for m in detail.json()["messages"] if m["role"] == "user"]
    assert said == ["Say hi", "Say hi again"]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"runId": "r", "messages": []}, "threadId"),
        (body("no spaces allowed", "Hi"), "threadId"),
        (body("t", "Hi", runId=""), "runId"),
        (body("t", "Hi", runId="r" * 201), "runId"),
        (body("t", "   "), "text"),
        (body("t", "nul \x00 here"), "messages[0].content (body): contains a NUL"),
        (
            {
                **body("t"),
                "messages": [{"id": "m", "role": "user", "content": [{"type": "image"}]}],
            },
            "text",
        ),
        ({**body("t"), "messages": [{"id": "m", "role": "robot", "content": "Hi"}]}, "role"),
        ({**body("t"), "messages": "Hi"}, "messages"),
        (body("t", "Hi", forwardedProps={"agent": "Not A Handle"}), "agent"),
        (body("t", "Hi", forwardedProps="trainer"), "forwardedProps"),
        (body("t", resume=[{"interruptId": "x", "status": "maybe"}]), "status"),
        (body("t", resume=[{"status": "resolved"}]), "interruptId"),
    ],
)
async def test_bad_bodies_are_400_invalid_request(
    make_server: ServerFactory, payload: dict[str, Any], why: str
) -> None:
    async with make_server(TurnModels(executor=ScriptedModel([]))) as server:
        answer = await server.client.post("/v1/ag-ui", json=payload, headers=server.auth())
        sessions = await server.client.get("/v1/sessions", headers=server.auth())

    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and why in error["message"]
    assert sessions.json()["sessions"] == []  # nothing started


BOTH = "Delete a workout and publish a program"
APPROVE_DEL = ("t_del", "resolved", {"approved": True})
CANCEL_PUB = ("t_pub", "cancelled", None)


async def post_resume(server: Server, thread: str, *entries: tuple[str, str, Any]) -> Any:
    payload = body(thread, resume=resume(*entries))
    return await server.client.post("/v1/ag-ui", json=payload, headers=server.auth(role="owner"))


async def test_every_open_interrupt_must_be_answered_then_one_run_goes_on(
    make_server: ServerFactory,
) -> None:
    turn, model = scripted(
        plan(BOTH, ["workouts.delete", "programs.publish_bulk"]),
        calls(
            BOTH,
            ("t_del", "workouts_delete", {"workout_id": ENGINE}),
            ("t_pub", "programs_publish_bulk", {"program_ids": [COMP_PREP]}),
        ),
        {"match": BOTH, "text": "Deleted it; left the program as it was."},
    )
    async with make_server(turn) as server:
        await seed_demo(server.store, ORG)
        response, first = await run(server, body("two", "delete engine builder, publish it"))
        refused = [
            await post_resume(server, "two", APPROVE_DEL),  # t_pub is left unanswered
            await post_resume(server, "two", APPROVE_DEL, ("t_del", "cancelled", None), CANCEL_PUB),
            await post_resume(
                server, "two", APPROVE_DEL, CANCEL_PUB, ("t_nope", "cancelled", None)
            ),
            await post_resume(
                server, "two", ("t_del", "resolved", {"approved": "yes"}), CANCEL_PUB
            ),
        ]
        session = response.headers["x-session-id"]
        row = await server.store.tool_executions.latest("t_del", session_id=session)
        _, second = await run(server, body("two", resume=resume(APPROVE_DEL, CANCEL_PUB)))
        gone = ENGINE not in await workouts(server)
        async with server.store.db.read() as conn:
            query = select(ProgramRow.published).where(ProgramRow.id == COMP_PREP)
            published = await conn.scalar(query)

    asked = first[-1]["outcome"]["interrupts"]
    assert [(i["id"], i["reason"], i["toolCallId"]) for i in asked] == [
        ("t_del", "tool_call", "t_del"),
        ("t_pub", "tool_call", "t_pub"),
    ]
    assert datetime.fromisoformat(asked[0]["expiresAt"]).tzinfo is not None
    assert asked[0]["responseSchema"]["required"] == ["approved"]
    assert [r.status_code for r in refused] == [422, 422, 404, 422]
    assert [r.json()["error"]["code"] for r in refused] == [
        "invalid_resume",
        "invalid_resume",
        "not_found",
        "invalid_resume",
    ]
    assert "every open interrupt" in refused[0].json()["error"]["message"]
    assert row is not None and row.status == "pending"  # no refused resume recorded anything
    # One run carries the whole resumed turn: the first answer's suspension is not its end.
    assert kinds(second)[0] == "RUN_STARTED" and kinds(second).count("RUN_FINISHED") == 1
    assert "outcome" not in second[-1]
    results = {
        e["toolCallId"]: json.loads(e["content"]) for e in second if e["type"] == "TOOL_CALL_RESULT"
    }
    assert results["t_del"]["deleted"] is True
    assert results["t_pub"]["error"]["code"] == "rejected_by_user"
    assert gone and published is False
    assert [r.tool_use_id for r in results_of(model)] == ["t_del", "t_pub"]


def results_of(model: ScriptedModel) -> list[ToolResult]:
    return [p for p in model.calls[-1].messages[-1].parts if isinstance(p, ToolResult)]


PICK = "Find which Sam to book"
PICK_CALL = (
    "t_pick",
    "ui_ask_user_to_pick",
    {
        "kind": "member",
        "prompt": "Which Sam?",
        "candidates": [
            {"id": RIVERA, "label": "Sam Rivera"},
            {"id": OKAFOR, "label": "Sam Okafor"},
        ],
    },
)


async def test_a_pick_is_resumed_with_one_of_its_candidates(make_server: ServerFactory) -> None:
    turn, model = scripted(
        plan(PICK, ["ui.ask_user_to_pick"]),
        calls(PICK, PICK_CALL),
        {"match": PICK, "text": "Booked the Sam you picked."},
    )
    async with make_server(turn) as server:
        await seed_demo(server.store, ORG)
        _, first = await run(server, body("pick", "book sam"))
        refused = [
            await post_resume(server, "pick", ("t_pick", "cancelled", None)),
            await post_resume(server, "pick", ("t_pick", "resolved", {"id": 5})),
            await post_resume(server, "pick", ("t_pick", "resolved", {"id": "mem_nobody"})),
        ]
        _, second = await run(
            server, body("pick", resume=resume(("t_pick", "resolved", {"id": OKAFOR})))
        )

    [asked] = first[-1]["outcome"]["interrupts"]
    assert (asked["id"], asked["reason"], asked["message"]) == (
        "t_pick",
        "input_required",
        "Which Sam?",
    )
    assert "toolCallId" not in asked
    assert asked["responseSchema"]["properties"]["id"]["enum"] == [RIVERA, OKAFOR]
    assert asked["metadata"]["candidates"][1] == {"id": OKAFOR, "label": "Sam Okafor"}
    assert [r.status_code for r in refused] == [422, 422, 422]
    assert [r.json()["error"]["code"] for r in refused] == [
        "invalid_resume",
        "invalid_resume",
        "invalid_pick",
    ]
    assert "TOOL_CALL_START" not in kinds(first)  # the picker is the interrupt, not a call
    assert second[-1]["type"] == "RUN_FINISHED" and "outcome" not in second[-1]
    assert text_of(second) == "Booked the Sam you picked."
    picked = results_of(model)[0]
    assert json.loads(picked.content.split("\n", 1)[0])["id"] == OKAFOR


async def test_a_question_is_an_interrupt_its_answer_resumes(make_server: ServerFactory) -> None:
    ask = {"question": "Which days?", "options": ["Mon", "Tue"]}
    replies = iter(
        [
            ToolCall(id="q1", name="message_ask_user", input=ask),
            ToolCall(id="n1", name="message_notify_user", input={"message": "Booked for Monday."}),
            ToolCall(id="i1", name="agent_idle", input={"reason": "done"}),
        ]
    )
    seen: list[ModelRequest] = []

    def executor(request: ModelRequest) -> Reply:
        seen.append(request)
        return Reply(tool_calls=(next(replies),))

    planner = FunctionModel(lambda _r: json.dumps({"strategy": "simple", "reasoning": "chat"}))
    models = TurnModels(planner=planner, executor=FunctionModel(executor), merger=None)
    async with make_server(models) as server:
        await seed_demo(server.store, ORG)
        made = await server.client.post(
            "/v1/agents",
            json={"handle": "trainer", "name": "Trainer", "tools": [], "loop": "forced_tools"},
            headers=server.auth(role="owner"),
        )
        assert made.status_code == 201, made.text
        _, first = await run(
            server, body("q", "Book me in", forwardedProps={"agent": "trainer", "x": 1})
        )
        _, second = await run(
            server, body("q", resume=resume(("q1", "resolved", {"answer": "Monday"})))
        )

    [asked] = first[-1]["outcome"]["interrupts"]
    assert (asked["id"], asked["reason"], asked["message"]) == (
        "q1",
        "input_required",
        "Which days?",
    )
    assert asked["metadata"] == {"options": ["Mon", "Tue"]}
    assert asked["responseSchema"]["required"] == ["answer"]
    assert first[0]["metadata"]["bosun"]["turnId"] == second[0]["metadata"]["bosun"]["turnId"]
    assert "outcome" not in second[-1]
    assert text_of(second) == "Booked for Monday."
    answer = seen[1].messages[-1].parts[0]
    assert isinstance(answer, ToolResult) and answer.content == '{"answer":"Monday"}'


async def test_a_cancelled_turn_finishes_its_run_cancelled(make_server: ServerFactory) -> None:
    async def slow(_request: ModelRequest) -> AsyncIterator[str]:
        for word in ["one ", "two ", "three ", "four ", "five "] * 40:
            await asyncio.sleep(0.05)
            yield word

    async with make_server(TurnModels(executor=FunctionModel(slow))) as server:
        headers = server.auth()
        async with server.client.stream(
            "POST", "/v1/ag-ui", json=body("slow", "Count"), headers=headers
        ) as response:
            session = response.headers["x-session-id"]
            lines: list[str] = []
            async for line in response.aiter_lines():
                lines.append(line)
                if "TEXT_MESSAGE_CONTENT" in line and "(cancelled)" not in lines:
                    stop = await server.client.post(
                        f"/v1/sessions/{session}/cancel", headers=headers
                    )
                    assert stop.status_code == 200 and stop.json()["cancelled"]
                    lines.append("(cancelled)")
    events = [json.loads(x.removeprefix("data: ")) for x in lines if x.startswith("data: ")]
    last = events[-1]
    assert last["type"] == "RUN_FINISHED" and last["outcome"] == {"type": "cancelled"}
    assert "RUN_ERROR" not in kinds(events)
    assert kinds(events).count("TEXT_MESSAGE_END") == 1  # closed before the run's end


async def test_a_run_without_a_user_message_re_attaches_to_the_running_turn(
    make_server: ServerFactory,
) -> None:
    async def slow(_request: ModelRequest) -> AsyncIterator[str]:
        for word in ("one ", "two ", "three ", "four ", "five"):
            await asyncio.sleep(0.2)
            yield word

    async with make_server(TurnModels(executor=FunctionModel(slow))) as server:
        idle = await server.client.post("/v1/ag-ui", json=body("re"), headers=server.auth())
        async with server.client.stream(
            "POST", "/v1/ag-ui", json=body("re", "Count"), headers=server.auth()
        ) as dropped:
            async for line in dropped.aiter_lines():
                if "TEXT_MESSAGE_CONTENT" in line:
                    first = json.loads(line.removeprefix("data: "))
                    break  # the connection drops after the first word
        have = {"id": first["messageId"], "role": "assistant", "content": first["delta"]}
        user = {"id": "m1", "role": "user", "content": "Count"}
        again, events = await run(server, {**body("re"), "messages": [user, have]})

    assert idle.status_code == 409 and idle.json()["error"]["code"] == "nothing_to_answer"
    assert again.headers["x-turn-id"] == dropped.headers["x-turn-id"]
    assert first["delta"] == "one "
    assert text_of(events) == "two three four five"  # what the client has is not sent again
    starts = [e for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert [e["messageId"] for e in starts] == [first["messageId"]]
    assert events[-1]["type"] == "RUN_FINISHED" and "outcome" not in events[-1]
