"""What executors are given: limits, the shared kit of a turn, its scope, the emit callback.

Small config objects grouped by concern (STYLE.md 8). The runner is a protocol so tests can
pass a fake with the same two methods and production passes ``tools.ToolRunner``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from context import (
    EXECUTOR_BUDGET,
    ClientContext,
    History,
    Item,
    RoleBudget,
    TokenCounter,
    UserData,
    caller_block,
)
from events import Event
from providers import Model
from tools import ToolCallRequest, ToolContext, ToolDef, ToolOutcome, ToolRegistry, UserRole

Emit = Callable[[Event], None]
"""Receives every event in order; the turn appends them to the session log."""
Loop = Literal["default", "forced_tools"]
"""How an executor loops: ``default`` (tools optional, the answer is free text) or
``forced_tools`` (every model call must call a tool; it talks through the communication
tools and ends with ``idle``, see docs/executors.md)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorLimits:
    """The bounds of one executor's tool loop (the reference system's defaults).

    A step's ``max_tool_calls`` from the plan caps ``max_tool_calls`` further.
    ``max_result_tokens`` is what one tool result may take in the loop: each result is
    fitted once, when it arrives, and cut past it (the model can ask for less data).
    ``max_iterations`` bounds the forced-tools loop instead of ``max_model_turns``: its
    model calls since the step started or the user last answered (trainer spec §3.2).
    """

    max_tool_calls: int = 10
    wall_time_s: float = 60.0
    retries_per_tool: int = 2
    max_model_turns: int = 12
    max_result_tokens: int = 300
    max_iterations: int = 10

    def __post_init__(self) -> None:
        if self.max_tool_calls < 0 or self.retries_per_tool < 0:
            raise ValueError(
                f"Executor limits must not be negative ({self.max_tool_calls=}, "
                f"{self.retries_per_tool=})"
            )
        if self.max_iterations < 1:
            raise ValueError(f"Executor limits need max_iterations >= 1 ({self.max_iterations=})")
        if self.wall_time_s <= 0 or self.max_model_turns < 1 or self.max_result_tokens < 1:
            raise ValueError(
                f"Executor limits need wall_time_s > 0, max_model_turns >= 1 and "
                f"max_result_tokens >= 1 ({self.wall_time_s=}, {self.max_model_turns=}, "
                f"{self.max_result_tokens=})"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class StepShare:
    """One step's share of its turn's budget (``None``: no limit of that kind): tokens of
    model calls, their cost in micro-dollars, tool calls, and wall time. Like the step's
    own limits, a share about to run out asks the executor to wrap up."""

    tokens: int | None = None
    usd_micros: int | None = None
    tool_calls: int | None = None
    wall_s: float | None = None

    def split(self, parts: int, *, keep: float = 0.0) -> StepShare:
        """This share divided evenly among ``parts`` steps, after holding back ``keep``
        (a fraction, e.g. for the merge); wall time is not divided: steps run in parallel."""
        parts = max(parts, 1)

        def cut(value: int | None) -> int | None:
            return None if value is None else max(int(value * (1 - keep)) // parts, 0)

        return StepShare(
            tokens=cut(self.tokens),
            usd_micros=cut(self.usd_micros),
            tool_calls=None if self.tool_calls is None else max(self.tool_calls // parts, 1),
            wall_s=None if self.wall_s is None else self.wall_s * (1 - keep),
        )


class ToolRunnerLike(Protocol):
    """The runner methods executors use (``tools.ToolRunner`` implements them).

    ``check`` is the side-effect-free pre-flight (unknown tool, role, capabilities, input):
    the tool's declaration if the call may go ahead, else the refusal as an outcome.
    """

    def check(self, call: ToolCallRequest, role: UserRole) -> ToolDef | ToolOutcome: ...

    def defers(self, tool: ToolDef) -> bool:
        """Whether a call of ``tool`` that needs approval is queued rather than waited for."""
        ...

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome: ...


@dataclass(frozen=True, kw_only=True)
class ExecutorKit:
    """What every executor of a turn shares: the executor model, the tools and their runner,
    the token counter for that model, the executor budget and limits, and the agent
    profile's ``identity`` prompt (empty: none), so steps speak as the same agent.
    ``loop`` is the agent's loop; a ``forced_tools`` step is also offered the
    communication tools of ``registry`` whatever its plan gave it. ``history`` is the
    session so far, for a step that continues the conversation (a ``tool`` plan's step, a
    forced loop): fitted into the budget's ``conversation`` section and sent natively
    before the step's goal."""

    model: Model
    runner: ToolRunnerLike
    registry: ToolRegistry
    counter: TokenCounter
    budget: RoleBudget = EXECUTOR_BUDGET
    limits: ExecutorLimits = field(default_factory=ExecutorLimits)
    identity: str = ""
    steps: StepCounter | None = None  # the agent's step limit for the whole turn
    user_data: UserData | None = None  # the agent's user-data block, loaded every call
    loop: Loop = "default"
    knowledge: tuple[Item, ...] = ()  # the turn's loaded sources: every step gets them whole
    history: History | None = None
    client: ClientContext | None = None  # the request's client context, with every goal
    to_user: bool = False  # the steps' text is what the user reads: reply in their locale

    @property
    def forced(self) -> bool:
        return self.loop == "forced_tools"


@dataclass(slots=True)
class StepCounter:
    """The model turns (steps) a turn's executors may take in all, shared by its steps:
    an agent's ``max_steps``. ``take`` counts one, or says there is none left."""

    limit: int
    used: int = 0

    def take(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True


@dataclass(frozen=True, kw_only=True)
class TurnScope:
    """Whose turn this is: the ids tool calls are recorded under and the tool context
    (store, org, user, role) every handler runs with."""

    session_id: str
    turn_id: str
    ctx: ToolContext

    @property
    def role(self) -> UserRole:
        return self.ctx.role

    @property
    def caller(self) -> str:
        """The org/user block's line for this turn's caller (``context.caller_block``)."""
        return caller_block(org_id=self.ctx.org_id, user_id=self.ctx.user_id, role=self.role)
