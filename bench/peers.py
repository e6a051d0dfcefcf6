"""Per tool step: Bosun beside pydantic-ai, LangGraph and the OpenAI Agents SDK, in-process.

The workload (issue 13): one agent run of K tool steps against a zero-latency scripted
model. The model asks for one sync ``add(a, b)`` tool call per turn, K times, then
answers; the framework runs the tool and feeds the result back. Marginal time per tool
step = (median run with K steps - median run with 1) / (K - 1), so each framework's fixed
cost per run (building the run, the first and last model turn) cancels out.

Every variant runs in this one process and event loop, in interleaved rounds (all variants
each round, the order rotated), each without persistence and durable where it offers it:

* Bosun, no persistence: ``executors.run_step`` with events appended to a list and a
  runner that passes the real runner's checks and runs the handler in a thread (as the
  real one does for a sync handler), recording nothing.
* Bosun, durable: ``run_step`` with the real ``tools.ToolRunner`` (execution rows) over a
  real ``store.Store`` on a SQLite file, every event appended to the session's log through
  the turn's ``BatchingAppender``, the turn opened and closed in the log as a turn does.
* Bosun, whole turn: ``turn.TurnRunner`` with a planner double (plan, executor, closing
  events, metering), no HTTP.
* pydantic-ai (``FunctionModel``; no durable store of its own), LangGraph (a ``StateGraph``
  agent loop with ``ToolNode``; durable: ``AsyncSqliteSaver``), the OpenAI Agents SDK (a
  custom ``Model``; durable: ``SQLiteSession``), each on its own temporary file.

``python bench/peers.py --help`` for the flags; bench/README.md for a recorded run. The
peers come with the ``bench`` extra (``pip install -e '.[bench]'``); a variant whose
packages are missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from _harness import run_on_loop
from bosun.log import configure_logging
from bosun.migrate import upgrade
from events import Done, Event, MessageDone, SessionStarted, ToolCompleted, UserMessage
from executors import ExecutorKit, ExecutorLimits, StepOutcome, StepResult, TurnScope, run_step
from planner import Plan, PlanLimits, PlannedStep
from providers import FunctionModel, ModelRequest, Reply, ToolCall, ToolResult
from store import Store
from tools import (
    ToolCallRequest,
    ToolContext,
    ToolDef,
    ToolOutcome,
    ToolRegistry,
    ToolRunner,
    UserRole,
)
from turn import TurnKit, TurnOrder, TurnRoleModels, TurnRunner
from turn._appender import BatchingAppender  # the turn's own writer, not public API

ORG = "bench"
USER = "bench"
ROLE: UserRole = "owner"
MODEL = "function:bench"  # a test double's spec: unpriced, counted with o200k_base
INSTALL_HINT = "pip install -e '.[bench]'"
TURN_TIMEOUT_S = 60.0
_STEPS = re.compile(r"steps=(\d+)")
T = TypeVar("T")


def prompt(k: int) -> str:
    """The user's request; every scripted model reads K from it."""
    return f"Add 1 to 0 with the add tool, one call per turn, then answer: steps={k}"


def steps_in(text: str) -> int:
    found = _STEPS.search(text)
    assert found, f"not a bench prompt: {text[:200]!r}"
    return int(found[1])


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


clock: Callable[[], float] = time.perf_counter
"""What a run is timed by: wall seconds; ``bench/tracing_cost.py`` sets the process's CPU
seconds (``time.process_time``: every thread of it, the SQLite writer's too), which other
work on a shared machine barely moves."""


class Variant(Protocol):
    async def run(self, k: int) -> float:
        """One run of ``k`` tool steps, checked; the seconds (``clock``) of the framework's part."""
        ...


class Skipped(Exception):
    """A variant that cannot run here (its packages are missing)."""


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # for --only
    label: str
    package: str | None  # the distribution whose version the table shows
    build: Callable[[AsyncExitStack, Path, int], Awaitable[Variant]]
    note: str = ""


# --------------------------------------------------------------------------------------
# The floor: a plain Python loop with the same model/tool protocol.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlainLoop:
    """An ``async`` model function and the ``add`` call in a ``while`` loop: the workload
    itself, messages as dicts, no framework. ``thread``: ``add`` runs in a worker thread
    (``asyncio.to_thread``), as every framework here runs a sync tool."""

    thread: bool

    async def _model(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        k = steps_in(messages[0]["content"])
        done = sum(m["role"] == "tool" for m in messages)
        if done < k:
            return {"role": "assistant", "tool": "add", "args": {"a": done, "b": 1}}
        return {"role": "assistant", "content": "done"}

    async def run(self, k: int) -> float:
        started = clock()
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt(k)}]
        while "tool" in (reply := await self._model(messages)):
            args = reply["args"]
            result = await asyncio.to_thread(add, **args) if self.thread else add(**args)
            messages += [reply, {"role": "tool", "content": str(result)}]
        elapsed = clock() - started
        assert reply["content"] == "done" and len(messages) == 2 * k + 1
        return elapsed


async def build_plain(_stack: AsyncExitStack, _workdir: Path, _k: int) -> Variant:
    return PlainLoop(thread=False)


async def build_plain_thread(_stack: AsyncExitStack, _workdir: Path, _k: int) -> Variant:
    return PlainLoop(thread=True)


# --------------------------------------------------------------------------------------
# Bosun: run_step with and without persistence, and the whole turn.
# --------------------------------------------------------------------------------------


class AddInput(BaseModel):
    a: int
    b: int


class AddOutput(BaseModel):
    sum: int


def bosun_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(name="math.add", summary="Add two integers.", category="read")
    def math_add(args: AddInput, _ctx: ToolContext) -> AddOutput:  # sync, as in the peers
        return AddOutput(sum=add(args.a, args.b))

    return registry


def executor_reply(request: ModelRequest) -> Reply:
    """One ``math.add`` call per model turn until the goal's K results are in, then text."""
    k = steps_in(request.messages[0].text)  # the step's goal
    done = sum(isinstance(p, ToolResult) for m in request.messages for p in m.parts)
    if done < k:
        call = ToolCall(id=f"toolu_{done:04d}", name="math_add", input={"a": done, "b": 1})
        return Reply(tool_calls=(call,))
    return Reply(text="done")


def planner_reply(request: ModelRequest) -> str:
    """A ``tool`` plan of one step that calls ``math.add`` K times (K from the message)."""
    k = steps_in(request.messages[-1].text)
    step = {"id": "s1", "goal": prompt(k), "tools": ["math.add"], "max_tool_calls": k + 1}
    plan = {"strategy": "tool", "reasoning": "bench", "steps": [step], "executors": 1}
    return Plan.model_validate(plan).model_dump_json()


def limits_for(k: int) -> ExecutorLimits:
    return ExecutorLimits(max_tool_calls=k + 5, max_model_turns=k + 10)


class MemoryRunner:
    """A ``ToolRunnerLike`` that records nothing: the real runner's gates (role,
    capabilities, input), then the handler in a worker thread, as ``ToolRunner`` runs a sync
    handler; no execution rows, no timeout wrapper, no log line."""

    def __init__(self, gates: ToolRunner) -> None:
        self._gates = gates

    def check(self, call: ToolCallRequest, role: UserRole) -> ToolDef | ToolOutcome:
        return self._gates.check(call, role)

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        tool = self._gates.check(call, ctx.role)
        if isinstance(tool, ToolOutcome):
            return tool
        assert tool.handler is not None
        args = tool.input_model.model_validate(call.input)
        result = await asyncio.to_thread(tool.handler, args, ctx)
        output = result.model_dump(mode="json")
        return ToolOutcome(tool_use_id=call.tool_use_id, tool=tool.name, ok=True, output=output)


async def bosun_store(stack: AsyncExitStack, path: Path, *, migrate: bool) -> Store:
    store = Store(f"sqlite+aiosqlite:///{path}")
    stack.push_async_callback(store.close)
    if migrate:
        await upgrade(store)
    return store


@dataclass(slots=True)
class BosunStep:
    """``run_step`` on a one-step ``tool`` plan; ``durable``: the real runner and the log."""

    store: Store
    kit: ExecutorKit
    durable: bool
    model: FunctionModel

    async def run(self, k: int) -> float:
        step = PlannedStep(id="s1", goal=prompt(k), tools=["math.add"], max_tool_calls=k + 1)
        session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
        ctx = ToolContext(store=self.store, org_id=ORG, user_id=USER, role=ROLE)
        scope = TurnScope(session_id=session_id, turn_id=turn_id, ctx=ctx)
        self.model.calls.clear()
        if not self.durable:
            events: list[Event] = []
            started = clock()
            outcome = await run_step(
                step, kit=self.kit, scope=scope, emit=events.append, final_answer=True
            )
            elapsed = clock() - started
            ok = sum(isinstance(e, ToolCompleted) and e.ok for e in events)
            assert isinstance(outcome, StepResult) and outcome.ok and ok == k, outcome
            return elapsed
        await self.store.sessions.create(
            org_id=ORG, user_id=USER, session_id=session_id, title=None
        )
        started = clock()
        outcome = await self._durable_turn(step, scope)
        elapsed = clock() - started
        assert isinstance(outcome, StepResult) and outcome.ok, outcome
        await check_log(self.store, session_id, turn_id, k)
        return elapsed

    async def _durable_turn(self, step: PlannedStep, scope: TurnScope) -> StepOutcome:
        """What a turn writes around its step: the opening events with the turn row, the
        step's events through the turn's appender, the closing events with the status."""
        message_id = f"msg_{uuid.uuid4().hex}"
        opening: list[Event] = [
            SessionStarted(session_id=scope.session_id, turn_id=scope.turn_id),
            UserMessage(message_id=message_id, text=step.goal),
        ]
        _, epoch = await self.store.log.open_turn(
            scope.session_id, opening, turn_id=scope.turn_id, trace_id=uuid.uuid4().hex
        )
        out = BatchingAppender(self.store.log, scope.session_id, scope.turn_id, epoch)
        outcome = await run_step(step, kit=self.kit, scope=scope, emit=out.add, final_answer=True)
        closing: list[Event] = [
            MessageDone(message_id=message_id, stop_reason="end_turn"),
            Done(session_id=scope.session_id, status="completed"),
        ]
        await out.close(closing, "completed")
        return outcome


async def check_log(store: Store, session_id: str, turn_id: str, k: int) -> None:
    """The run's events are all in the log: K tool calls completed, ``done`` completed."""
    logged = await store.log.read(session_id, turn_id=turn_id)
    ok = sum(e.type == "tool_completed" and e.data["ok"] for e in logged)
    assert ok == k and logged[-1].type == "done", [e.type for e in logged]
    assert logged[-1].data["status"] == "completed", logged[-1].data


async def build_bosun_step(stack: AsyncExitStack, path: Path, k: int, *, durable: bool) -> Variant:
    # The unpersisted variant never touches its store: handlers get it in their context.
    store = await bosun_store(stack, path, migrate=durable)
    registry = bosun_registry()
    real = ToolRunner(registry, store)
    model = FunctionModel(executor_reply, name=MODEL)
    kit = ExecutorKit(
        model=model,
        runner=real if durable else MemoryRunner(real),
        registry=registry,
        counter=TurnKit().counter(model),
        limits=limits_for(k),
    )
    return BosunStep(store=store, kit=kit, durable=durable, model=model)


async def build_bosun(stack: AsyncExitStack, workdir: Path, k: int) -> Variant:
    return await build_bosun_step(stack, workdir / "bosun-memory.db", k, durable=False)


async def build_bosun_durable(stack: AsyncExitStack, workdir: Path, k: int) -> Variant:
    return await build_bosun_step(stack, workdir / "bosun-durable.db", k, durable=True)


@dataclass(slots=True)
class BosunTurn:
    """A whole turn through ``TurnRunner``: planner call, plan, the step, the answer, every
    event in the log, the turn row, metering; waited for to its end. No HTTP."""

    store: Store
    runner: TurnRunner
    models: TurnRoleModels
    doubles: tuple[FunctionModel, ...]

    async def run(self, k: int) -> float:
        session_id = str(uuid.uuid4())
        await self.store.sessions.create(
            org_id=ORG, user_id=USER, session_id=session_id, title="bench"
        )
        for double in self.doubles:
            double.calls.clear()
        started = clock()
        handle = await self.runner.start(
            TurnOrder(org_id=ORG, user_id=USER, role=ROLE),
            session_id=session_id, text=prompt(k), models=self.models, trace_id=uuid.uuid4().hex,
        )  # fmt: skip
        await self.runner.wait(handle.turn_id)
        elapsed = clock() - started
        await check_log(self.store, session_id, handle.turn_id, k)
        return elapsed


async def build_bosun_turn(stack: AsyncExitStack, workdir: Path, k: int) -> Variant:
    store = await bosun_store(stack, workdir / "bosun-turn.db", migrate=True)
    kit = TurnKit(
        tools=bosun_registry(),
        plan_limits=PlanLimits(max_tool_calls_per_step=k + 5),
        executor_limits=limits_for(k),
    )
    runner = TurnRunner(store, turn_timeout_s=TURN_TIMEOUT_S, kit=kit)
    executor = FunctionModel(executor_reply, name=MODEL)
    planner = FunctionModel(planner_reply, name=MODEL)
    models = TurnRoleModels(answer=executor, planner=planner, summariser=None, executor=executor)
    return BosunTurn(store=store, runner=runner, models=models, doubles=(executor, planner))


# --------------------------------------------------------------------------------------
# pydantic-ai: Agent + FunctionModel; it has no durable store of its own.
# --------------------------------------------------------------------------------------


async def build_pydantic_ai(_stack: AsyncExitStack, _workdir: Path, _k: int) -> Variant:
    pydantic_ai = _import("pydantic_ai")
    messages = _import("pydantic_ai.messages")
    function = _import("pydantic_ai.models.function")

    def reply(history: list[Any], _info: Any) -> Any:
        first = next(p for p in history[0].parts if isinstance(p, messages.UserPromptPart))
        k = steps_in(first.content)
        done = sum(isinstance(p, messages.ToolReturnPart) for m in history for p in m.parts)
        if done < k:
            call = messages.ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"call_{done}")
            return messages.ModelResponse(parts=[call])
        return messages.ModelResponse(parts=[messages.TextPart("done")])

    agent = pydantic_ai.Agent(function.FunctionModel(reply))
    agent.tool_plain(add)

    class Run:
        async def run(self, k: int) -> float:
            started = clock()
            result = await agent.run(prompt(k))
            elapsed = clock() - started
            returns = [
                p
                for m in result.all_messages()
                for p in m.parts
                if isinstance(p, messages.ToolReturnPart)
            ]
            assert result.output == "done" and len(returns) == k, result.output
            return elapsed

    return Run()


# --------------------------------------------------------------------------------------
# LangGraph: a StateGraph agent loop (model node, ToolNode, tools_condition).
# --------------------------------------------------------------------------------------


def langgraph_graph(checkpointer: Any = None) -> Any:
    chat_models = _import("langchain_core.language_models.chat_models")
    lc_messages = _import("langchain_core.messages")
    outputs = _import("langchain_core.outputs")
    lc_tools = _import("langchain_core.tools")
    graph = _import("langgraph.graph")
    prebuilt = _import("langgraph.prebuilt")

    def reply(history: Sequence[Any]) -> Any:
        k = steps_in(history[0].content)
        done = sum(isinstance(m, lc_messages.ToolMessage) for m in history)
        if done < k:
            call = {"name": "add", "args": {"a": done, "b": 1}, "id": f"call_{done}"}
            return lc_messages.AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        return lc_messages.AIMessage(content="done")

    class ScriptedChat(chat_models.BaseChatModel):  # type: ignore[misc,name-defined]
        @property
        def _llm_type(self) -> str:
            return "bench-scripted"

        def _generate(self, messages: list[Any], stop: Any = None, **_: Any) -> Any:
            return outputs.ChatResult(generations=[outputs.ChatGeneration(message=reply(messages))])

        async def _agenerate(self, messages: list[Any], stop: Any = None, **_: Any) -> Any:
            return self._generate(messages)

        def bind_tools(self, _tools: Any, **_: Any) -> Any:
            return self  # a scripted model needs no schemas

    tool = lc_tools.tool(add)
    model = ScriptedChat().bind_tools([tool])

    async def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = graph.StateGraph(graph.MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", prebuilt.ToolNode([tool]))
    builder.add_edge(graph.START, "agent")
    builder.add_conditional_edges("agent", prebuilt.tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


@dataclass(slots=True)
class LangGraphRun:
    graph: Any
    durability: str | None = None  # None: the default ("async"), or without a checkpointer

    async def run(self, k: int) -> float:
        human = _import("langchain_core.messages").HumanMessage(prompt(k))
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        extra = {} if self.durability is None else {"durability": self.durability}
        started = clock()
        state = await self.graph.ainvoke({"messages": [human]}, config, **extra)
        elapsed = clock() - started
        tool_messages = [m for m in state["messages"] if m.type == "tool"]
        assert state["messages"][-1].content == "done" and len(tool_messages) == k
        return elapsed


async def build_langgraph(_stack: AsyncExitStack, _workdir: Path, _k: int) -> Variant:
    return LangGraphRun(langgraph_graph())


async def _sqlite_saver(stack: AsyncExitStack, path: Path) -> Any:
    aio = _import("langgraph.checkpoint.sqlite.aio")
    saver = await stack.enter_async_context(aio.AsyncSqliteSaver.from_conn_string(str(path)))
    await saver.setup()
    return saver


async def build_langgraph_sqlite(stack: AsyncExitStack, workdir: Path, _k: int) -> Variant:
    return LangGraphRun(langgraph_graph(await _sqlite_saver(stack, workdir / "langgraph.db")))


async def build_langgraph_sqlite_sync(stack: AsyncExitStack, workdir: Path, _k: int) -> Variant:
    saver = await _sqlite_saver(stack, workdir / "langgraph-sync.db")
    return LangGraphRun(langgraph_graph(saver), durability="sync")


# --------------------------------------------------------------------------------------
# The OpenAI Agents SDK: a custom Model; durable with SQLiteSession. Tracing off.
# --------------------------------------------------------------------------------------


def agents_model() -> Any:
    interface = _import("agents.models.interface")
    items = _import("agents.items")
    usage = _import("agents.usage")
    responses = _import("openai.types.responses")

    def output(history: list[Any]) -> list[Any]:
        k = steps_in(history[0]["content"])
        done = sum(item.get("type") == "function_call_output" for item in history)
        if done < k:
            return [
                responses.ResponseFunctionToolCall(
                    id=f"fc_{done}", call_id=f"call_{done}", type="function_call", name="add",
                    arguments=json.dumps({"a": done, "b": 1}),
                )
            ]  # fmt: skip
        text = responses.ResponseOutputText(text="done", type="output_text", annotations=[])
        message = responses.ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[text]
        )
        return [message]

    class ScriptedModel(interface.Model):  # type: ignore[misc,name-defined]
        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            history = [{"role": "user", "content": input}] if isinstance(input, str) else input
            return items.ModelResponse(
                output=output(history), usage=usage.Usage(), response_id=None
            )

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench runs agents without streaming")

    return ScriptedModel()


@dataclass(slots=True)
class AgentsRun:
    agent: Any
    config: Any
    db: Path | None  # SQLiteSession's file; None: no session

    async def run(self, k: int) -> float:
        agents = _import("agents")
        session = None if self.db is None else agents.SQLiteSession(str(uuid.uuid4()), self.db)
        try:
            started = clock()
            result = await agents.Runner.run(
                self.agent, prompt(k), max_turns=k + 5, run_config=self.config, session=session
            )
            elapsed = clock() - started
        finally:
            if session is not None:
                session.close()
        outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
        assert result.final_output == "done" and len(outputs) == k, result.final_output
        return elapsed


def agents_run(db: Path | None) -> AgentsRun:
    agents = _import("agents")
    agent = agents.Agent(name="bench", model=agents_model(), tools=[agents.function_tool(add)])
    return AgentsRun(agent=agent, config=agents.RunConfig(tracing_disabled=True), db=db)


async def build_agents(_stack: AsyncExitStack, _workdir: Path, _k: int) -> Variant:
    return agents_run(None)


async def build_agents_sqlite(_stack: AsyncExitStack, workdir: Path, _k: int) -> Variant:
    return agents_run(workdir / "agents.db")


# --------------------------------------------------------------------------------------
# The variants, measured in interleaved rounds.
# --------------------------------------------------------------------------------------


def _import(module: str) -> Any:
    """Import a peer's module, or skip the variant that needs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Skipped(f"{exc.name or module} is not installed ({INSTALL_HINT})") from None


SPECS: tuple[Spec, ...] = (
    Spec("python", "plain Python loop", None, build_plain),
    Spec("python-thread", "plain Python loop, add in a thread", None, build_plain_thread),
    Spec("bosun", "Bosun, no persistence (run_step)", "bosun", build_bosun),
    Spec("bosun-durable", "Bosun durable (ToolRunner + log)", "bosun", build_bosun_durable),
    Spec("bosun-turn", "Bosun whole turn (TurnRunner)", "bosun", build_bosun_turn),
    Spec("pydantic-ai", "pydantic-ai, no persistence", "pydantic-ai-slim", build_pydantic_ai),
    Spec("langgraph", "LangGraph, no persistence", "langgraph", build_langgraph),
    Spec(
        "langgraph-sqlite",
        "LangGraph + AsyncSqliteSaver",
        "langgraph",
        build_langgraph_sqlite,
        note="durability 'async' (the default)",
    ),
    Spec(
        "langgraph-sqlite-sync",
        "LangGraph + AsyncSqliteSaver, sync",
        "langgraph",
        build_langgraph_sqlite_sync,
        note="durability 'sync'",
    ),
    Spec("openai-agents", "OpenAI Agents, no persistence", "openai-agents", build_agents),
    Spec(
        "openai-agents-sqlite",
        "OpenAI Agents + SQLiteSession",
        "openai-agents",
        build_agents_sqlite,
    ),
)
DURABLE = "bosun-durable"
PEER_DURABLE = "langgraph-sqlite"
TARGET = 1 / 3  # issue 13: Bosun durable per tool step <= 1/3 of LangGraph + SQLite


@dataclass(slots=True)
class Rounds:
    """One variant's figures per round: the median run with 1 and with K steps (s)."""

    one: list[float] = field(default_factory=list)
    many: list[float] = field(default_factory=list)

    def per_step_us(self, k: int) -> list[float]:
        return [(m - o) / (k - 1) * 1e6 for o, m in zip(self.one, self.many, strict=True)]


async def build_all(
    specs: Sequence[Spec], stack: AsyncExitStack, workdir: Path, k: int
) -> tuple[dict[str, Variant], dict[str, str]]:
    variants: dict[str, Variant] = {}
    skipped: dict[str, str] = {}
    for spec in specs:
        try:
            variants[spec.name] = await spec.build(stack, workdir, k)
        except Skipped as exc:
            skipped[spec.name] = str(exc)
    return variants, skipped


async def measure(
    variants: dict[str, Variant], *, k: int, rounds: int, reps: int, warmup: int
) -> dict[str, Rounds]:
    """Warm each variant up, then per round run every variant (the order rotated) ``reps``
    times with 1 step and with K, alternating, and keep the two medians."""
    for variant in variants.values():
        for _ in range(warmup):
            await variant.run(1)
            await variant.run(k)
    names = list(variants)
    results = {name: Rounds() for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            one, many = [], []
            for _ in range(reps):
                one.append(await variants[name].run(1))
                many.append(await variants[name].run(k))
            results[name].one.append(statistics.median(one))
            results[name].many.append(statistics.median(many))
    return results


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------


def version_of(package: str | None) -> str:
    if package is None:
        return ""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


async def sqlite_synchronous(workdir: Path, variants: dict[str, Variant]) -> dict[str, int]:
    """PRAGMA synchronous of the peers' own connections (0 OFF, 1 NORMAL, 2 FULL)."""
    found: dict[str, int] = {}
    for name in ("langgraph-sqlite", "langgraph-sqlite-sync"):
        variant = variants.get(name)
        if isinstance(variant, LangGraphRun):
            cursor = await variant.graph.checkpointer.conn.execute("PRAGMA synchronous")
            found[name] = (await cursor.fetchone())[0]
    if "openai-agents-sqlite" in variants:
        session = _import("agents").SQLiteSession("pragma", workdir / "agents.db")
        try:  # a connection of its own making, set up as the ones its writes use
            found["openai-agents-sqlite"] = (
                session._get_connection().execute("PRAGMA synchronous").fetchone()[0]
            )
        finally:
            session.close()
    return found


def figures(results: dict[str, Rounds], k: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, rounds in results.items():
        per_step = rounds.per_step_us(k)
        out[name] = {
            "per_step_us": round(statistics.median(per_step), 1),
            "min_us": round(min(per_step), 1),
            "max_us": round(max(per_step), 1),
            "rounds_us": [round(v, 1) for v in per_step],
            "run_1_ms": round(statistics.median(rounds.one) * 1e3, 3),
            "run_k_ms": round(statistics.median(rounds.many) * 1e3, 3),
        }
    for base in (DURABLE, PEER_DURABLE):
        ref = out.get(base, {}).get("per_step_us")
        for f in out.values():
            f[f"x_{base}"] = round(f["per_step_us"] / ref, 3) if ref else None
    return out


def _us(value: float) -> str:
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def table(figs: dict[str, dict[str, Any]], k: int, skipped: dict[str, str]) -> list[str]:
    header = (
        f"{'variant':<44} {'us/step':>7} {'min':>7} {'max':>7} {'ms 1 step':>9}"
        f" {f'ms {k} steps':>11} {'x durable':>9} {'x LG+SQL':>8}"
    )
    lines = [header, "-" * len(header)]
    for spec in SPECS:
        if spec.name in skipped:
            lines.append(f"{spec.label:<44} skipped: {skipped[spec.name]}")
            continue
        f = figs.get(spec.name)
        if f is None:
            continue
        version = "" if spec.package in (None, "bosun") else f" {version_of(spec.package)}"
        lines.append(
            f"{spec.label + version:<44} {_us(f['per_step_us']):>7} {_us(f['min_us']):>7}"
            f" {_us(f['max_us']):>7} {f['run_1_ms']:>9.2f} {f['run_k_ms']:>11.2f}"
            f" {_ratio(f[f'x_{DURABLE}']):>9} {_ratio(f[f'x_{PEER_DURABLE}']):>8}"
        )
    return lines


def verdict(figs: dict[str, dict[str, Any]]) -> str:
    if DURABLE not in figs or PEER_DURABLE not in figs:
        return f"target: needs both {DURABLE} and {PEER_DURABLE} in the run"
    ours, theirs = figs[DURABLE]["per_step_us"], figs[PEER_DURABLE]["per_step_us"]
    met = "met" if ours <= theirs * TARGET else "NOT met"
    return (
        f"target: Bosun durable per tool step <= 1/3 of LangGraph + SQLite: {met}"
        f" ({ours:,.0f} / {theirs:,.0f} us = {ours / theirs:.2f})"
    )


_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def notes(figs: dict[str, dict[str, Any]], synchronous: dict[str, int]) -> list[str]:
    """How each durable variant writes: SQLite's synchronous setting, LangGraph's mode."""
    lines = [
        f"  {name}: synchronous={_SYNCHRONOUS.get(value, str(value))} (the library's default)"
        + (f", {spec.note}" if (spec := _spec(name)).note else "")
        for name, value in synchronous.items()
    ]
    if {"bosun-durable", "bosun-turn"} & figs.keys():
        lines.append("  bosun-durable, bosun-turn: synchronous=NORMAL (store._db); WAL everywhere")
    return ["durable variants, each on its own SQLite file in a temporary directory:", *lines]


def _spec(name: str) -> Spec:
    return next(s for s in SPECS if s.name == name)


def commit() -> str:
    """The checkout's commit, ``+dirty`` when the working tree differs from it."""
    git = shutil.which("git")
    if git is None:
        return "unknown"
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            [git, "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run([git, "diff", "--quiet", "HEAD"], cwd=here, check=False)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty.returncode else "")


def report(
    figs: dict[str, dict[str, Any]],
    skipped: dict[str, str],
    synchronous: dict[str, int],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Print the table (unless --json); return the figures for the JSON line."""
    source = commit()
    if not args.json:
        print(
            f"peers: one process, {args.loop} loop; Python {platform.python_version()};"
            f" {os.cpu_count()} CPUs; bosun {source}"
        )
        print(
            f"K={args.k}; {args.rounds} rounds, each variant {args.reps} runs of 1 and of"
            f" {args.k} tool steps a round; us/step = (median {args.k}-step run - median"
            f" 1-step run) / {args.k - 1}:"
        )
        print("median of the round figures, min and max of them; x = ratio of us/step")
        print("\n".join(table(figs, args.k, skipped)))
        print(verdict(figs))
        print("\n".join(notes(figs, synchronous)))
    return {
        "bench": "peers",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": source,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loop": args.loop,
        "k": args.k,
        "rounds": args.rounds,
        "reps": args.reps,
        "warmup": args.warmup,
        "versions": {s.package: version_of(s.package) for s in SPECS if s.package},
        "figures": figs,
        "skipped": skipped,
        "sqlite_synchronous": synchronous,
    }


# --------------------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, specs: Sequence[Spec]) -> dict[str, Any]:
    configure_logging(fmt="console", level="warning")  # as in the servers
    with tempfile.TemporaryDirectory(prefix="bosun-peers-") as tmp:
        workdir = Path(tmp)
        async with AsyncExitStack() as stack:
            variants, skipped = await build_all(specs, stack, workdir, args.k)
            synchronous = await sqlite_synchronous(workdir, variants)
            results = await measure(
                variants, k=args.k, rounds=args.rounds, reps=args.reps, warmup=args.warmup
            )
    return report(figures(results, args.k), skipped, synchronous, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Marginal time per tool step of an agent run, Bosun beside pydantic-ai, "
        "LangGraph and the OpenAI Agents SDK, with and without persistence, in one process."
    )
    parser.add_argument("--k", type=int, default=20, help="tool steps in the long run (20)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument(
        "--reps", type=int, default=10, help="runs of each length per variant and round (10)"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed runs of each length per variant (2)"
    )
    names = ",".join(s.name for s in SPECS)
    parser.add_argument("--only", metavar="NAME,...", help=f"a subset of: {names}")
    uvloop = importlib.util.find_spec("uvloop") is not None
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop" if uvloop else "asyncio",
        help="the event loop (uvloop when installed, as the server runs)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    return parser


def selected(parser: argparse.ArgumentParser, only: str | None) -> list[Spec]:
    if not only:
        return list(SPECS)
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    unknown = sorted(wanted - {s.name for s in SPECS})
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {[s.name for s in SPECS]}")
    return [s for s in SPECS if s.name in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.k < 2 or min(args.rounds, args.reps) < 1 or args.warmup < 0:
        parser.error("--k must be >= 2, --rounds and --reps >= 1, --warmup >= 0")
    if args.loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        parser.error("uvloop is not installed; use --loop asyncio")
    specs = selected(parser, args.only)
    try:
        figures_json = run_on_loop(bench(args, specs), args.loop)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(json.dumps(figures_json, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
