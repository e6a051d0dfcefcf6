"""The session log as the model's native transcript, over real HTTP (SQLite and
PostgreSQL) with every role on the fake Anthropic server, whose captured request bodies
are what is checked: a later turn carries the earlier turns' tool calls and results as
``tool_use``/``tool_result`` blocks (ids kept), and a long session stays in budget by
compaction while the ids it created stay known."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, Server
from context import _transcript as transcript
from providers import ToolCall
from providers._anthropic import AnthropicModel
from providers.fake import Exchange, FakeProvider, FakeServer, anthropic_reply

TASK_ID = re.compile(r"task_[0-9a-f]{12}")
Executor = Callable[[int, int, dict[str, Any]], Exchange]
"""(turn index, executor call of that turn, request body) -> the reply."""


def role_of(body: dict[str, Any]) -> str:
    """Which role a request is from, by what only that role sends."""
    system = json.dumps(body.get("system", []))
    if body.get("tool_choice") == {"type": "tool", "name": "plan"}:
        return "planner"
    if "compress chat histories" in system:
        return "summariser"
    if "short title" in system:
        return "title"
    return "executor"


class Script:
    """A stand-in model for every role: the planner plans ``plan(turn)``, the summariser
    lists the task ids its transcript shows (what a real summary is asked to keep), the
    executor replies ``executor(turn, call, body)``. Every body is kept with its role."""

    def __init__(self, plan: Callable[[int], dict[str, Any]], executor: Executor) -> None:
        self.plan, self.executor = plan, executor
        self.turn, self.call = -1, 0
        self.bodies: list[tuple[int, str, dict[str, Any]]] = []

    def respond(self, body: Any) -> tuple[bytes, ...]:
        role = role_of(body)
        if role == "planner":
            self.turn, self.call = self.turn + 1, 0
        self.bodies.append((self.turn, role, body))
        match role:
            case "planner":
                plan = ToolCall(id=f"plan{self.turn}", name="plan", input=self.plan(self.turn))
                return anthropic_reply(tool_calls=[plan]).chunks
            case "summariser":
                ids = sorted(set(TASK_ID.findall(json.dumps(body["messages"]))))
                return anthropic_reply(text=f"Tasks created so far: {', '.join(ids)}.").chunks
            case "title":
                return anthropic_reply(text="Tasks").chunks
        self.call += 1
        return self.executor(self.turn, self.call - 1, body).chunks

    def sent(self, turn: int, role: str = "executor") -> list[dict[str, Any]]:
        return [body for t, r, body in self.bodies if t == turn and r == role]


@contextlib.asynccontextmanager
async def served(db_url: str, script: Script) -> AsyncIterator[Server]:
    """The app with every role on the fake Anthropic server answering from ``script``."""
    provider = FakeProvider().enqueue(*(Exchange(respond=script.respond) for _ in range(400)))
    with FakeServer(provider) as fake:
        settings = Settings(
            toolsets=[DEMO], database_url=db_url, jwt_secret=JWT_SECRET,
            models={"default": "anthropic:claude-haiku-4-5"},  # type: ignore[arg-type]
            providers={"anthropic_api_key": "sk-test", "anthropic_base_url": fake.url,  # type: ignore[arg-type]
                       "max_retries": 0},
            limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
        )  # fmt: skip
        models = build_models(settings)
        async with Server(settings, models) as server:
            await seed_demo(server.store, "acme")
            yield server
        assert isinstance(models.executor, AnthropicModel)
        await models.executor.aclose()


def tool_plan(*tools: str) -> dict[str, Any]:
    step = {"id": "s1", "goal": "Do what the user asks", "tools": list(tools)}
    return {"strategy": "tool", "reasoning": "one tool step", "steps": [step]}


def blocks(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == kind
    ]


def creates(turn: int, call: int, body: dict[str, Any]) -> Exchange:
    """Each turn creates one task (``toolu_c<turn>``), then says "Done." (never the id)."""
    del body
    if call == 0:
        create = ToolCall(id=f"toolu_c{turn}", name="tasks_create", input={"title": f"T{turn}"})
        return anthropic_reply(tool_calls=[create])
    return anthropic_reply(text="Done.")


async def chat(server: Server, text: str, session_id: str | None = None) -> dict[str, Any]:
    body = {"message": text, **({"session_id": session_id} if session_id else {})}
    reply = await server.client.post("/v1/chat", json=body, headers=server.auth(role="owner"))
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    assert data["status"] == "completed", data
    return data


async def test_turn_two_carries_turn_ones_tool_call_and_result_natively(db_url: str) -> None:
    def executor(turn: int, call: int, body: dict[str, Any]) -> Exchange:
        if turn == 0 or call:
            return creates(turn, call, body)
        # "now complete it": only the transcript says which task "it" is
        [made] = TASK_ID.findall(json.dumps(blocks(body, "tool_result")))
        done = ToolCall(id="toolu_done", name="tasks_complete", input={"task_id": made})
        return anthropic_reply(tool_calls=[done])

    plans = [tool_plan("tasks.create"), tool_plan("tasks.complete")]
    script = Script(lambda turn: plans[turn], executor)
    async with served(db_url, script) as server:
        first = await chat(server, "Add a task: call the plumber")
        second = await chat(server, "now complete it", first["session_id"])
        log = await server.store.log.read(first["session_id"])

    [created] = [
        e.data for e in log if e.type == "tool_completed" and e.turn_id == first["turn_id"]
    ]
    task_id = created["output"]["id"]
    body = script.sent(1)[0]  # turn 2's first executor request
    [use] = [b for b in blocks(body, "tool_use") if b["id"] == "toolu_c0"]
    assert use == {"type": "tool_use", "id": "toolu_c0", "name": "tasks_create",
                   "input": {"title": "T0"}}  # fmt: skip
    [result] = [b for b in blocks(body, "tool_result") if b["tool_use_id"] == "toolu_c0"]
    assert task_id in json.dumps(result) and result["is_error"] is False
    # each tool_use is answered in the very next message, and the new message comes last
    messages = body["messages"]
    at = next(i for i, m in enumerate(messages) if use in m["content"])
    assert messages[at]["role"] == "assistant" and result in messages[at + 1]["content"]
    assert messages[-1]["content"][-1]["text"] == "Do what the user asks"
    completed = [e.data for e in log if e.type == "tool_completed"][-1]
    assert completed["ok"] and completed["output"] == {**created["output"], "done": True}
    assert second["answer"] == "Done."
    # The planner is shown the call and its outcome in compact form, ids kept
    planner = json.dumps(script.sent(1, "planner")[0]["messages"])
    assert "[tool call tasks_create id=toolu_c0" in planner and task_id in planner
    assert '"tool_use"' not in planner


async def test_a_thirty_turn_session_keeps_turn_threes_id_by_compaction(db_url: str) -> None:
    script = Script(lambda _turn: tool_plan("tasks.create"), creates)
    async with served(db_url, script) as server:
        session_id = (await chat(server, "Add task 1"))["session_id"]
        for number in range(2, 31):
            await chat(server, f"Add task {number}", session_id)
        log = await server.store.log.read(session_id)

    made = [e.data["output"]["id"] for e in log if e.type == "tool_completed"]
    assert len(made) == 30
    summaries = [e for e in log if e.type == "history_summarised"]
    assert len(summaries) >= 3  # compaction, again and again
    last = script.sent(29)[0]  # turn 30's first executor request
    sent = json.dumps(last["messages"])
    assert made[2] in sent  # turn 3's task: known through the summary
    assert '"toolu_c2"' not in sent  # its call itself was compacted away
    assert "toolu_c28" in sent  # the latest turns are native
    reports = [e.data["report"] for e in log if e.type == "context_budget"]
    conversations = [s for r in reports for s in r["sections"] if s["name"] == "conversation"]
    assert conversations and all(s["used"] <= s["allocated"] for s in conversations)
    cuts = [c for r in reports for c in r["cuts"] if c["section"] == "conversation"]
    assert not [c for c in cuts if c["action"] == "dropped"], cuts  # compaction sufficed
    sizes = [len(json.dumps(script.sent(turn)[0]["messages"])) for turn in range(30)]
    # flat once compaction runs: the last ten turns send no more than the ten before them
    assert max(sizes[20:]) <= 1.2 * max(sizes[10:20]), sizes


async def test_a_forced_loops_second_turn_carries_the_first_turns_calls(db_url: str) -> None:
    def executor(turn: int, call: int, body: dict[str, Any]) -> Exchange:
        del body
        loop = [
            ToolCall(id=f"toolu_c{turn}", name="tasks_create", input={"title": f"T{turn}"}),
            ToolCall(id=f"toolu_n{turn}", name="message_notify_user", input={"message": "Added."}),
            ToolCall(id=f"toolu_i{turn}", name="agent_idle", input={"reason": "done"}),
        ]
        return anthropic_reply(tool_calls=[loop[call]])

    simple = {"strategy": "simple", "reasoning": "chat"}
    script = Script(lambda _turn: simple, executor)
    agent = {"handle": "keeper", "name": "Keeper", "tools": ["tasks.create"],
             "loop": "forced_tools"}  # fmt: skip
    async with served(db_url, script) as server:
        made = await server.client.post("/v1/agents", json=agent, headers=server.auth(role="owner"))
        assert made.status_code == 201, made.text
        first = await server.client.post(
            "/v1/chat", json={"message": "Add a task", "agent": "keeper"},
            headers=server.auth(role="owner"),
        )  # fmt: skip
        session_id = first.json()["session_id"]
        await chat(server, "And another", session_id)

    body = script.sent(1)[0]
    uses = [b["id"] for b in blocks(body, "tool_use")]
    results = [b["tool_use_id"] for b in blocks(body, "tool_result")]
    assert uses == results == ["toolu_c0", "toolu_n0", "toolu_i0"]
    assert body["tool_choice"]["type"] == "any"
    assert "The conversation so far" not in json.dumps(body)  # no plain-text digest


async def test_an_abbreviated_result_is_read_whole_with_the_read_tool(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript, "RESULT_CHARS", 40)  # any result over this is bulky
    monkeypatch.setattr(transcript, "_HEAD_CHARS", 12)

    def executor(turn: int, call: int, body: dict[str, Any]) -> Exchange:
        if turn == 0:
            return creates(turn, call, body)
        if call == 0:
            read = ToolCall(
                id="toolu_r", name="tool_results_read", input={"tool_use_id": "toolu_c0"}
            )
            return anthropic_reply(tool_calls=[read])
        return anthropic_reply(text="It is done.")

    script = Script(lambda _turn: tool_plan("tasks.create"), executor)
    async with served(db_url, script) as server:
        first = await chat(server, "Add a task")
        await chat(server, "What was its id again?", first["session_id"])
        log = await server.store.log.read(first["session_id"])

    task = next(e.data["output"] for e in log if e.type == "tool_completed")
    before, after = script.sent(1)
    assert "tool_results_read" in {tool["name"] for tool in before["tools"]}
    [shown] = [b for b in blocks(before, "tool_result") if b["tool_use_id"] == "toolu_c0"]
    assert task["id"] not in shown["content"] and "abbreviated" in shown["content"]
    [read] = [b for b in blocks(after, "tool_result") if b["tool_use_id"] == "toolu_r"]
    assert json.loads(read["content"])["output"] == task
    # the abbreviation is the same bytes in both requests (the cached prefix holds)
    assert [b for b in blocks(after, "tool_result") if b["tool_use_id"] == "toolu_c0"] == [shown]


async def test_a_direct_answer_after_tool_work_sees_it_natively(db_url: str) -> None:
    simple = {"strategy": "simple", "reasoning": "chat"}
    plans = [tool_plan("tasks.create"), simple]

    def executor(turn: int, call: int, body: dict[str, Any]) -> Exchange:
        return creates(turn, call, body) if turn == 0 else anthropic_reply(text="I added one.")

    script = Script(lambda turn: plans[turn], executor)
    async with served(db_url, script) as server:
        first = await chat(server, "Add a task")
        await chat(server, "Thanks! What did you just do?", first["session_id"])

    [answer] = script.sent(1)
    assert [b["id"] for b in blocks(answer, "tool_use")] == ["toolu_c0"]
    assert [b["tool_use_id"] for b in blocks(answer, "tool_result")] == ["toolu_c0"]
    # a provider refuses tool blocks in a request without tools: the read tool, off
    assert [t["name"] for t in answer["tools"]] == ["tool_results_read"]
    assert answer["tool_choice"] == {"type": "none"}
