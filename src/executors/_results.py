"""What running a step gives back: a ``StepResult``, or ``Suspended`` waiting for the user.

A suspended step lists every call of the assistant message that stopped it; the turn
persists them and emits the pending events (``pending_events``) before ``done``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from context import BudgetReport
from events import (
    Candidate,
    ConfirmationPending,
    DisambiguationPending,
    QuestionPending,
    StepError,
)
from providers import Message, TokenUsage, ToolResult
from tools import Needs

StepEnd = Literal[
    "answered",
    "wrapped_up",
    "overran",
    "timed_out",
    "model_failed",
    "skipped",
    "max_steps",
    "idle",
    "no_tool_call",
    "max_iterations",
]
"""How a step ended: ``answered`` on its own; ``wrapped_up`` when told its budget was
nearly spent; ``overran`` a bound even so; ``timed_out`` at the wall-time deadline;
``model_failed`` on a provider error; ``skipped`` because a dependency failed; ``max_steps``
when the turn's executors had used every model turn its agent allows (``StepCounter``).
A forced-tools step ends ``idle`` when it called ``idle``, ``no_tool_call`` when a reply
called no tool, ``max_iterations`` when its iteration limit ran out."""

CutReason = Literal["max_model_turns", "time_limit", "turn_budget", "max_tool_calls"]
"""Why a step's work was cut short, which a cut answer's ``message_done.stop_reason``
says: the executor's model-turn limit, the step's or turn's wall time, the turn's token or
cost budget, the step's tool-call limit (docs/api.md#stop-reasons)."""

ConfirmKind = Literal["destructive", "always"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """A finished step. ``summary`` is the executor's final answer (or a partial summary
    saying what stopped it); ``tokens`` is every token of its model calls (input, output,
    cache reads and writes); ``messages`` is the loop transcript after the fixed prompt."""

    step_id: str
    ok: bool
    summary: str
    ended: StepEnd
    tool_calls: int = 0
    failed_tool_calls: int = 0
    error: StepError | None = None  # why it is not ok
    tokens: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd_micros: int = 0
    model: str = ""
    duration_ms: int = 0
    messages: tuple[Message, ...] = ()
    budget: BudgetReport | None = None  # None for a skipped step: it built no prompt
    cut: CutReason | None = None  # a bound ended its work early (wrapped up, overran, timed out)
    said: bool | None = None  # its model wrote text (None: unknown, as for a restored step)


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingCall:
    """One call of the suspending assistant message, in message order.

    ``needs`` says what the user must do first: approve (``confirm`` says why), pick one of
    ``candidates`` (the picker's ``kind`` and ``prompt``), answer a question (``prompt``
    is the question, ``options`` the suggested answers), or nothing (``None``): such a
    call runs, in order, once the others are resolved.
    """

    tool_use_id: str
    tool: str
    input: dict[str, Any]
    needs: Needs | None = None
    confirm: ConfirmKind | None = None
    kind: str | None = None
    prompt: str | None = None
    candidates: tuple[Candidate, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Suspended:
    """A step stopped for the user. Nothing after the suspending call has run.

    ``pending`` are the calls still to resolve or run; ``results`` the results of calls of
    the same message that already ran (they precede ``pending``), so a resume can send the
    message's results together. ``messages`` ends with the assistant message that asked;
    with the counters, it is what ``resume_step`` goes on from.
    """

    step_id: str
    pending: tuple[PendingCall, ...]
    results: tuple[ToolResult, ...] = ()
    tool_calls: int = 0
    failed_tool_calls: int = 0
    model_turns: int = 0
    log: tuple[str, ...] = ()  # the loop's "tool ok" lines, for a partial summary later
    tokens: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd_micros: int = 0
    model: str = ""
    duration_ms: int = 0
    messages: tuple[Message, ...] = ()
    budget: BudgetReport | None = None


StepOutcome = StepResult | Suspended


def picker_fields(data: Mapping[str, Any]) -> tuple[str, str, tuple[Candidate, ...]]:
    """The kind, prompt and candidates of a user-picker call's (validated) input."""
    candidates = tuple(
        Candidate(id=str(c["id"]), label=str(c["label"]), sublabel=c.get("sublabel"))
        for c in data.get("candidates", ())
        if isinstance(c, Mapping) and "id" in c and "label" in c
    )
    return str(data.get("kind", "item")), str(data.get("prompt", "")), candidates


PendingEvent = ConfirmationPending | DisambiguationPending | QuestionPending


def pending_events(suspended: Suspended) -> list[PendingEvent]:
    """The events a suspended step's caller emits, one per call that needs the user."""
    events: list[PendingEvent] = []
    for call in suspended.pending:
        match call.needs:
            case "confirmation":
                assert call.confirm is not None, call
                events.append(
                    ConfirmationPending(
                        tool_use_id=call.tool_use_id,
                        tool=call.tool,
                        input=call.input,
                        confirm=call.confirm,
                    )
                )
            case "pick":
                events.append(
                    DisambiguationPending(
                        tool_use_id=call.tool_use_id,
                        kind=call.kind or "item",
                        prompt=call.prompt or "",
                        candidates=list(call.candidates),
                    )
                )
            case "answer":
                events.append(
                    QuestionPending(
                        tool_use_id=call.tool_use_id,
                        question=call.prompt or "",
                        options=list(call.options),
                    )
                )
            case None:
                pass
    return events
