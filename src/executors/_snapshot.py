"""A suspended plan as a log event, and back: the turn resumes from the log, not memory.

``suspension_event`` writes everything a resume needs into one ``turn_suspended`` event
(the plan, the finished steps' results, each suspended step's transcript, pending calls
and counters); ``restore`` rebuilds them, in a later request or another process. Finished
steps keep what the merge and dependent steps read (summaries, counters), not their
transcripts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, assert_never

from events import Candidate, StepError, TurnSuspended
from executors._results import PendingCall, StepResult, Suspended
from executors._schedule import PlanSuspended
from planner import Plan
from providers import Message, Part, TextPart, TokenUsage, ToolCall, ToolResult


def suspension_event(plan: Plan, outcome: PlanSuspended) -> TurnSuspended:
    """The ``turn_suspended`` event that lets ``outcome`` resume later."""
    return TurnSuspended(
        plan=plan.model_dump(mode="json"),
        results=[_result_data(r) for r in outcome.results],
        steps=[_suspended_data(s) for s in outcome.suspended],
        not_started=list(outcome.not_started),
    )


def restore(data: Mapping[str, Any]) -> tuple[Plan, PlanSuspended]:
    """The plan and suspended outcome a ``turn_suspended`` event's data stands for."""
    plan = Plan.model_validate(data["plan"])
    outcome = PlanSuspended(
        results=tuple(_result_of(r) for r in data["results"]),
        suspended=tuple(_suspended_of(s) for s in data["steps"]),
        not_started=tuple(data.get("not_started", ())),
    )
    return plan, outcome


def _counters(item: StepResult | Suspended) -> dict[str, Any]:
    return {
        "step_id": item.step_id,
        "tool_calls": item.tool_calls,
        "failed_tool_calls": item.failed_tool_calls,
        "tokens": item.tokens,
        "usage": asdict(item.usage),
        "cost_usd_micros": item.cost_usd_micros,
        "model": item.model,
        "duration_ms": item.duration_ms,
    }


def _counters_of(data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "step_id": str(data["step_id"]),
        "tool_calls": int(data["tool_calls"]),
        "failed_tool_calls": int(data.get("failed_tool_calls", 0)),  # absent in older logs
        "tokens": int(data["tokens"]),
        "usage": TokenUsage(**data["usage"]),
        "cost_usd_micros": int(data["cost_usd_micros"]),
        "model": str(data["model"]),
        "duration_ms": int(data["duration_ms"]),
    }


def _result_data(result: StepResult) -> dict[str, Any]:
    error = None if result.error is None else asdict(result.error)
    return {
        **_counters(result), "ok": result.ok, "summary": result.summary,
        "ended": result.ended, "error": error, "cut": result.cut, "said": result.said,
    }  # fmt: skip


def _result_of(data: Mapping[str, Any]) -> StepResult:
    error = data.get("error")
    return StepResult(
        **_counters_of(data), ok=bool(data["ok"]), summary=str(data["summary"]),
        ended=data["ended"], error=None if error is None else StepError(**error),
        cut=data.get("cut"), said=data.get("said"),  # absent in older logs
    )  # fmt: skip


def _suspended_data(step: Suspended) -> dict[str, Any]:
    return {
        **_counters(step),
        "model_turns": step.model_turns,
        "log": list(step.log),
        "pending": [asdict(call) for call in step.pending],
        "results": [asdict(result) for result in step.results],
        "messages": [_message_data(m) for m in step.messages],
    }


def _suspended_of(data: Mapping[str, Any]) -> Suspended:
    return Suspended(
        **_counters_of(data),
        model_turns=int(data["model_turns"]),
        log=tuple(data["log"]),
        pending=tuple(_pending_of(p) for p in data["pending"]),
        results=tuple(ToolResult(**r) for r in data["results"]),
        messages=tuple(_message_of(m) for m in data["messages"]),
    )


def _pending_of(data: Mapping[str, Any]) -> PendingCall:
    candidates = tuple(Candidate(**c) for c in data.get("candidates", ()))
    options = tuple(str(o) for o in data.get("options", ()))  # absent in older logs
    return PendingCall(**{**data, "candidates": candidates, "options": options})


def _message_data(message: Message) -> dict[str, Any]:
    return {"role": message.role, "parts": [_part_data(p) for p in message.parts]}


def _part_data(part: Part) -> dict[str, Any]:
    match part:
        case TextPart():
            return {"kind": "text", **asdict(part)}
        case ToolCall():
            return {"kind": "tool_call", **asdict(part)}
        case ToolResult():
            return {"kind": "tool_result", **asdict(part)}
        case _:
            assert_never(part)


def _message_of(data: Mapping[str, Any]) -> Message:
    return Message(role=data["role"], parts=tuple(_part_of(p) for p in data["parts"]))


def _part_of(data: Mapping[str, Any]) -> Part:
    fields = {k: v for k, v in data.items() if k != "kind"}
    match data["kind"]:
        case "text":
            return TextPart(**fields)
        case "tool_call":
            return ToolCall(**fields)
        case "tool_result":
            return ToolResult(**fields)
        case kind:
            raise ValueError(f"Unknown message part kind {kind!r} in a turn_suspended event")
