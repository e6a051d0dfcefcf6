"""The AI SDK UI Message Stream (``/v1/ai-sdk/chat``) over the real app, on SQLite and
PostgreSQL: the framing, bad bodies, org isolation, answers (approvals, ai 5's tool
outputs, several in one request), questions, idempotency and resume. The real client's own
tests are tests/node/ai_sdk.test.mjs."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import WorkoutRow
from conftest import Server, ServerFactory
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall
from store import StoredEvent
from stream._ai_sdk import _Writer
from turn import TurnModels

ORG = "acme"
ENGINE, TEMPO = seed_id(ORG, "wo", 4), seed_id(ORG, "wo", 1)
CHAT = "/v1/ai-sdk/chat"
DELETE = "Delete the old workouts"


AI_SDK_5_FIELDS = {
    "start": {"messageId", "messageMetadata"}, "finish": {"messageMetadata"}, "abort": set(),
    "start-step": set(), "finish-step": set(), "error": {"errorText"},
    "message-metadata": {"messageMetadata"}, "text-start": {"id"}, "text-delta": {"id", "delta"},
    "text-end": {"id"}, "reasoning-start": {"id"}, "reasoning-delta": {"id", "delta"},
    "reasoning-end": {"id"},
    "tool-input-available": {"toolCallId", "toolName", "input", "providerExecuted", "dynamic"},
    "tool-output-available": {"toolCallId", "output", "providerExecuted", "dynamic"},
    "tool-output-error": {"toolCallId", "errorText", "providerExecuted", "dynamic"},
}  # fmt: skip
"""The parts ai 5 knows, and the fields its strict schemas allow in them (of those Bosun
might send; a data part may carry ``id``, ``data``, ``transient``)."""


def user(text: str, *, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def body(chat_id: str, *messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"id": chat_id, "messages": list(messages), "trigger": "submit-message", **more}


def parse(raw: str) -> list[dict[str, Any]]:
    """The parts of a UI message stream (keep-alive comments left out); it ends with
    ``data: [DONE]``."""
    frames = [f for f in raw.split("\n\n") if f and not f.startswith(":")]
    assert frames[-1] == "data: [DONE]", raw[-300:]
    assert all(f.startswith("data: ") and "\n" not in f for f in frames), raw
    return [json.loads(f.removeprefix("data: ")) for f in frames[:-1]]


async def post(
    server: Server,
    payload: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    headers = {**server.auth(role="owner"), **(headers or {})}
    response = await server.client.post(CHAT, json=payload, headers=headers, params=params)
    parts = parse(response.text) if response.status_code == 200 else []
    return response, parts


def kinds(parts: list[dict[str, Any]]) -> list[str]:
    return [p["type"] for p in parts]


def text(parts: list[dict[str, Any]], kind: str = "text-delta") -> str:
    return "".join(p["delta"] for p in parts if p["type"] == kind)


def of(parts: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [p for p in parts if p["type"] == kind]


async def workouts(server: Server) -> set[str]:
    async with server.store.db.read() as conn:
        rows = await conn.execute(select(WorkoutRow.id).where(WorkoutRow.org_id == ORG))
        return set(rows.scalars())


async def session_of(server: Server, chat_id: str) -> str:
    """The session alice's chat ``chat_id`` names (one no session has, before its first
    message)."""
    found = await server.store.threads.find(ORG, "alice", chat_id)
    return found or "00000000-0000-0000-0000-000000000000"


def slow_model(words: int, delay_s: float) -> FunctionModel:
    async def reply(_request: ModelRequest) -> AsyncIterator[str]:
        for i in range(words):
            await asyncio.sleep(delay_s)
            yield f"w{i} "

    return FunctionModel(reply)


async def test_a_turn_streams_as_one_assistant_message(make_server: ServerFactory) -> None:
    model = ScriptedModel(["Hello there, friend.", "Second answer."])
    async with make_server(TurnModels(executor=model)) as server:
        # The transport's own body fields (here selectedModel) are accepted and ignored.
        first, parts = await post(server, body("chat-1", user("Say hello"), selectedModel="x"))
        session_id = first.headers["x-session-id"]
        second, again = await post(
            server, body("chat-1", user("Say hello"), {"id": "a1", "role": "assistant",
                                                       "parts": []}, user("two", id="u2"))
        )  # fmt: skip
        detail = await server.client.get(f"/v1/sessions/{session_id}", headers=server.auth())

    assert first.status_code == 200, first.text
    assert first.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert first.headers["content-type"].startswith("text/event-stream")
    start = parts[0]
    assert start["type"] == "start" and start["messageId"] == start["messageMetadata"]["turnId"]
    assert start["messageMetadata"]["sessionId"] == session_id
    assert kinds(parts)[:2] == ["start", "start-step"] and kinds(parts)[-2:] == [
        "finish-step", "finish",
    ]  # fmt: skip
    assert text(parts) == "Hello there, friend."
    [opened] = of(parts, "text-start")
    assert {p["id"] for p in of(parts, "text-delta") + of(parts, "text-end")} == {opened["id"]}
    [usage] = [p["messageMetadata"]["usage"] for p in of(parts, "message-metadata")]
    assert usage["input_tokens"] == 0 and "by_role" in usage
    assert parts[-1] == {"type": "finish", "messageMetadata": {"status": "completed"},
                         "finishReason": "stop"}  # fmt: skip
    # The same chat id is the same session: the second message continues it.
    assert second.headers["x-session-id"] == session_id and text(again) == "Second answer."
    assert again[0]["messageId"] != start["messageId"]
    assert [m["text"] for m in detail.json()["messages"]] == [
        "Say hello", "Hello there, friend.", "two", "Second answer.",
    ]  # fmt: skip


async def test_each_chat_starts_a_scripted_model_at_its_first_step(
    make_server: ServerFactory,
) -> None:
    """A chat is a session: its own place in a shared script, whatever other chats did."""
    model = ScriptedModel(["First.", "Second."])
    async with make_server(TurnModels(executor=model)) as server:
        _, one = await post(server, body("chat-a", user("Hello")))
        _, two = await post(server, body("chat-b", user("Hello")))
        _, again = await post(server, body("chat-a", user("Hello"), user("Again", id="u2")))

    assert [text(one), text(two), text(again)] == ["First.", "First.", "Second."]


async def test_idle_streams_send_keepalive_comments(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=slow_model(2, 0.3)), keepalive_s=0.05) as server:
        response = await server.client.post(
            CHAT, json=body("slow", user("x")), headers=server.auth()
        )
    frames = response.text.split("\n\n")
    assert ": keep-alive" in frames
    assert text(parse(response.text)) == "w0 w1 "


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (body("c", user("x"), trigger="regenerate-message"), "regenerate-message is not supported"),
        (body("c", user("x"), trigger="resume-stream"), "must be 'submit-message'"),
        (body("c"), "messages"),
        (body("c", {"id": "u", "role": "user", "parts": [{"type": "file", "url": "x"}]}),
         "a user message needs a text part"),
        (body("c", user(" \u3000\n")), "a user message needs a text part"),
        (body("c", user("a\x00b")), "text"),
        (body("no spaces", user("x")), "id"),
        (body("c", user("x"), agent="Not A Handle"), "agent"),
        ({"messages": [user("x")], "trigger": "submit-message"}, "id"),
    ],
)  # fmt: skip
async def test_bad_bodies_are_400_and_start_nothing(
    make_server: ServerFactory, payload: dict[str, Any], says: str
) -> None:
    async with make_server(TurnModels(executor=ScriptedModel(["never"]))) as server:
        response, _ = await post(server, payload)
        sessions = await server.client.get("/v1/sessions", headers=server.auth(role="owner"))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and says in error["message"], error
    assert sessions.json()["sessions"] == []


async def test_bad_chat_ids_in_the_resume_path_are_400(make_server: ServerFactory) -> None:
    async with make_server() as server:
        response = await server.client.get(f"{CHAT}/{'x' * 129}/stream", headers=server.auth())
    assert response.status_code == 400
    assert "chat_id must be a chat id" in response.json()["error"]["message"]


def noted() -> TurnModels:
    async def reply(request: ModelRequest) -> Reply:
        return Reply(text="Noted.")

    return TurnModels(executor=FunctionModel(reply))


def legacy_session_id(org: str, user: str, chat_id: str) -> str:
    """The session id Bosun used to derive from a chat id, open for anyone to compute."""
    namespace = uuid.UUID("5b1e0c1a-3f4e-4a4b-9a43-b05d1c0a7e11")
    return str(uuid.uuid5(namespace, f"{org}\x00{user}\x00{chat_id}"))


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def said(server: Server, session_id: str) -> list[str]:
    detail = await server.client.get(f"/v1/sessions/{session_id}", headers=server.auth())
    assert detail.status_code == 200, detail.text
    return [m["text"] for m in detail.json()["messages"] if m["role"] == "user"]


@pytest.mark.parametrize("chat_id", ["chat-1", "7d9f1e2a-6a53-4c55-9a0e-2b8f3c1d4e5f"])
async def test_one_chat_id_in_two_orgs_is_two_chats_and_cannot_be_squatted(
    make_server: ServerFactory, chat_id: str
) -> None:
    """Eve (another org) uses Alice's chat id, and the session id it used to name, before
    Alice does; Bob (Alice's org) uses it too. Each gets a chat of their own, and Alice's
    works: her first message, her next one and her resume."""
    async with make_server(noted()) as server:
        eve = server.auth(user="eve", org="globex", role="owner")
        # A UUID chat id was the session id itself; any other named a predictable one.
        squat_id = chat_id if is_uuid(chat_id) else legacy_session_id(ORG, "alice", chat_id)
        squats = [
            await server.client.post(CHAT, json=body(squat_id, user("mine now")), headers=eve),
            await server.client.post(CHAT, json=body(chat_id, user("mine too")), headers=eve),
        ]
        bobs = await server.client.post(
            CHAT, json=body(chat_id, user("bob here")), headers=server.auth(user="bob")
        )
        first, _ = await post(server, body(chat_id, user("hello")))
        second, parts = await post(server, body(chat_id, user("again", id="u2")))
        resumed = await server.client.get(f"{CHAT}/{chat_id}/stream", headers=server.auth())
        alices = first.headers.get("x-session-id", "")
        eve_on_alices = await server.client.post(
            CHAT, json=body(alices, user("let me in")), headers=eve
        )
        sessions = {
            "eve": [r.headers.get("x-session-id") for r in (*squats, eve_on_alices)],
            "bob": bobs.headers.get("x-session-id"),
        }
        alice_said = await said(server, alices)
        eve_reads = await server.client.get(f"/v1/sessions/{alices}", headers=eve)

    assert [r.status_code for r in (*squats, bobs, first, second, eve_on_alices)] == [200] * 6
    assert second.headers["x-session-id"] == alices and text(parts) == "Noted."
    assert resumed.status_code == 204  # nothing runs in Alice's chat: not a 404
    assert alice_said == ["hello", "again"]  # no one else's message in her chat
    assert alices not in (*sessions["eve"], sessions["bob"], chat_id)
    eves_threads = {squat_id, chat_id, alices}  # one thread when squat_id is chat_id
    assert len(set(sessions["eve"])) == len(eves_threads)  # each thread its own session
    assert sessions["bob"] not in sessions["eve"]
    assert eve_reads.status_code == 404


async def test_a_uuid_continues_only_the_users_own_session(make_server: ServerFactory) -> None:
    """A chat id that is the id of a session the user has (from ``/v1/chat``, or the one an
    earlier Bosun derived from the chat id) goes on in it; for anyone else it is a new chat."""
    async with make_server(noted()) as server:
        owned = await server.client.post(
            "/v1/chat", json={"message": "from the API"}, headers=server.auth(role="owner")
        )
        api_session = owned.json()["session_id"]
        legacy = legacy_session_id(ORG, "alice", "old-chat")
        await server.store.sessions.create(
            org_id=ORG, user_id="alice", session_id=legacy, title="old", agent=None
        )
        by_id, _ = await post(server, body(api_session, user("go on")))
        old_chat, _ = await post(server, body("old-chat", user("still here")))
        staff = await server.client.post(
            CHAT,
            json=body(api_session, user("staff")),
            headers=server.auth(user="sam", role="staff"),
        )
        alice_said = await said(server, api_session)

    assert by_id.headers["x-session-id"] == api_session
    assert old_chat.headers["x-session-id"] == legacy
    assert staff.status_code == 200 and staff.headers["x-session-id"] != api_session
    assert alice_said == ["from the API", "go on"]


async def test_first_messages_racing_in_a_new_chat_share_its_session(
    make_server: ServerFactory,
) -> None:
    async with make_server(noted()) as server:
        enqueue = {"name": "Default", "double_texting": "enqueue"}  # else all but one are 409
        owner = server.auth(role="owner")
        assert (
            await server.client.put("/v1/agents/default", json=enqueue, headers=owner)
        ).is_success
        raced = await asyncio.gather(
            *(post(server, body("race", user(f"hi {i}", id=f"u{i}"))) for i in range(4))
        )
        session_id = await session_of(server, "race")
        alice_said = await said(server, session_id)

    assert [r.status_code for r, _ in raced] == [200] * 4
    assert {r.headers["x-session-id"] for r, _ in raced} == {session_id}
    assert sorted(alice_said) == [f"hi {i}" for i in range(4)]


async def test_resume_replays_the_running_turn_and_is_204_when_none(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=slow_model(6, 0.1))) as server:
        headers = server.auth()
        nothing = await server.client.get(f"{CHAT}/never-used/stream", headers=headers)
        posting = asyncio.create_task(post(server, body("drop", user("go"))))
        for _ in range(250):  # until a few words are in
            log = await server.store.log.read(await session_of(server, "drop"))
            if sum(e.type == "text_delta" for e in log) >= 2:
                break
            await asyncio.sleep(0.02)
        running = await server.store.sessions.running_turns(await session_of(server, "drop"))
        resumed = await server.client.get(f"{CHAT}/drop/stream", headers=headers)
        _, original = await posting
        after = await server.client.get(f"{CHAT}/drop/stream", headers=headers)

    assert nothing.status_code == 204 and nothing.content == b""
    assert running, "the turn was still running when the client came back"
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
    replay = parse(resumed.text)
    assert replay[0]["messageId"] == original[0]["messageId"]  # the same message, replaced
    assert text(replay) == text(original) == "w0 w1 w2 w3 w4 w5 "
    assert replay[-1]["messageMetadata"] == {"status": "completed"}
    assert after.status_code == 204


def _deletes() -> TurnModels:
    """A tool plan whose one step deletes two workouts in one message: two confirmations."""
    plan = {"strategy": "tool", "reasoning": "test", "steps": [
        {"id": "s1", "goal": DELETE, "tools": ["workouts.delete"]}]}  # fmt: skip
    model = ScriptedModel([
        {"match": "You are the planner", "text": json.dumps(plan)},
        {"match": DELETE, "tool_calls": [
            {"id": "t_engine", "name": "workouts_delete", "input": {"workout_id": ENGINE}},
            {"id": "t_tempo", "name": "workouts_delete", "input": {"workout_id": TEMPO}}]},
        {"match": DELETE, "text": "Deleted one, kept the other."},
    ])  # fmt: skip
    return TurnModels(planner=model, executor=model)


def answered(first: list[dict[str, Any]], *answers: tuple[str, Any]) -> dict[str, Any]:
    """The client's assistant message after the user answered its calls: the parts it
    built from ``first``, with each call's answer (an approval or an output)."""
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    for call in of(first, "tool-input-available"):
        part = {"type": "dynamic-tool", "toolName": call["toolName"], "toolCallId":
                call["toolCallId"], "state": "input-available", "input": call["input"]}  # fmt: skip
        for call_id, answer in answers:
            if call_id == call["toolCallId"] and isinstance(answer, bool):
                part |= {"state": "approval-responded",
                         "approval": {"id": call_id, "approved": answer}}  # fmt: skip
            elif call_id == call["toolCallId"]:
                part |= {"state": "output-available", "output": answer}
        parts.append(part)
    return {"id": first[0]["messageId"], "role": "assistant", "parts": parts}


async def test_approve_one_and_deny_the_other_in_one_request(make_server: ServerFactory) -> None:
    async with make_server(_deletes()) as server:
        await seed_demo(server.store, ORG)
        _, first = await post(server, body("two", user(DELETE)))
        reply = answered(first, ("t_engine", True), ("t_tempo", False))
        response, parts = await post(server, body("two", user(DELETE), reply))
        again, _ = await post(server, body("two", user(DELETE), reply))
        left = await workouts(server)
        rows = [await server.store.tool_executions.latest(c, session_id=response.headers[
            "x-session-id"]) for c in ("t_engine", "t_tempo")]  # fmt: skip

    assert [p["toolCallId"] for p in of(first, "tool-approval-request")] == ["t_engine", "t_tempo"]
    assert first[-1]["finishReason"] == "tool-calls"
    assert response.status_code == 200, response.text
    assert parts[0]["messageId"] == first[0]["messageId"]  # the same message goes on
    assert of(parts, "tool-output-denied") == [
        {"type": "tool-output-denied", "toolCallId": "t_tempo"}
    ]
    [ran] = of(parts, "tool-output-available")
    assert ran["toolCallId"] == "t_engine" and ran["output"]["deleted"] is True
    assert not of(parts, "tool-input-available")  # the client has those parts already
    assert text(parts) == "Deleted one, kept the other." and parts[-1]["finishReason"] == "stop"
    assert ENGINE not in left and TEMPO in left
    assert [r.status for r in rows if r] == ["succeeded", "rejected_by_user"]
    # The same answers again: the first answer stands.
    assert again.status_code == 409 and again.json()["error"]["code"] == "tool_already_resolved"


async def test_a_request_that_answers_nothing_is_409(make_server: ServerFactory) -> None:
    async with make_server(_deletes()) as server:
        await seed_demo(server.store, ORG)
        _, first = await post(server, body("none", user(DELETE)))
        unanswered = answered(first)
        response, _ = await post(server, body("none", user(DELETE), unanswered))
        # System messages are left out: with nothing else, there is nothing to reply to.
        system = {"id": "s", "role": "system", "parts": [{"type": "text", "text": "Be brief."}]}
        only_system, _ = await post(server, body("none", system))
        no_chat, _ = await post(server, body("never-used", system))
    for refused in (response, only_system):
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "nothing_to_answer"
    assert no_chat.status_code == 404


async def test_ai_sdk_5_gets_data_confirmations_and_answers_with_tool_outputs(
    make_server: ServerFactory,
) -> None:
    async with make_server(_deletes()) as server:
        await seed_demo(server.store, ORG)
        v5 = {"ai_sdk": 5}
        _, first = await post(server, body("five", user(DELETE)), params=v5)
        reply = answered(first, ("t_engine", {"approved": True}), ("t_tempo", {"approved": False}))
        _, parts = await post(server, body("five", user(DELETE), reply), params=v5)
        left = await workouts(server)

    assert not of(first, "tool-approval-request")
    confirmations = of(first, "data-confirmation")
    assert [p["id"] for p in confirmations] == ["confirmation-t_engine", "confirmation-t_tempo"]
    assert confirmations[0]["data"] == {
        "tool_use_id": "t_engine", "tool": "workouts.delete", "input": {"workout_id": ENGINE},
        "confirm": "destructive",
    }  # fmt: skip
    assert "finishReason" not in first[-1]  # ai 5's finish part has none
    assert not of(parts, "tool-output-denied")  # ai 5 has no such part: an error instead
    [declined] = of(parts, "tool-output-error")
    assert declined["toolCallId"] == "t_tempo" and "declined" in declined["errorText"]
    assert ENGINE not in left and TEMPO in left
    for part in first + parts:
        allowed = {"id", "data"} if part["type"].startswith("data-") else AI_SDK_5_FIELDS[
            part["type"]]  # fmt: skip
        assert set(part) - {"type"} <= allowed, part


async def test_a_question_is_answered_by_the_next_user_message(make_server: ServerFactory) -> None:
    ask = ToolCall(id="q1", name="message_ask_user", input={"question": "Which day?",
                                                           "options": ["Mon", "Tue"]})  # fmt: skip
    notify = ToolCall(id="n1", name="message_notify_user", input={"message": "Booked Monday."})
    idle = ToolCall(id="i1", name="agent_idle", input={"reason": "done"})
    replies = iter([Reply(tool_calls=(ask,)), Reply(tool_calls=(notify,)),
                    Reply(tool_calls=(idle,))])  # fmt: skip
    planner = FunctionModel(lambda _r: '{"strategy": "simple", "reasoning": "chat"}')
    executor = FunctionModel(lambda _r: next(replies))
    async with make_server(TurnModels(planner=planner, executor=executor, merger=None)) as server:
        await seed_demo(server.store, ORG)
        trainer = {"handle": "trainer", "name": "Trainer", "tools": [], "loop": "forced_tools"}
        made = await server.client.post(
            "/v1/agents", json=trainer, headers=server.auth(role="owner")
        )
        assert made.status_code == 201, made.text
        _, first = await post(server, body("q", user("Book me in"), agent="trainer"))
        history = [user("Book me in"), {"id": first[0]["messageId"], "role": "assistant",
                                        "parts": []}, user("Monday", id="u2")]  # fmt: skip
        _, second = await post(server, body("q", *history, agent="trainer"))

    [question] = of(first, "data-question")
    assert question["id"] == "question-q1"
    assert question["data"] == {"tool_use_id": "q1", "question": "Which day?",
                                "options": ["Mon", "Tue"]}  # fmt: skip
    assert first[-1]["messageMetadata"] == {"status": "suspended"}
    turn_id = first[0]["messageMetadata"]["turnId"]
    # The same turn goes on, in a new assistant message after the user's answer.
    assert second[0]["messageMetadata"]["turnId"] == turn_id
    assert second[0]["messageId"].startswith(f"{turn_id}:")
    assert text(second) == "Booked Monday."
    assert second[-1]["messageMetadata"] == {"status": "completed"}


async def test_an_idempotency_key_retry_reattaches_to_the_same_turn(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=ScriptedModel(["Once."]))) as server:
        key = {"Idempotency-Key": "retry-1"}
        _, first = await post(server, body("idem", user("hi")), headers=key)
        _, retry = await post(server, body("idem", user("hi")), headers=key)
        turns = await server.store.sessions.turns(await session_of(server, "idem"))

    assert retry[0]["messageId"] == first[0]["messageId"]
    assert text(retry) == text(first) == "Once."
    assert len(turns) == 1


def _event(seq: int, data: dict[str, Any]) -> StoredEvent:
    return StoredEvent("s", seq, str(data["type"]), data, "t", datetime.now(UTC))


def _parts(raw: bytes) -> list[dict[str, Any]]:
    return parse(raw.decode() + "data: [DONE]\n\n")


def test_text_a_message_reset_abandoned_is_left_out_of_a_replay() -> None:
    deltas = [_event(5, {"type": "text_delta", "delta": "Hel"}),
              _event(6, {"type": "text_delta", "delta": "lo wor"}),
              _event(7, {"type": "message_reset", "message_id": "m", "reason": "takeover",
                         "from_seq": 5}),
              _event(8, {"type": "text_delta", "delta": "Hello world"})]  # fmt: skip
    replay = _parts(_Writer("m", "s", "t").write(deltas))
    assert text(replay) == "Hello world"
    live = _Writer("m", "s", "t")
    parts = [p for batch in ([deltas[:2]], [deltas[2:]]) for p in _parts(live.write(*batch))]
    # Sent text cannot be taken back; what comes again is a part of its own.
    assert kinds(parts) == ["text-start", "text-delta", "text-delta", "text-end",
                            "text-start", "text-delta"]  # fmt: skip
