"""A forced-tools agent over real HTTP (SQLite and PostgreSQL): the whole turn is one
forced loop; message_ask_user suspends it and the user's next message answers it and
the same turn goes on; a reply without a tool call, or the iteration limit, fails it
with a clear error code."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from bosun_demo import seed_demo
from conftest import Server, ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest, Reply, ToolCall, ToolResult
from turn import TurnModels

TRAINER: dict[str, Any] = {
    "handle": "trainer",
    "name": "Trainer",
    "tools": ["programs.list"],  # the communication tools come whatever this says
    "loop": "forced_tools",
}
ASK = ToolCall(
    id="q1", name="message_ask_user", input={"question": "Which days?", "options": ["Mon", "Tue"]}
)
NOTIFY = ToolCall(id="n1", name="message_notify_user", input={"message": "Booked for Monday."})
IDLE = ToolCall(id="i1", name="agent_idle", input={"reason": "done"})
LIST = ToolCall(id="l1", name="programs_list", input={})


def setup(replies: Sequence[Reply]) -> tuple[TurnModels, list[ModelRequest]]:
    """A planner that plans ``simple`` (the agent turns it into one loop) and an executor
    replying ``replies`` in order; its requests are kept."""
    seen: list[ModelRequest] = []

    def executor(request: ModelRequest) -> Reply:
        seen.append(request)
        return replies[len(seen) - 1]

    planner: Callable[[ModelRequest], str] = lambda _r: json.dumps(  # noqa: E731
        {"strategy": "simple", "reasoning": "chat"}
    )
    models = TurnModels(
        planner=FunctionModel(planner), executor=FunctionModel(executor), merger=None
    )
    return models, seen


async def open_trainer(server: Server, body: dict[str, Any] = TRAINER) -> None:
    await seed_demo(server.store, "acme")
    made = await server.client.post("/v1/agents", json=body, headers=server.auth(role="owner"))
    assert made.status_code == 201, made.text


async def test_a_question_suspends_and_the_next_message_answers_it_in_the_same_turn(
    make_server: ServerFactory,
) -> None:
    replies = [Reply(tool_calls=(LIST,)), Reply(tool_calls=(ASK,)),
               Reply(tool_calls=(NOTIFY,)), Reply(tool_calls=(IDLE,))]  # fmt: skip
    models, seen = setup(replies)
    async with make_server(models) as server:
        await open_trainer(server)
        frames = await stream_turn(
            server.client, {"message": "Book me in", "agent": "trainer"}, server.auth()
        )
        session_id, turn_id = frames[0].data["session_id"], frames[0].data["turn_id"]
        reply = await server.client.post(
            "/v1/chat", json={"message": "Monday", "session_id": session_id}, headers=server.auth()
        )
        turns = await server.store.sessions.turns(session_id)

    asked = next(f.data for f in frames if f.event == "question_pending")
    assert asked == {"tool_use_id": "q1", "question": "Which days?", "options": ["Mon", "Tue"],
                     "type": "question_pending"}  # fmt: skip
    assert frames[-1].data["status"] == "suspended"
    body = reply.json()
    assert reply.status_code == 200, body
    assert (body["turn_id"], body["status"], body["answer"]) == (
        turn_id, "completed", "Booked for Monday.",
    )  # fmt: skip
    kinds = [e["type"] for e in body["events"]]
    assert kinds[:2] == ["user_message", "tool_resolved"] and kinds[-1] == "done"
    assert body["events"][1]["data"]["decision"] == "answered"
    assert [t.id for t in turns] == [turn_id]  # no new turn: the old one went on
    # The question's result is the user's message, and every call forced a tool.
    answer = seen[2].messages[-1].parts[0]
    assert isinstance(answer, ToolResult) and answer.content == '{"answer":"Monday"}'
    assert {r.tool_choice for r in seen} == {"any"}
    assert {"message_notify_user", "message_ask_user", "agent_idle"} <= {
        t.name for t in seen[0].tools
    }


async def test_a_reply_without_a_tool_call_fails_the_turn_no_tool_call(
    make_server: ServerFactory,
) -> None:
    models, _ = setup([Reply(tool_calls=(LIST,)), Reply(text="Here you go!")])
    async with make_server(models) as server:
        await open_trainer(server)
        reply = await server.client.post(
            "/v1/chat", json={"message": "Book me in", "agent": "trainer"}, headers=server.auth()
        )

    body = reply.json()
    assert body["status"] == "failed" and body["error"]["code"] == "no_tool_call"
    assert body["answer"] == ""  # its free text never reached the user


async def test_the_iteration_limit_fails_the_turn_with_max_iterations(
    make_server: ServerFactory,
) -> None:
    models, seen = setup([Reply(tool_calls=(ToolCall(id=f"l{i}", name="programs_list",
                                                     input={}),)) for i in range(5)])  # fmt: skip
    async with make_server(models) as server:
        await open_trainer(server, {**TRAINER, "limits": {"max_iterations": 3}})
        reply = await server.client.post(
            "/v1/chat", json={"message": "Book me in", "agent": "trainer"}, headers=server.auth()
        )

    body = reply.json()
    assert body["status"] == "failed" and body["error"]["code"] == "max_iterations"
    assert "3 iterations" in body["error"]["message"] and len(seen) == 3
