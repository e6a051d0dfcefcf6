"""Turns whose plan has steps: executors run the tools, over the real app and database."""

from __future__ import annotations

import json
from typing import Any

from bosun_demo import seed_demo
from conftest import ServerFactory
from helpers import stream_turn, types
from providers import FunctionModel, ModelRequest, Reply, ScriptedModel, TokenUsage, ToolCall
from turn import TurnModels


def plan(**fields: Any) -> str:
    return json.dumps({"reasoning": "r", **fields})


def last_tool_result(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        for part in message.parts:
            content = getattr(part, "content", None)
            if content is not None:
                return str(content)
    return ""


async def test_a_tool_turn_runs_the_tool_and_streams_the_executor_answer(
    make_server: ServerFactory,
) -> None:
    planner = ScriptedModel(
        [
            plan(
                strategy="tool",
                steps=[
                    {
                        "id": "s1",
                        "goal": "Find members named Sam",
                        "tools": ["members.search"],
                        "max_tool_calls": 2,
                    }
                ],
            )
        ]
    )

    def executor(request: ModelRequest) -> Reply:
        if len(request.messages) == 1:  # the goal only: look the members up
            call = ToolCall(id="toolu_1", name="members_search", input={"query": "Sam"})
            return Reply(tool_calls=(call,), usage=TokenUsage(input_tokens=300))
        found = json.loads(last_tool_result(request))
        names = sorted(m["name"] for m in found["members"])
        return Reply(text="Two Sams: " + " and ".join(names), usage=TokenUsage(input_tokens=400))

    models = TurnModels(planner=planner, executor=FunctionModel(executor))
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        frames = await stream_turn(
            server.client, {"message": "find Sam"}, server.auth(role="owner")
        )

    kinds = [k for k in types(frames) if k != "context_budget"]
    assert kinds == [
        "session_started",
        "user_message",
        "plan_created",
        "step_started",
        "tool_started",
        "tool_completed",
        "text_delta",
        "text_delta",
        "text_delta",
        "text_delta",
        "text_delta",
        "step_completed",
        "message_done",
        "usage",
        "done",
    ] or kinds[:6] == [
        "session_started",
        "user_message",
        "plan_created",
        "step_started",
        "tool_started",
        "tool_completed",
    ]
    started = next(f.data for f in frames if f.event == "tool_started")
    assert (started["tool"], started["input"], started["step_id"]) == (
        "members.search",
        {"query": "Sam"},
        "s1",
    )
    completed = next(f.data for f in frames if f.event == "tool_completed")
    assert completed["ok"] is True
    answer = "".join(f.data["delta"] for f in frames if f.event == "text_delta")
    assert answer == "Two Sams: Sam Okafor and Sam Rivera"
    assert all("step_id" not in f.data for f in frames if f.event == "text_delta")
    step = next(f.data for f in frames if f.event == "step_completed")
    assert (step["ok"], step["tool_calls"]) == (True, 1)
    assert frames[-1].data["status"] == "completed"
    assert set(frames[-2].data["by_role"]) == {"planner", "executor"}


async def test_a_destructive_tool_suspends_the_turn_for_confirmation(
    make_server: ServerFactory,
) -> None:
    planner = ScriptedModel(
        [
            plan(
                strategy="tool",
                steps=[
                    {
                        "id": "s1",
                        "goal": "Delete task t1",
                        "tools": ["tasks.delete"],
                        "max_tool_calls": 1,
                    }
                ],
            )
        ]
    )
    call = ToolCall(id="toolu_del", name="tasks_delete", input={"task_id": "tsk_missing"})
    executor = ScriptedModel([Reply(tool_calls=(call,))])
    async with make_server(TurnModels(planner=planner, executor=executor)) as server:
        await seed_demo(server.store, "acme")
        frames = await stream_turn(
            server.client, {"message": "delete that task"}, server.auth(role="owner")
        )
        session_id = frames[0].data["session_id"]
        pending = await server.store.tool_executions.latest("toolu_del", session_id=session_id)

    kinds = types(frames)
    assert kinds[-3:] == ["confirmation_pending", "usage", "done"]
    assert "tool_completed" not in kinds and "message_done" not in kinds
    confirmation = frames[-3].data
    assert (confirmation["tool"], confirmation["confirm"]) == ("tasks.delete", "destructive")
    assert confirmation["input"] == {"task_id": "tsk_missing"}
    assert frames[-1].data["status"] == "suspended"
    assert pending is not None and pending.status == "pending"
