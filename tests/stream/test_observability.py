"""Observability: typed turn and tool events, the scrubbed log output, and ``/metrics``.

The turns run over real HTTP against the real app and database, with Bosun's own logging
set-up (``configure_logging``, JSON) writing into a buffer, so the assertions read what an
operator's log would hold after the whole processor chain, the scrubber included.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from bosun.log import SCRUBBED, configure_logging
from bosun.settings import Settings
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from helpers import Frame, stream_turn, types
from providers import (
    FunctionModel,
    ModelRequest,
    Reply,
    ScriptedModel,
    TokenUsage,
    ToolCall,
    ToolResult,
)
from turn import TurnModels
from turn._observe import METRICS, Metrics, reset

PRICED = "claude-haiku-4-5"  # in the price table, so turns cost something
IDS = ("trace_id", "org_id", "session_id")


class Logs:
    """What the configured logging rendered: one JSON object per line."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    @property
    def text(self) -> str:
        return self.buffer.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.strip()]

    def named(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == event]


@pytest.fixture
def logs() -> Iterator[Logs]:
    """``configure_logging(fmt="json")`` as ``bosun serve`` does, rendering into a buffer
    (structlog and stdlib alike); the metrics start from zero. Restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    captured = Logs()
    configure_logging(fmt="json", level="info")
    # The same chain, into the buffer; no caching, so module loggers see the next set-up.
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=captured.buffer),
        cache_logger_on_first_use=False,
    )
    for handler in root.handlers:
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(captured.buffer)
    reset()
    try:
        yield captured
    finally:
        root.handlers = handlers
        root.setLevel(level)
        structlog.reset_defaults()
        reset()


def plan(goal: str, tool: str = "members.search") -> str:
    step = {"id": "s1", "goal": goal, "tools": [tool], "max_tool_calls": 2}
    return json.dumps({"reasoning": goal, "strategy": "tool", "steps": [step]})


def tool_turn(query: str, answer: str, *, careless: bool = False) -> TurnModels:
    """A planner that plans one ``members.search`` step, and an executor that searches for
    ``query`` and then answers ``answer``; both priced, the executor's input partly cached.
    A ``careless`` executor logs its request and reply under private keys, as a module
    might by mistake: the scrubber must catch it."""
    planner = ScriptedModel(
        [Reply(text=plan(f"Find {query}"), usage=TokenUsage(input_tokens=900, output_tokens=80))],
        name=PRICED,
        repeat=True,
    )
    ids = (f"toolu_search{n or ''}" for n in itertools.count())

    def executor(request: ModelRequest) -> Reply:
        if careless:
            structlog.get_logger("careless").info(
                "model.called", messages=repr(request.messages), text=answer, prompt=query
            )
        if not any(isinstance(p, ToolResult) for p in request.messages[-1].parts):  # the goal
            call = ToolCall(id=next(ids), name="members_search", input={"query": query})
            usage = TokenUsage(input_tokens=300, cache_read_tokens=700, output_tokens=20)
            return Reply(tool_calls=(call,), usage=usage)
        usage = TokenUsage(input_tokens=400, cache_read_tokens=600, output_tokens=30)
        return Reply(text=answer, usage=usage)

    return TurnModels(planner=planner, executor=FunctionModel(executor, name=PRICED))


async def settled(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until ``check()`` holds: a turn logs its end just after the client's ``done``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def usage_of(frames: list[Frame]) -> dict[str, Any]:
    return next(f.data for f in frames if f.event == "usage")


def session_of(frames: list[Frame]) -> str:
    return str(frames[0].data["session_id"])


async def test_a_tool_turn_logs_started_executed_and_completed_with_its_ids(
    make_server: ServerFactory, logs: Logs
) -> None:
    async with make_server(tool_turn("Sam", "Two Sams: Sam Okafor and Sam Rivera")) as server:
        await seed_demo(server.store, "acme")
        frames = await stream_turn(
            server.client, {"message": "find Sam"}, server.auth(role="owner", org="acme")
        )
    # The server has stopped: its turns have ended and logged.

    assert frames[-1].data["status"] == "completed"
    session_id, usage = session_of(frames), usage_of(frames)
    [started] = logs.named("turn.started")
    [executed] = logs.named("tool.executed")
    [completed] = logs.named("turn.completed")
    trace_id = started["trace_id"]
    for line in (started, executed, completed):
        assert (line["org_id"], line["session_id"], line["trace_id"]) == (
            "acme",
            session_id,
            trace_id,
        )
    assert started["resumed"] is False and started["turn_id"] == completed["turn_id"]
    assert {k: executed[k] for k in ("tool", "router", "action", "tool_use_id", "outcome")} == {
        "tool": "members.search",
        "router": "members",
        "action": "search",
        "tool_use_id": "toolu_search",
        "outcome": "ok",
    }
    assert executed["turn_id"] == started["turn_id"] and executed["step_id"] == "s1"
    assert isinstance(executed["duration_ms"], int) and executed["level"] == "info"
    # The turn's totals are the ones its usage event gave the client.
    totals = {k: completed[k] for k in usage if k not in ("by_role", "calls", "type")}
    assert totals == {k: v for k, v in usage.items() if k not in ("by_role", "calls", "type")}
    assert totals == {
        "input_tokens": 1600,
        "output_tokens": 130,
        "cache_read_tokens": 1300,
        "cache_write_tokens": 0,
        "cache_write_1h_tokens": 0,
        "cost_usd_micros": usage["cost_usd_micros"],
        "cache_hit_ratio": round(1300 / 2900, 4),
    }
    assert usage["cost_usd_micros"] > 0
    assert completed["status"] == "completed" and completed["duration_ms"] >= 0
    # Every line logged during the turn carries its ids (context variables): none missing.
    during = [line for line in logs.lines() if line.get("turn_id") == started["turn_id"]]
    assert len(during) >= 3
    assert all(line.get(k) == started[k] for line in during for k in IDS)


async def test_a_suspended_turn_logs_each_pending_call_without_its_input(
    make_server: ServerFactory, logs: Logs
) -> None:
    planner = ScriptedModel([plan("Delete task t1", tool="tasks.delete")])

    def executor(request: ModelRequest) -> Reply:
        call = ToolCall(id="toolu_del", name="tasks_delete", input={"task_id": "task_secret_9"})
        return Reply(tool_calls=(call,))

    async with make_server(TurnModels(planner=planner, executor=FunctionModel(executor))) as server:
        await seed_demo(server.store, "acme")
        frames = await stream_turn(
            server.client, {"message": "delete it"}, server.auth(role="owner", org="acme")
        )

    assert types(frames)[-3:] == ["confirmation_pending", "usage", "done"]
    [pending] = logs.named("confirmation_pending")
    assert {k: pending[k] for k in ("tool", "tool_use_id", "confirm", "step_id")} == {
        "tool": "tasks.delete",
        "tool_use_id": "toolu_del",
        "confirm": "destructive",
        "step_id": "s1",
    }
    assert pending["session_id"] == session_of(frames) and pending["org_id"] == "acme"
    [executed] = logs.named("tool.executed")
    assert (executed["tool"], executed["outcome"]) == ("tasks.delete", "needs_confirmation")
    [completed] = logs.named("turn.completed")
    assert completed["status"] == "suspended"
    assert "task_secret_9" not in logs.text


async def test_a_failed_turn_logs_its_code_and_the_trace_id_the_client_got(
    make_server: ServerFactory, logs: Logs
) -> None:
    failing = ScriptedModel(
        [
            {
                "text": "Half an answer",
                "usage": {"input_tokens": 50},
                "error": {
                    "code": "provider_overloaded",
                    "message": "Overloaded",
                    "after_chunks": 1,
                },
            }
        ],
        name=PRICED,
    )
    async with make_server(TurnModels(executor=failing)) as server:
        frames = await stream_turn(server.client, {"message": "hello"}, server.auth())

    assert types(frames)[-2:] == ["error", "done"]
    error = next(f.data for f in frames if f.event == "error")
    [failed] = logs.named("turn.failed")
    assert error["code"] == failed["code"] == "provider_overloaded"
    assert error["trace_id"] == failed["trace_id"]
    assert (failed["status"], failed["level"], failed["org_id"]) == ("failed", "warning", "acme")
    assert failed["session_id"] == session_of(frames)
    assert logs.named("turn.completed") == []
    assert METRICS.value("bosun_turns_total", status="failed") == 1
    assert METRICS.value("bosun_turn_errors_total", code="provider_overloaded") == 1


# The number is longer than any port, pid or time field a log line carries ("7731" once
# matched the test server's port, 57731, in httpx's request line).
WORDS = ("zanzibar", "quokka", "marmalade", "77310466")


async def test_no_word_of_the_user_reaches_the_logs(make_server: ServerFactory, logs: Logs) -> None:
    message = " ".join(WORDS)
    models = tool_turn("zanzibar quokka", f"No {message} member found.", careless=True)
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner", org="acme")
        frames = await stream_turn(server.client, {"message": message}, headers)
        again = await stream_turn(
            server.client, {"message": f"and {message}?", "session_id": session_of(frames)}, headers
        )

    # The words went everywhere a turn takes them: the message, the plan, a tool's input,
    # the model's answer, and the next turn's history.
    sent = json.dumps([f.data for f in frames], ensure_ascii=False)
    assert all(word in sent for word in WORDS)
    started = next(f.data for f in frames if f.event == "tool_started")
    assert started["input"] == {"query": "zanzibar quokka"}
    assert [frames[-1].data["status"], again[-1].data["status"]] == ["completed", "completed"]
    # Yet nothing of them is in the logs, which did record both turns, and scrubbed what
    # the careless executor logged.
    assert len(logs.named("turn.started")) == 2 and logs.named("tool.executed")
    careless = logs.named("model.called")
    assert len(careless) == 4 and all(line["turn_id"] for line in careless)
    assert {(line["messages"], line["text"], line["prompt"]) for line in careless} == {
        (SCRUBBED, SCRUBBED, SCRUBBED)
    }
    rendered = logs.text.lower()
    assert [w for w in WORDS if w in rendered] == []
    token = headers["Authorization"].removeprefix("Bearer ")
    assert token not in logs.text and token.split(".")[2] not in logs.text


async def test_metrics_are_off_unless_enabled(make_server: ServerFactory) -> None:
    async with make_server() as server:
        response = await server.client.get("/metrics")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(body: str) -> Samples:
    """The samples a Prometheus server reads from ``body`` (parsed by prometheus-client)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def missing(scraped: Samples, expected: list[tuple[str, dict[str, str], float]]) -> list[Any]:
    """The expected samples that were not scraped with their value (absent counts as 0)."""
    return [
        (name, labels, value)
        for name, labels, value in expected
        if scraped.get((name, frozenset(labels.items())), 0) != value
    ]


async def test_metrics_count_turns_tokens_cost_and_tools(db_url: str, logs: Logs) -> None:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,
        metrics=True,
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
    )
    async with Server(settings, tool_turn("Sam", "Two Sams.")) as server:
        await seed_demo(server.store, "acme")
        frames = await stream_turn(
            server.client, {"message": "find Sam"}, server.auth(role="owner", org="acme")
        )
        await settled(lambda: METRICS.value("bosun_turns_total", status="completed") == 1)
        response = await server.client.get("/metrics")  # no token: a private-network route

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    body = response.text
    usage = usage_of(frames)
    [executed] = logs.named("tool.executed")
    timed = 1 if executed["duration_ms"] > 0 else 0
    expected = [
        ("bosun_turns_total", {"status": "completed"}, 1),
        ("bosun_model_tokens_total", {"kind": "input"}, usage["input_tokens"]),
        ("bosun_model_tokens_total", {"kind": "output"}, usage["output_tokens"]),
        ("bosun_model_tokens_total", {"kind": "cache_read"}, usage["cache_read_tokens"]),
        ("bosun_model_tokens_total", {"kind": "cache_write"}, 0),
        ("bosun_model_cost_usd_micros_total", {}, usage["cost_usd_micros"]),
        ("bosun_turn_duration_seconds_bucket", {"le": "+Inf"}, 1),
        ("bosun_turn_duration_seconds_count", {}, 1),
        ("bosun_tool_executions_total", {"tool": "members.search", "outcome": "ok"}, 1),
        ("bosun_tool_duration_seconds_count", {"tool": "members.search"}, timed),
    ]
    assert missing(scrape(body), expected) == []
    lines = body.splitlines()
    assert "# TYPE bosun_turn_errors_total counter" in lines
    assert "# TYPE bosun_turn_duration_seconds histogram" in lines


def test_histograms_are_cumulative_and_labels_escaped() -> None:
    metrics = Metrics()
    for seconds in (0.0625, 0.375, 0.375, 400.0):
        metrics.turn_duration.observe(seconds)
    metrics.tool_executed('odd"tool\\', "ok", 2)
    metrics.tool_executed("members.search", "invalid_input", 0)

    body = metrics.render().decode()
    scraped = scrape(body)
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in scraped.items()
        if name == "bosun_turn_duration_seconds_bucket"
    }
    assert buckets == {
        "0.1": 1, "0.25": 1, "0.5": 3, "1.0": 3, "2.5": 3, "5.0": 3, "10.0": 3, "30.0": 3,
        "60.0": 3, "120.0": 3, "300.0": 3, "+Inf": 4,
    }  # fmt: skip
    odd = 'odd"tool\\'
    assert missing(scraped, [
        ("bosun_turn_duration_seconds_sum", {}, 400.8125),
        ("bosun_turn_duration_seconds_count", {}, 4),
        ("bosun_tool_executions_total", {"tool": odd, "outcome": "ok"}, 1),
        ("bosun_tool_executions_total", {"tool": "members.search", "outcome": "invalid_input"}, 1),
        ("bosun_tool_duration_seconds_count", {"tool": odd}, 1),
        ("bosun_model_cost_usd_micros_total", {}, 0),
    ]) == []  # fmt: skip
    # The odd name went out escaped (the parser read it back whole).
    assert 'tool="odd\\"tool\\\\"' in body
    # A refused call did not run, so it is counted but not timed.
    assert 'bosun_tool_duration_seconds_count{tool="members.search"}' not in body
