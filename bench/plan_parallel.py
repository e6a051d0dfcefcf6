"""Plan parallelism and per-tool-step overhead, through ``POST /v1/chat/stream`` and in-process.

Two measurements in one run (``python bench/plan_parallel.py --help`` for the flags):

* **parallel plan**: a ``complex`` plan of 4 independent steps (no ``depends_on``), each
  making one tool call on the demo data and then answering. Every model call (the planner,
  each executor turn, the merge) sleeps ``--latency-ms`` (200) before it replies, so the
  critical path is 4 model calls: planner, a step's two executor turns, merge. The turn's
  wall time (request sent to its ``done`` frame) is divided by that critical path. The same
  plan on a server with ``planner.max_executors = 1`` is the sequential baseline.
* **per tool step**: zero-latency models; a ``tool`` plan whose one step makes ``--calls``
  (20) ``programs.list`` calls, one per model turn, then answers. Per tool step =
  (turn wall time - the same turn with 0 tool calls) / calls. Through HTTP on SQLite (the
  event log, the execution rows, SSE) and beside it the same step run in this process by
  ``executors.run_step`` with persistence off: a runner that keeps the real runner's
  checks, awaits the tool's handler directly and records nothing, and an ``emit`` that
  appends to a list. Two more in-process rows place it: the same runner returning a canned
  output (no tool work), and the real ``ToolRunner`` (execution rows, still no log or HTTP).

Each server is the real app (``bosun.app.build_app``) in its own uvicorn subprocess over
a temporary SQLite file, with the demo data seeded for the token's org.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import json
import os
import platform
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from litestar import Litestar
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from _harness import (
    HOST,
    SECRET_ENV,
    free_port,
    loop_and_http,
    process_cpu_s,
    raise_exit,
    run_on_loop,
    spawn_server,
    stop_process,
    wait_healthy,
)
from bosun.app import build_app
from bosun.log import configure_logging
from bosun.migrate import upgrade
from bosun.settings import ExecutorSettings, LimitSettings, PlannerSettings, Settings
from bosun_demo import demo_registry, seed_demo
from bosun_demo import toolset as demo_toolset
from context import TokenCounter
from events import Event, ToolCompleted
from executors import (
    ExecutorKit,
    ExecutorLimits,
    StepResult,
    ToolRunnerLike,
    TurnScope,
    run_step,
)
from planner import Plan, PlannedStep
from providers import FunctionModel, ModelRequest, Reply, ToolCall, ToolResult
from store import Store
from stream import TokenConfig, mint_token
from tools import ToolCallRequest, ToolContext, ToolDef, ToolOutcome, ToolRunner, UserRole
from turn import TurnModels

ORG = "bench"
ROLE: UserRole = "owner"
MODEL = "function:bench"  # a test double's spec: unpriced, counted with o200k_base
TURN_TIMEOUT_S = 60.0
PARALLEL_STEPS = 4
STEP_TOOLS = ("members.search", "programs.list")  # the complex plan's steps alternate
TOOL_INPUT: dict[str, dict[str, Any]] = {"members_search": {"query": "sam"}, "programs_list": {}}
MAX_CALLS = 45  # planner.max_tool_calls_per_step is at most 50; the step gets calls + 5
TARGET_RATIO = 1.3
ServerName = Literal["parallel", "sequential", "overhead"]
Mode = Literal["canned", "handler", "recorded"]
ANCHORS_MS: tuple[tuple[str, float], ...] = (
    ("Pydantic AI", 2.77),
    ("LangGraph", 2.79),
    ("OpenAI Agents SDK", 2.82),
    ("a plain Python loop", 0.007),
)


# --------------------------------------------------------------------------------------
# The workload: a message names it; the planner, executor and merger doubles act it out.
# --------------------------------------------------------------------------------------

_WORKLOAD = re.compile(r"plan=(complex|tool) steps=(\d+) calls=(\d+)")
_CALLS = re.compile(r"calls=(\d+)")


def workload(strategy: Literal["complex", "tool"], steps: int, calls: int) -> str:
    """The user message that asks the planner double for this plan."""
    return f"bench plan={strategy} steps={steps} calls={calls}"


def plan_for(message: str) -> Plan:
    """The plan the planner double answers ``message`` with (steps without depends_on)."""
    found = _WORKLOAD.search(message)
    assert found, f"not a bench workload: {message[:200]!r}"
    strategy, steps, calls = found[1], int(found[2]), int(found[3])
    tools = [STEP_TOOLS[i % len(STEP_TOOLS)] for i in range(steps)]
    if strategy == "tool":
        tools = ["programs.list"]
    return Plan.model_validate(
        {
            "strategy": strategy,
            "reasoning": "bench workload",
            "executors": len(tools),
            "steps": [
                {
                    "id": f"s{i + 1}",
                    "goal": f"Bench step s{i + 1}: call {tool} calls={calls} times, then answer.",
                    "tools": [tool],
                    "max_tool_calls": calls + 1,  # one to spare: no wrap-up turn
                }
                for i, tool in enumerate(tools)
            ],
        }
    )


def bench_models(latency_s: float) -> TurnModels:
    """Planner, executor and merger doubles; each call first sleeps ``latency_s``."""

    async def pause() -> None:
        if latency_s > 0:
            await asyncio.sleep(latency_s)

    async def planner(request: ModelRequest) -> str:
        await pause()
        text = "\n".join(message.text for message in request.messages)
        return plan_for(text).model_dump_json()

    async def merger(_request: ModelRequest) -> str:
        await pause()
        return "All the lookups are done."

    return TurnModels(
        planner=FunctionModel(planner, name=MODEL),
        executor=FunctionModel(executor_reply(pause), name=MODEL),
        merger=FunctionModel(merger, name=MODEL),
    )


def executor_reply(
    pause: Callable[[], Coroutine[Any, Any, None]],
) -> Callable[[ModelRequest], Coroutine[Any, Any, Reply]]:
    """Calls the step's tool until the goal's ``calls=N`` results are in, then answers."""

    async def reply(request: ModelRequest) -> Reply:
        await pause()
        found = _CALLS.search(request.messages[0].text)  # the step's goal
        assert found, "the executor's first message is not a bench goal"
        done = sum(isinstance(p, ToolResult) for m in request.messages for p in m.parts)
        if done < int(found[1]) and request.tools:
            name = request.tools[0].name
            call = ToolCall(id=f"toolu_{uuid.uuid4().hex}", name=name, input=TOOL_INPUT[name])
            return Reply(tool_calls=(call,))
        return Reply(text=f"Done after {done} tool calls.")

    return reply


# --------------------------------------------------------------------------------------
# Server side: this file re-invoked with --serve, one process per server.
# --------------------------------------------------------------------------------------


def limits_for(calls: int) -> tuple[PlannerSettings, ExecutorSettings]:
    """Room for ``calls`` tool calls in one step (the defaults allow 10)."""
    return (
        PlannerSettings(max_tool_calls_per_step=calls + 5),
        ExecutorSettings(max_tool_calls=calls + 5, max_model_turns=calls + 10),
    )


async def _migrate(store: Store) -> None:
    try:
        await upgrade(store, toolsets=[demo_toolset()])
    finally:
        await store.close()


def bosun_app(db_path: Path, *, latency_ms: float, max_executors: int, calls: int) -> Litestar:
    configure_logging(fmt="console", level="warning")
    planner, executor = limits_for(calls)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db_path}",
        jwt_secret=os.environ[SECRET_ENV],
        jwt_algorithm="HS256",
        toolsets=["bosun_demo:toolset"],
        planner=planner.model_copy(update={"max_executors": max_executors}),
        executor=executor,
        limits=LimitSettings(requests_per_minute=0, tokens_per_minute=0),  # measure, not throttle
    )
    asyncio.run(_migrate(Store(settings.database_url)))
    return build_app(settings, models=bench_models(latency_ms / 1000), seed_orgs=[ORG])


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    app = bosun_app(
        args.db, latency_ms=args.latency_ms, max_executors=args.max_executors, calls=args.calls
    )
    from bosun.app import freeze_startup_heap

    freeze_startup_heap()  # as `bosun serve` does before serving
    loop, http = loop_and_http()
    signal.signal(signal.SIGTERM, raise_exit)  # so the profile below is still written
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    try:
        uvicorn.run(
            app,
            host=HOST,
            port=args.port,
            log_level="warning",
            access_log=False,
            loop=loop,
            http=http,
            timeout_graceful_shutdown=5,
        )
    except SystemExit:
        pass
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
    return 0


# --------------------------------------------------------------------------------------
# Client side: one turn over HTTP, timed to its done frame.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnRun:
    wall_s: float  # request sent to the done frame parsed
    events: Counter[str]
    at: dict[str, list[float]]  # seconds from the request to each frame, by event type
    data: dict[str, list[dict[str, Any]]]  # the payloads of the frames worth checking

    def first(self, kind: str) -> float:
        return self.at[kind][0]

    def last(self, kind: str) -> float:
        return self.at[kind][-1]


_KEPT = {"plan_created", "step_completed", "tool_completed", "done"}


async def http_turn(client: httpx.AsyncClient, url: str, token: str, message: str) -> TurnRun:
    """POST one turn (a new session) and read its SSE frames to ``done``."""
    events: Counter[str] = Counter()
    at: dict[str, list[float]] = {}
    data: dict[str, list[dict[str, Any]]] = {}
    kind, lines = "message", []
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    async with client.stream("POST", url, headers=headers, json={"message": message}) as response:
        if response.status_code != 200:
            body = (await response.aread())[:500]
            raise RuntimeError(f"HTTP {response.status_code}: {body!r}")
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                lines.append(line[5:].removeprefix(" "))
            elif not line and lines:  # the end of a frame with data
                events[kind] += 1
                at.setdefault(kind, []).append(time.perf_counter() - started)
                if kind in _KEPT:
                    data.setdefault(kind, []).append(json.loads("\n".join(lines)))
                if kind == "done":
                    break
                kind, lines = "message", []
            elif not line:
                kind = "message"
    if "done" not in at:
        raise RuntimeError(f"the stream ended without a done frame: {dict(events)}")
    return TurnRun(wall_s=at["done"][0], events=events, at=at, data=data)


def check_turn(run: TurnRun, *, strategy: str, steps: int, calls: int, executors: int) -> None:
    """The turn did what the workload asked: the plan, every tool call ok, completed."""
    plan = run.data["plan_created"][0]
    got = (plan["strategy"], len(plan["steps"]), plan["executors"], plan.get("fallback"))
    if got != (strategy, steps, executors, None):
        raise RuntimeError(f"unexpected plan (strategy, steps, executors, fallback): {got}")
    done = run.data["done"][0]
    if done["status"] != "completed":
        raise RuntimeError(f"the turn ended {done['status']}: {dict(run.events)}")
    tools = run.data.get("tool_completed", [])
    if len(tools) != steps * calls or not all(t["ok"] for t in tools):
        raise RuntimeError(f"expected {steps * calls} ok tool calls, got {tools[:3]}…")
    completed = run.data.get("step_completed", [])
    if len(completed) != steps or not all(s["ok"] for s in completed):
        raise RuntimeError(f"expected {steps} ok steps, got {completed}")


# --------------------------------------------------------------------------------------
# In-process: the same tool step through executors.run_step, persistence off.
# --------------------------------------------------------------------------------------


class MemoryRunner:
    """A ``ToolRunnerLike`` that records nothing.

    ``check`` is the real runner's (role, capabilities, input validation; no I/O), and
    ``run`` passes the same gates again, as ``ToolRunner.run`` does. Then, with ``canned``
    outputs (by tool name), it returns the tool's canned output (no tool work at all);
    without, it awaits the tool's handler directly (its own SQLite read). Either way there
    are no execution rows, no timeout wrapper and no log line.
    """

    def __init__(self, gates: ToolRunner, canned: Mapping[str, Any] | None = None) -> None:
        self._gates = gates
        self._canned = canned

    def check(self, call: ToolCallRequest, role: UserRole) -> ToolDef | ToolOutcome:
        return self._gates.check(call, role)

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        tool = self._gates.check(call, ctx.role)
        if isinstance(tool, ToolOutcome):
            return tool
        if self._canned is not None:
            output = self._canned[tool.name]
        else:
            output = await call_handler(tool, call.input, ctx)
        return ToolOutcome(tool_use_id=call.tool_use_id, tool=tool.name, ok=True, output=output)


async def call_handler(tool: ToolDef, payload: dict[str, Any], ctx: ToolContext) -> Any:
    """The handler's JSON-ready output for ``payload`` (validated by its input model)."""
    assert tool.handler is not None, f"{tool.name} has no handler"
    result = tool.handler(tool.input_model.model_validate(payload), ctx)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return to_jsonable_python(result)


@dataclass(frozen=True, slots=True)
class StepTimes:
    """In-process ``run_step`` wall times of one runner mode, with and without the calls."""

    mode: Mode
    calls: int
    with_calls_s: list[float]
    without_s: list[float]

    @property
    def per_step_ms(self) -> float:
        return (_median(self.with_calls_s) - _median(self.without_s)) / self.calls * 1e3


async def _no_pause() -> None:
    return None


async def in_process(workdir: Path, calls: int, reps: int, warmup: int) -> list[StepTimes]:
    """The overhead workload's step through ``run_step``, per runner mode, alternating
    ``calls`` tool calls and none; nothing reaches a log or a socket."""
    configure_logging(fmt="console", level="warning")  # as in the servers
    store = Store(f"sqlite+aiosqlite:///{workdir / 'in_process.db'}")
    try:
        await upgrade(store, toolsets=[demo_toolset()])
        await seed_demo(store, ORG)
        session_id = str(uuid.uuid4())  # execution rows (mode "recorded") need a session
        await store.sessions.create(org_id=ORG, user_id="bench", session_id=session_id, title=None)
        registry = demo_registry().for_role(ROLE)
        gates = ToolRunner(registry, store)
        ctx = ToolContext(store=store, org_id=ORG, user_id="bench", role=ROLE)
        tool = registry.get("programs.list")
        canned = {tool.name: await call_handler(tool, TOOL_INPUT[tool.wire_name], ctx)}
        model = FunctionModel(executor_reply(_no_pause), name=MODEL)
        counter = TokenCounter(model.name)  # one per model, as the server's TurnKit keeps
        _, executor = limits_for(calls)
        limits = ExecutorLimits(
            max_tool_calls=executor.max_tool_calls, max_model_turns=executor.max_model_turns
        )
        steps = {n: plan_for(workload("tool", 1, n)).steps[0] for n in (calls, 0)}
        runners: dict[Mode, ToolRunnerLike] = {
            "canned": MemoryRunner(gates, canned),
            "handler": MemoryRunner(gates),
            "recorded": gates,  # the real ToolRunner: execution rows, no log, no HTTP
        }
        results = []
        for mode, runner in runners.items():
            kit = ExecutorKit(
                model=model,
                runner=runner,
                registry=registry,
                counter=counter,
                limits=limits,
            )
            times: dict[int, list[float]] = {calls: [], 0: []}
            for index in range(warmup + reps):
                for n, step in steps.items():
                    scope = TurnScope(session_id=session_id, turn_id=str(uuid.uuid4()), ctx=ctx)
                    elapsed = await _time_step(step, kit, scope, n)
                    if index >= warmup:
                        times[n].append(elapsed)
            results.append(StepTimes(mode, calls, times[calls], times[0]))
        return results
    finally:
        await store.close()


async def _time_step(step: PlannedStep, kit: ExecutorKit, scope: TurnScope, calls: int) -> float:
    events: list[Event] = []
    started = time.perf_counter()
    outcome = await run_step(step, kit=kit, scope=scope, emit=events.append, final_answer=True)
    elapsed = time.perf_counter() - started
    ok = sum(isinstance(e, ToolCompleted) and e.ok for e in events)
    if not isinstance(outcome, StepResult) or not outcome.ok or ok != calls:
        raise RuntimeError(f"in-process step: {ok} of {calls} calls ok; {outcome!r:.500}")
    return elapsed


# --------------------------------------------------------------------------------------
# Orchestration: the servers, the HTTP measurements.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerSpec:
    name: ServerName
    latency_ms: float
    max_executors: int


@dataclass(frozen=True, slots=True)
class Server:
    spec: ServerSpec
    process: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def stream_url(self) -> str:
        return f"{self.base_url}/v1/chat/stream"


def specs(latency_ms: float) -> list[ServerSpec]:
    return [
        ServerSpec("parallel", latency_ms, PARALLEL_STEPS),
        ServerSpec("sequential", latency_ms, 1),
        ServerSpec("overhead", 0.0, PARALLEL_STEPS),
    ]


def start_server(
    spec: ServerSpec, workdir: Path, calls: int, secret: str, profile: Path | None
) -> Server:
    port = free_port()
    args = [spec.name, "--port", str(port), "--db", str(workdir / f"{spec.name}.db"),
            "--latency-ms", str(spec.latency_ms), "--max-executors", str(spec.max_executors),
            "--calls", str(calls)]  # fmt: skip
    process = spawn_server(__file__, args, secret=secret, workdir=workdir, profile=profile)
    return Server(spec=spec, process=process, port=port)


@dataclass(frozen=True, slots=True)
class HttpResults:
    plans: dict[str, list[TurnRun]]  # parallel, sequential, instant (zero latency)
    with_calls: list[TurnRun]
    without: list[TurnRun]
    cpu_with_s: float | None  # the overhead server's CPU over the turns with calls
    cpu_without_s: float | None


async def _turns(
    client: httpx.AsyncClient,
    server: Server,
    token: str,
    count: int,
    *,
    strategy: Literal["complex", "tool"],
    steps: int,
    calls: int,
) -> tuple[list[TurnRun], float | None]:
    """``count`` turns of one workload; their runs and the server's CPU seconds over them."""
    runs: list[TurnRun] = []
    cpu: float | None = 0.0
    executors = min(steps, server.spec.max_executors)
    for _ in range(count):
        before = process_cpu_s(server.process.pid)
        run = await http_turn(client, server.stream_url, token, workload(strategy, steps, calls))
        after = process_cpu_s(server.process.pid)
        check_turn(run, strategy=strategy, steps=steps, calls=calls, executors=executors)
        runs.append(run)
        cpu = None if cpu is None or before is None or after is None else cpu + after - before
    return runs, cpu


async def measure_http(
    servers: dict[ServerName, Server], token: str, args: argparse.Namespace
) -> HttpResults:
    """Warm-up turns are run and checked but not kept."""
    timeout = httpx.Timeout(TURN_TIMEOUT_S, connect=5.0)
    async with httpx.AsyncClient(timeout=timeout) as client:
        for server in servers.values():
            await wait_healthy(client, server.base_url, server.process, server.spec.name)
        plans: dict[str, list[TurnRun]] = {}
        workloads: tuple[tuple[str, ServerName, int], ...] = (
            ("parallel", "parallel", args.runs),
            ("sequential", "sequential", args.sequential_runs),
            ("instant", "overhead", args.runs),
        )
        for label, name, count in workloads:
            server = servers[name]
            runs, _ = await _turns(
                client,
                server,
                token,
                args.warmup + count,
                strategy="complex",
                steps=PARALLEL_STEPS,
                calls=1,
            )
            plans[label] = runs[args.warmup :]
        overhead = servers["overhead"]
        await _turns(client, overhead, token, args.warmup, strategy="tool", steps=1, calls=0)
        await _turns(client, overhead, token, args.warmup, strategy="tool", steps=1, calls=0)
        with_calls: list[TurnRun] = []
        without: list[TurnRun] = []
        cpu: dict[int, float | None] = {args.calls: 0.0, 0: 0.0}
        for _ in range(args.reps):  # alternate, so drift touches both alike
            for n, kept in ((args.calls, with_calls), (0, without)):
                runs, spent = await _turns(
                    client, overhead, token, 1, strategy="tool", steps=1, calls=n
                )
                kept += runs
                total = cpu[n]
                cpu[n] = None if total is None or spent is None else total + spent
    return HttpResults(
        plans=plans,
        with_calls=with_calls,
        without=without,
        cpu_with_s=cpu[args.calls],
        cpu_without_s=cpu[0],
    )


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def median_run(runs: Sequence[TurnRun]) -> TurnRun:
    """The run with the median wall time (the lower middle one for an even count)."""
    ranked = sorted(runs, key=lambda run: run.wall_s)
    return ranked[(len(ranked) - 1) // 2]


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


def timeline(run: TurnRun) -> dict[str, float]:
    """When the plan, the steps and the end reached the client (ms after the request)."""
    marks = {
        "plan_created": run.first("plan_created"),
        "first_step_started": run.first("step_started"),
        "last_step_started": run.last("step_started"),
        "first_step_completed": run.first("step_completed"),
        "last_step_completed": run.last("step_completed"),
        "first_merge_delta": min(
            (t for t in run.at.get("text_delta", []) if t > run.last("step_completed")),
            default=run.wall_s,
        ),
        "done": run.wall_s,
    }
    return {name: _ms(at) for name, at in marks.items()}


def plan_figures(http: HttpResults, latency_ms: float) -> dict[str, Any]:
    critical_ms = 4 * latency_ms  # planner, a step's two executor turns, merge
    sequential_path_ms = (2 + 2 * PARALLEL_STEPS) * latency_ms
    figures: dict[str, Any] = {
        "latency_ms": latency_ms,
        "critical_path_ms": critical_ms,
        "sequential_path_ms": sequential_path_ms,
        "target_ratio": TARGET_RATIO,
    }
    for label, runs in http.plans.items():
        walls = [run.wall_s * 1e3 for run in runs]
        middle = median_run(runs)
        step_ms = sorted(s["duration_ms"] for s in middle.data["step_completed"])
        figures[label] = {
            "runs": len(runs),
            "median_wall_ms": round(_median(walls), 2),
            "min_wall_ms": round(min(walls), 2),
            "max_wall_ms": round(max(walls), 2),
            "walls_ms": [round(w, 2) for w in walls],
            "ratio_to_critical_path": round(_median(walls) / critical_ms, 4)
            if critical_ms
            else None,
            "step_duration_ms": step_ms,  # server-side, from step_completed
            "timeline_ms": timeline(middle),
        }
    if critical_ms:
        seq = figures["sequential"]
        seq["ratio_to_own_path"] = round(seq["median_wall_ms"] / sequential_path_ms, 4)
        figures["target_met"] = figures["parallel"]["ratio_to_critical_path"] <= TARGET_RATIO
    return figures


def overhead_figures(http: HttpResults, steps: list[StepTimes], calls: int) -> dict[str, Any]:
    walls = {
        n: [r.wall_s for r in runs] for n, runs in ((calls, http.with_calls), (0, http.without))
    }
    http_ms = (_median(walls[calls]) - _median(walls[0])) / calls * 1e3
    cpu_ms: float | None = None
    if http.cpu_with_s is not None and http.cpu_without_s is not None:
        reps = len(http.with_calls)
        cpu_ms = (http.cpu_with_s - http.cpu_without_s) / reps / calls * 1e3
    by_mode = {s.mode: s for s in steps}
    off = by_mode["handler"].per_step_ms
    return {
        "calls": calls,
        "tool": "programs.list",
        "http_sqlite": {
            "per_step_ms": round(http_ms, 4),
            "server_cpu_per_step_ms": None if cpu_ms is None else round(cpu_ms, 4),
            "turns": len(http.with_calls),
            "median_turn_ms": {
                "with_calls": _ms(_median(walls[calls])),
                "without": _ms(_median(walls[0])),
            },
        },
        "in_process": {
            s.mode: {
                "per_step_ms": round(s.per_step_ms, 4),
                "turns": len(s.with_calls_s),
                "median_turn_ms": {
                    "with_calls": _ms(_median(s.with_calls_s)),
                    "without": _ms(_median(s.without_s)),
                },
            }
            for s in steps
        },
        "ratio_http_to_persistence_off": round(http_ms / off, 3) if off > 0 else None,
        "persistence_off_runner": "handler: the real checks, then the tool handler awaited "
        "directly; nothing recorded",
    }


def report_lines(plan: dict[str, Any], overhead: dict[str, Any]) -> list[str]:
    latency = plan["latency_ms"]
    critical = plan["critical_path_ms"]
    lines = [
        f"Parallel plan: complex, {PARALLEL_STEPS} independent steps of 1 tool call each;"
        f" every model call sleeps {latency:g} ms",
        f"critical path = planner + 2 executor turns + merge = 4 x {latency:g} ms = {critical:g} ms"
        " (tool time not included)",
    ]
    header = (
        f"{'server':<34} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8} {'/ critical':>10}"
    )
    lines += [header, "-" * len(header)]
    names = {
        "parallel": f"parallel (max_executors={PARALLEL_STEPS})",
        "sequential": "sequential (max_executors=1)",
        "instant": "same plan, zero-latency models",
    }
    for label, name in names.items():
        f = plan[label]
        ratio = "" if label == "instant" or not critical else f"{f['ratio_to_critical_path']:.3f}"
        lines.append(
            f"{name:<34} {f['runs']:>4} {f['median_wall_ms']:>10.1f} {f['min_wall_ms']:>8.1f}"
            f" {f['max_wall_ms']:>8.1f} {ratio:>10}"
        )
    if critical:
        par = plan["parallel"]["ratio_to_critical_path"]
        verdict = "met" if plan["target_met"] else "NOT met"
        lines.append(
            f"target: parallel wall <= {TARGET_RATIO} x critical path: {verdict} ({par:.3f})"
        )
        lines.append(
            f"sequential: {plan['sequential']['ratio_to_own_path']:.3f} x its own path"
            f" (10 calls = {plan['sequential_path_ms']:g} ms)"
        )
    m = plan["parallel"]["timeline_ms"]
    lines += [
        f"median parallel run, ms after the request: plan_created {m['plan_created']:.1f},"
        f" steps started {m['first_step_started']:.1f}-{m['last_step_started']:.1f},"
        f" completed {m['first_step_completed']:.1f}-{m['last_step_completed']:.1f},",
        f"  first merge delta {m['first_merge_delta']:.1f}, done {m['done']:.1f};"
        f" the steps' own duration_ms: {plan['parallel']['step_duration_ms']}",
    ]
    http = overhead["http_sqlite"]
    modes = overhead["in_process"]
    calls = overhead["calls"]
    cpu = http["server_cpu_per_step_ms"]
    rows = [
        ("HTTP + SQLite (uvicorn, event log, execution rows, SSE)", http),
        ("in-process, persistence off: handler awaited directly", modes["handler"]),
        ("in-process, persistence off: canned outcome", modes["canned"]),
        ("in-process, real ToolRunner (execution rows), no log/HTTP", modes["recorded"]),
    ]
    lines += [
        "",
        f"Per tool step: zero-latency models; a tool plan of 1 step making {calls} programs.list"
        " calls, one per model turn;",
        f"(median turn with {calls} calls - median turn with 0) / {calls}",
    ]
    header = f"{'path':<60} {'ms/step':>8} {'turn ms':>9} {'0-call ms':>9}"
    lines += [header, "-" * len(header)]
    for name, f in rows:
        turn = f["median_turn_ms"]
        lines.append(
            f"{name:<60} {f['per_step_ms']:>8.3f}"
            f" {turn['with_calls']:>9.1f} {turn['without']:>9.1f}"
        )
    ratio = overhead["ratio_http_to_persistence_off"]
    lines.append(
        f"ratio HTTP + SQLite / persistence off (handler): {ratio:.2f}"
        + ("" if cpu is None else f"; server CPU per tool step over HTTP: {cpu:.3f} ms")
    )
    lines += [
        "",
        "Reference only: FIELD-NOTES anchors, measured elsewhere, NOT in this run (per tool step,",
        "in-process): "
        + "; ".join(f"{name} {ms:g} ms" for name, ms in ANCHORS_MS[:-1])
        + f"; {ANCHORS_MS[-1][0]} {ANCHORS_MS[-1][1] * 1000:g} us",
    ]
    return lines


def report(http: HttpResults, steps: list[StepTimes], args: argparse.Namespace) -> dict[str, Any]:
    """Print the tables (unless --json); return the figures for the JSON line."""
    plan = plan_figures(http, args.latency_ms)
    overhead = overhead_figures(http, steps, args.calls)
    loop, server_http = loop_and_http()
    if not args.json:
        print(
            f"plan_parallel: uvicorn ({loop}, {server_http}), one process per server, SQLite;"
            f" Python {platform.python_version()}; {os.cpu_count()} CPUs"
        )
        print("\n".join(line.rstrip() for line in report_lines(plan, overhead)))
    return {
        "bench": "plan_parallel",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loop": loop,
        "warmup": args.warmup,
        "in_process_warmup": args.in_process_warmup,
        "plan": plan,
        "tool_step": overhead,
        "anchors_measured_elsewhere_ms": {name: ms for name, ms in ANCHORS_MS},
    }


# --------------------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------------------

T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Wall time of a 4-step parallel plan against its critical path, and the "
        "per-tool-step overhead through HTTP beside the same step in-process."
    )
    parser.add_argument("--latency-ms", type=float, default=200.0, help="per model call (200)")
    parser.add_argument("--runs", type=int, default=7, help="parallel-plan turns (7)")
    parser.add_argument(
        "--sequential-runs", type=int, default=3, help="turns of the sequential baseline (3)"
    )
    parser.add_argument("--calls", type=int, default=20, help="tool calls in the step (20)")
    parser.add_argument(
        "--reps", type=int, default=10, help="HTTP turns with and without the calls (10 each)"
    )
    parser.add_argument(
        "--in-process-reps", type=int, default=30, help="run_step runs per mode and variant (30)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="warm-up turns per workload (1)")
    parser.add_argument(
        "--in-process-warmup",
        type=int,
        default=3,
        help="warm-up run_step runs per mode and variant (3; the first few are cold)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="cProfile the zero-latency server's main thread into FILE (pstats format)",
    )
    # Internal: the server subprocesses.
    parser.add_argument(
        "--serve", choices=("parallel", "sequential", "overhead"), help=argparse.SUPPRESS
    )
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--max-executors", type=int, default=PARALLEL_STEPS, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args)
    if min(args.runs, args.sequential_runs, args.calls, args.reps, args.in_process_reps) < 1:
        parser.error(
            "--runs, --sequential-runs, --calls, --reps and --in-process-reps must be >= 1"
        )
    if args.calls > MAX_CALLS or min(args.warmup, args.in_process_warmup, args.latency_ms) < 0:
        parser.error(f"--calls must be <= {MAX_CALLS}; the warm-ups and --latency-ms >= 0")
    signal.signal(signal.SIGTERM, raise_exit)  # so the finally below stops the servers
    secret = secrets.token_urlsafe(48)
    token = mint_token(TokenConfig(secret), user="bench", org=ORG, role=ROLE, ttl_s=3600)
    profile = args.profile.resolve() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:
        workdir = Path(tmp)
        servers: dict[ServerName, Server] = {}
        try:
            for spec in specs(args.latency_ms):
                servers[spec.name] = start_server(
                    spec, workdir, args.calls, secret, profile if spec.name == "overhead" else None
                )
            http = run_on_loop(measure_http(servers, token, args))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            for server in servers.values():
                stop_process(server.process)
        steps = run_on_loop(
            in_process(workdir, args.calls, args.in_process_reps, args.in_process_warmup)
        )
    print(json.dumps(report(http, steps, args), separators=(",", ":")))
    if profile is not None:
        print(f"profile of the zero-latency server written to {profile}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
