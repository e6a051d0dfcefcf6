"""One step's loop state, the tagged "next step" union the loop dispatches on, and the
pure decisions about bounds (when to wrap up, what a partial summary says)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from events import StepError, TextDelta
from executors._config import Emit, ExecutorKit, StepShare, TurnScope
from executors._prompt import StepPrompt, wrap_up_note
from executors._results import CutReason, PendingCall, StepEnd
from providers import Message, TokenUsage, ToolCall, ToolResult

WRAP_UP_SHARE = 0.2
"""Ask for a wrap-up once less than this share of the wall time is left."""
_LOG_LINES = 8


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for its next move, tools on."""


@dataclass(frozen=True, slots=True)
class WrapUp:
    """Ask the model for a final answer, tools off, saying what remains of each bound."""

    note: str
    reasons: tuple[str, ...]
    cut: CutReason  # the bound that asked for it (the first, when several did)


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run the tool calls of the model's last message, in order."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Suspend:
    """Stop for the user: the message's calls still to resolve, and those already run."""

    pending: tuple[PendingCall, ...]
    results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True, slots=True)
class Finish:
    ok: bool
    ended: StepEnd
    summary: str
    error: StepError | None = None  # why it is not ok
    cut: CutReason | None = None  # the bound that ended the work early, if one did


NextStep = CallModel | WrapUp | RunTools | Suspend | Finish


@dataclass(frozen=True, kw_only=True)
class StepEnv:
    """What a step's handlers read and never change."""

    step_id: str
    kit: ExecutorKit
    scope: TurnScope
    emit: Emit
    final_answer: bool  # stream text without step_id: it is the turn's answer
    goal: str = ""  # the step's goal: what its tool calls are for

    def text(self, delta: str) -> None:
        self.emit(TextDelta(delta=delta, step_id=None if self.final_answer else self.step_id))


@dataclass(kw_only=True)
class StepState:
    """What a step's handlers change: the append-only loop transcript and the counters."""

    prompt: StepPrompt
    max_calls: int
    started: float
    deadline: float
    share: StepShare = field(default_factory=StepShare)
    messages: list[Message] = field(default_factory=list)
    tool_calls: int = 0
    failed_tool_calls: int = 0  # of tool_calls, those whose outcome was not ok
    model_turns: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd_micros: int = 0
    model: str = ""
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    text: str = ""  # the model turn in progress
    last_text: str = ""  # the last finished model turn that said something
    streamed: bool = False
    log: list[str] = field(default_factory=list)  # "members.search ok", for partial summaries
    in_flight: str | None = None  # a tool_use_id started and not completed
    earlier_tokens: int = 0  # spent before a suspension, when this state resumed a step
    iterations: int = 0  # forced loop: model calls since the step (re)started
    told: list[str] = field(default_factory=list)  # forced loop: what the user was told
    wrap_noted: bool = False  # forced loop: the budget note was sent

    @property
    def tokens(self) -> int:
        u = self.usage
        spent = u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens
        return self.earlier_tokens + spent


def now() -> float:
    return asyncio.get_running_loop().time()


def next_turn(state: StepState, env: StepEnv, at: float) -> CallModel | WrapUp | Finish:
    """Call the model, or, when a bound is about to be hit, ask it to wrap up; a forced
    loop whose iterations are used up ends instead (``max_iterations``)."""
    limits = env.kit.limits
    if env.kit.forced and state.iterations >= limits.max_iterations:
        why = f"it used all {limits.max_iterations} iterations without calling idle"
        error = StepError(code="max_iterations", message=f"Stopped: {why}")
        return Finish(False, "max_iterations", partial_summary(state, why), error)
    calls_left = state.max_calls - state.tool_calls
    seconds_left = state.deadline - at
    reasons = _bounds_hit(state, env, calls_left=calls_left, seconds_left=seconds_left)
    if not reasons:
        return CallModel()
    wall_s = state.deadline - state.started
    note = wrap_up_note(
        [why for _, why in reasons],
        calls_left=calls_left,
        max_calls=state.max_calls,
        seconds_left=seconds_left,
        wall_time_s=wall_s,
    )
    cut = min((kind for kind, _ in reasons), key=CUT_ORDER.index)
    return WrapUp(note=note, reasons=tuple(why for _, why in reasons), cut=cut)


CUT_ORDER: tuple[CutReason, ...] = (
    "time_limit",
    "turn_budget",
    "max_model_turns",
    "max_tool_calls",
)
"""Which bound a wrap-up names when several asked for it: the one the user can least
avoid first (time, then money, then the agent's own limits)."""


def _bounds_hit(
    state: StepState, env: StepEnv, *, calls_left: int, seconds_left: float
) -> list[tuple[CutReason, str]]:
    """The bounds about to be hit, each with the line the wrap-up note gives it."""
    limits, share = env.kit.limits, state.share
    reasons: list[tuple[CutReason, str]] = []
    if state.prompt.parts.tools and calls_left <= 0:
        by_turn = share.tool_calls is not None and share.tool_calls <= state.max_calls
        reasons.append(
            ("turn_budget" if by_turn else "max_tool_calls",
             f"all {state.max_calls} tool calls of this step are used")
        )  # fmt: skip
    wall_s = state.deadline - state.started  # the step's wall time (its share may be less)
    if seconds_left < WRAP_UP_SHARE * wall_s:
        reasons.append(
            ("time_limit", f"less than {WRAP_UP_SHARE:.0%} of the step's wall time is left")
        )
    if not env.kit.forced and state.model_turns >= limits.max_model_turns - 1:
        reasons.append(
            ("max_model_turns",
             f"this is model turn {limits.max_model_turns} of {limits.max_model_turns}")
        )  # fmt: skip
    if share.tokens is not None and state.tokens >= (1 - WRAP_UP_SHARE) * share.tokens:
        reasons.append(
            ("turn_budget",
             f"this step's share of the turn's tokens ({share.tokens:,}) is nearly used")
        )  # fmt: skip
    if share.usd_micros is not None and state.cost_usd_micros >= (1 - WRAP_UP_SHARE) * (
        share.usd_micros
    ):
        reasons.append(
            ("turn_budget", "this step's share of the turn's cost budget is nearly used")
        )
    return reasons


def partial_summary(state: StepState, why: str) -> str:
    """What a step that did not finish tells the merge: why, what it called, its last words."""
    lines = [f"Incomplete: {why}."]
    if state.log:
        shown = state.log[-_LOG_LINES:]
        more = len(state.log) - len(shown)
        lines.append(
            "Tool calls: " + "; ".join(shown) + (f" (and {more} earlier)" if more else "") + "."
        )
    said = (state.text or state.last_text).strip()
    if said:
        lines.append(f"Last words: {said}")
    return "\n".join(lines)
