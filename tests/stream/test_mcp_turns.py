"""MCP tools end to end: a real MCP server (tests/tools/mcp_server.py) over stdio and
streamable HTTP, an agent granted its toolset, chat turns over the real app and database.

The agent plans with the server's tools and calls them through Bosun's runner (the SSE
stream, the event log and the structured log show it); a destructive tool waits for the
user's approval and then runs once; ungranted tools are never offered; a server killed
mid-turn becomes a typed tool error, and the next turn uses the server again once it is
back. An HTTP toolset's secret header never reaches the logs, the events or the stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from structlog.testing import capture_logs

from conftest import Server, ServerFactory
from helpers import Frame, stream_post, stream_turn, types
from mcp_testing import (
    ALLOW_STDIO_ENV,
    SECRET_HEADER,
    HttpMcpServer,
    calls,
    kill_server,
    stdio_command,
    wait_for,
)
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import McpToolsetSpec
from store._models import AuditLogRow
from turn import TurnModels


@pytest.fixture(autouse=True)
def _stdio_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The served app may run the test MCP server over stdio (off by default)."""
    for name, value in ALLOW_STDIO_ENV.items():
        monkeypatch.setenv(name, value)


GRANTED = ["tickets.search_tickets", "tickets.create_ticket", "tickets.delete_ticket"]
HELPDESK = {"handle": "helpdesk", "name": "Helpdesk", "tools": [*GRANTED, "tickets.slow_echo"]}
Script = dict[str, list[Reply]]


def plan_for(goal: str, tools: list[str]) -> str:
    step = {"id": "s1", "goal": goal, "tools": tools, "max_tool_calls": 6}
    return json.dumps({"reasoning": "r", "strategy": "tool", "steps": [step]})


def call(tool_use_id: str, name: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(id=tool_use_id, name=name, input=args),))


@dataclass
class Agent:
    """Scripted models: the planner plans one step (by a word of the user's message), the
    executor replies in order for that step's goal."""

    plans: dict[str, tuple[str, list[str]]]
    script: Script
    planner_requests: list[ModelRequest]
    executor_requests: list[ModelRequest]

    def models(self) -> TurnModels:
        def planner(request: ModelRequest) -> Reply:
            self.planner_requests.append(request)
            asked = _text(request.messages[-1])
            return Reply(text=plan_for(*next(p for k, p in self.plans.items() if k in asked)))

        def executor(request: ModelRequest) -> Reply:
            self.executor_requests.append(request)
            # the step's goal is the last message naming one (earlier turns come before it)
            at, goal = next(
                (i, g)
                for i in reversed(range(len(request.messages)))
                for g in self.script
                if g in _text(request.messages[i])
            )
            replies = self.script[goal]
            return replies[min((len(request.messages) - at - 1) // 2, len(replies) - 1)]

        return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


def agent(plans: dict[str, tuple[str, list[str]]], script: Script) -> Agent:
    return Agent(plans, script, [], [])


def _text(message: Any) -> str:
    return " ".join(str(getattr(p, "text", getattr(p, "content", ""))) for p in message.parts)


@dataclass
class Toolset:
    transport: str
    state: Path
    secret: str | None = None
    http: HttpMcpServer | None = None

    async def restart(self) -> None:
        """An HTTP server comes back on its port; a stdio one is restarted by Bosun."""
        if self.http is not None:
            self.http = await HttpMcpServer(self.state, self.http.secret, self.http.port).start()


@asynccontextmanager
async def toolset(server: Server, transport: str, state: Path) -> AsyncIterator[Toolset]:
    """The org's ``tickets`` toolset (and an ungranted ``billing`` one) on the test server."""
    store = server.store.mcp_toolsets
    await store.put(
        "acme", "billing", McpToolsetSpec(transport="stdio", command=stdio_command(state))
    )
    if transport == "stdio":
        await store.put(
            "acme", "tickets", McpToolsetSpec(transport="stdio", command=stdio_command(state))
        )
        yield Toolset(transport, state)
        return
    made = Toolset(transport, state, secret="sk-mcp-" + uuid.uuid4().hex)
    assert made.secret is not None
    made.http = await HttpMcpServer(state, made.secret).start()
    try:
        spec = McpToolsetSpec(
            transport="http", url=made.http.url, headers={SECRET_HEADER: made.secret}
        )
        await store.put("acme", "tickets", spec)
        yield made
    finally:
        await made.http.kill()


async def start_agent(server: Server) -> None:
    made = await server.client.post("/v1/agents", json=HELPDESK, headers=server.auth(role="owner"))
    assert made.status_code == 201, made.text


async def chat(server: Server, message: str, session_id: str | None = None) -> list[Frame]:
    body: dict[str, Any] = {"message": message, "agent": "helpdesk"}
    if session_id:
        body["session_id"] = session_id
    return await stream_turn(server.client, body, server.auth(role="owner"))


def completed(frames: Sequence[Frame], tool_use_id: str) -> dict[str, Any]:
    return next(
        f.data
        for f in frames
        if f.event == "tool_completed" and f.data["tool_use_id"] == tool_use_id
    )


def status(frames: Sequence[Frame]) -> str:
    return str(frames[-1].data["status"])


def secrets_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_an_agent_plans_with_and_calls_its_mcp_tools(
    make_server: ServerFactory,
    transport: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    goal = "File the printer ticket"
    helpdesk = agent(
        {"file": (goal, ["tickets.create_ticket", "tickets.search_tickets"])},
        {goal: [
            call("tu_1", "tickets_create_ticket", title="Printer jam"),
            call("tu_2", "tickets_search_tickets", query="printer"),
            call("tu_3", "tickets_always_fails"),  # ungranted: never offered
            call("tu_4", "billing_search_tickets", query="x"),  # another toolset: ungranted
            Reply(text="Filed T-1."),
        ]},
    )  # fmt: skip
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state.json"
    async with (
        make_server(helpdesk.models(), secrets_key=secrets_key()) as server,
        toolset(server, transport, state) as tickets,
    ):
        await start_agent(server)
        with capture_logs() as logs:
            frames = await chat(server, "file a ticket: the printer is jammed")
        session = frames[0].data["session_id"]
        events = (await server.client.get(
            f"/v1/sessions/{session}/events", headers=server.auth(role="owner")
        )).json()["events"]  # fmt: skip
        directory = server.app.state["services"].agents
        kit = (await directory.setup(await directory.get("acme", "helpdesk"), org_id="acme")).kit

    catalogue = "\n".join(block.text for block in helpdesk.planner_requests[0].system)
    assert "tickets.create_ticket" in catalogue and "tickets.search_tickets" in catalogue
    assert "tickets.always_fails" not in catalogue and "billing." not in catalogue
    offered = {tool.name for tool in helpdesk.executor_requests[0].tools}
    # the step's tools, and the built-in reader of earlier results (docs/tools.md)
    assert offered == {"tickets_create_ticket", "tickets_search_tickets", "tool_results_read"}
    assert "billing.search_tickets" not in (kit.tools or ())  # only named toolsets are fetched
    assert "tickets.always_fails" not in kit.catalogue("owner").tools

    assert "confirmation_pending" not in types(frames)  # a write and a read run at once
    made = completed(frames, "tu_1")
    assert made["ok"] and made["output"] == {"id": "T-1", "title": "Printer jam", "priority": 3}
    found = completed(frames, "tu_2")
    assert found["ok"] and found["output"] == {"tickets": [made["output"]]}
    # Like a built-in tool it was not granted; a toolset it does not name is not there.
    assert completed(frames, "tu_3")["error"]["code"] == "tool_not_allowed"
    assert completed(frames, "tu_4")["error"]["code"] == "unknown_tool"
    assert status(frames) == "completed"
    assert [c["tool"] for c in calls(state)] == ["create_ticket", "search_tickets"]
    logged = [e for e in events if e["type"] in ("tool_started", "tool_completed")]
    assert [(e["type"], e["data"].get("tool"), e["data"]["tool_use_id"]) for e in logged][:4] == [
        ("tool_started", "tickets.create_ticket", "tu_1"), ("tool_completed", None, "tu_1"),
        ("tool_started", "tickets.search_tickets", "tu_2"), ("tool_completed", None, "tu_2"),
    ]  # fmt: skip
    executed = [log for log in logs if log["event"] == "tool.executed"]
    assert [(log["tool"], log["outcome"]) for log in executed][:2] == [
        ("tickets.create_ticket", "ok"), ("tickets.search_tickets", "ok"),
    ]  # fmt: skip
    if tickets.secret is not None:
        seen = [json.dumps([f.data for f in frames]), json.dumps(events), repr(logs), caplog.text]
        assert all(tickets.secret not in text for text in seen)


async def test_a_destructive_mcp_tool_runs_once_after_approval(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    goal = "Delete ticket T-1"
    helpdesk = agent(
        {"delete": (goal, ["tickets.delete_ticket"])},
        {goal: [call("tu_del", "tickets_delete_ticket", ticket_id="T-1"), Reply(text="Gone.")]},
    )
    state = tmp_path / "state.json"
    ticket = {"id": "T-1", "title": "Old", "priority": 3}
    state.write_text(json.dumps({"tickets": {"T-1": ticket}, "calls": [], "next_id": 2}))
    async with (
        make_server(helpdesk.models(), secrets_key=secrets_key()) as server,
        toolset(server, "stdio", state),
    ):
        await start_agent(server)
        first = await chat(server, "delete ticket T-1")
        session = first[0].data["session_id"]
        ran_before = calls(state, "delete_ticket")
        path = f"/v1/sessions/{session}/confirm/tu_del"
        resumed = await stream_post(
            server.client, path, {"approved": True}, server.auth(role="owner")
        )
        again = await server.client.post(
            path, json={"approved": True}, headers=server.auth(role="owner")
        )
        row = await server.store.tool_executions.latest("tu_del", session_id=session)
        async with server.store.db.read() as conn:
            audit = (await conn.execute(select(AuditLogRow.action, AuditLogRow.tool_use_id))).all()

    pending = next(f.data for f in first if f.event == "confirmation_pending")
    assert (pending["tool"], pending["input"]) == ("tickets.delete_ticket", {"ticket_id": "T-1"})
    assert status(first) == "suspended" and ran_before == []  # nothing ran before approval
    assert types(resumed)[:3] == ["tool_resolved", "tool_started", "tool_completed"]
    assert completed(resumed, "tu_del")["output"] == {"deleted": "T-1"}
    assert status(resumed) == "completed"
    assert again.status_code >= 400  # answered already: nothing runs again
    assert [c["args"] for c in calls(state, "delete_ticket")] == [{"ticket_id": "T-1"}]
    assert row is not None and row.status == "succeeded" and row.input == {"ticket_id": "T-1"}
    assert audit == [("mcp.tickets.delete_ticket", "tu_del")]


async def test_a_server_killed_mid_turn_is_a_tool_error_and_the_next_turn_uses_it_again(
    make_server: ServerFactory, transport: str, tmp_path: Path
) -> None:
    slow, find = "Echo slowly", "Find tickets"
    helpdesk = agent(
        {"echo": (slow, ["tickets.slow_echo"]), "find": (find, ["tickets.search_tickets"])},
        {
            slow: [call("tu_slow", "tickets_slow_echo", text="hi", seconds=30),
                   Reply(text="The ticket system is down.")],
            find: [call("tu_find", "tickets_search_tickets", query="printer"),
                   Reply(text="No tickets.")],
        },
    )  # fmt: skip
    state = tmp_path / "state.json"
    async with (
        make_server(helpdesk.models(), secrets_key=secrets_key()) as server,
        toolset(server, transport, state) as tickets,
    ):
        await start_agent(server)

        async def kill_when_called() -> None:
            await wait_for(lambda: calls(state, "slowEcho"), timeout_s=30)
            if tickets.http is not None:
                await tickets.http.kill()
            else:
                kill_server(state)

        killer = asyncio.create_task(kill_when_called())
        first = await chat(server, "echo hi slowly")
        await killer
        [down] = await server.app.state["services"].mcp.status("acme", ["tickets"])
        await tickets.restart()
        await asyncio.sleep(1.1)  # the pool's first backoff
        second = await chat(server, "find printer tickets", first[0].data["session_id"])

    failed = completed(first, "tu_slow")
    assert failed["ok"] is False and failed["error"]["code"] == "mcp_unavailable"
    assert status(first) == "completed"  # the turn went on without the tool
    assert down.state == "down"
    assert completed(second, "tu_find")["ok"] is True
    assert status(second) == "completed"
