"""Shared doubles for the executor tests: a runner with the real gates and canned tool
behaviour, a model scripted per step goal, and event normalisation for whole-transcript
assertions."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from bosun_demo import demo_registry
from context import TokenCounter
from events import ContextBudget, Event, StepCompleted
from executors import ExecutorKit, ExecutorLimits, TurnScope
from providers import FunctionModel, ModelRequest, Reply
from tools import (
    ToolCallRequest,
    ToolContext,
    ToolDef,
    ToolError,
    ToolFailure,
    ToolOutcome,
    ToolRegistry,
    ToolRunner,
    UserRole,
)

Behaviour = Callable[[dict[str, Any]], Any]
Turn = Reply | Callable[[ModelRequest], Awaitable[Reply]] | Callable[[ModelRequest], Reply]


@cache
def counter() -> TokenCounter:
    return TokenCounter()


class FakeRunner:
    """The real runner's gates (``check`` does no I/O) with canned behaviour per tool and no
    store: ``runs`` lists what executed, ``pending`` the calls recorded as waiting."""

    def __init__(
        self, behaviours: Mapping[str, Behaviour], registry: ToolRegistry | None = None
    ) -> None:
        self.registry = registry or demo_registry()
        self._gates = ToolRunner(self.registry, store=None)  # type: ignore[arg-type]
        self.behaviours = dict(behaviours)
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.pending: list[str] = []

    def check(self, call: ToolCallRequest, role: UserRole) -> ToolDef | ToolOutcome:
        return self._gates.check(call, role)

    def defers(self, tool: ToolDef) -> bool:
        return self._gates.defers(tool)

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        verdict = self.check(call, ctx.role)
        if isinstance(verdict, ToolOutcome):
            return verdict
        tool = verdict
        needs = (
            "pick"
            if tool.kind == "user_picker"
            else "confirmation"
            if tool.needs_confirmation and not approved
            else None
        )
        if needs is not None:
            self.pending.append(call.tool_use_id)
            return ToolOutcome(tool_use_id=call.tool_use_id, tool=tool.name, ok=False, needs=needs)
        self.runs.append((tool.name, call.input))
        try:
            output = self.behaviours[tool.name](call.input)
            if inspect.isawaitable(output):
                output = await output
        except ToolError as exc:
            failure = ToolFailure(code=exc.code, message=exc.message, hint=exc.hint)
            return ToolOutcome(
                tool_use_id=call.tool_use_id, tool=tool.name, ok=False, error=failure
            )
        return ToolOutcome(
            tool_use_id=call.tool_use_id,
            tool=tool.name,
            ok=True,
            output=output,
            inverse_available=tool.inverse is not None,
        )


def goal_of(request: ModelRequest) -> str:
    return request.messages[0].text


def turn_of(request: ModelRequest) -> int:
    """How many model turns of this step came before (its assistant messages so far)."""
    return sum(m.role == "assistant" for m in request.messages)


def per_goal(script: Mapping[str, Sequence[Turn]], *, name: str = "function") -> FunctionModel:
    """A model that answers each step from its own script, by the step's goal and turn, so
    concurrent steps never race for a shared list."""

    async def reply(request: ModelRequest) -> Reply:
        turns = script[goal_of(request)]
        index = turn_of(request)
        assert index < len(turns), f"no turn {index} scripted for {goal_of(request)!r}"
        turn = turns[index]
        if isinstance(turn, Reply):
            return turn
        result = turn(request)
        return await result if inspect.isawaitable(result) else result

    return FunctionModel(reply, name=name)


def kit(model: FunctionModel, runner: FakeRunner | ToolRunner, **limits: Any) -> ExecutorKit:
    return ExecutorKit(
        model=model,
        runner=runner,
        registry=runner.registry,
        counter=counter(),
        limits=ExecutorLimits(**limits),
    )


def scope(
    store: Any = None, role: UserRole = "staff", org_id: str = "acme", session_id: str = "sess_1"
) -> TurnScope:
    ctx = ToolContext(store=store, org_id=org_id, user_id="ada", role=role)
    return TurnScope(session_id=session_id, turn_id="turn_1", ctx=ctx)


def normalise(events: Sequence[Event]) -> list[Event]:
    """Events with the run-dependent numbers zeroed (durations, budget report bodies)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, StepCompleted):
            event = replace(event, duration_ms=0)
        elif isinstance(event, ContextBudget):
            event = replace(event, report={})
        out.append(event)
    return out
