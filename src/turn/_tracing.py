"""A turn's spans and their attributes (OpenTelemetry GenAI conventions, ``telemetry``).

``invoke_agent {agent}`` is the turn's root; ``chat {model}`` is one model call, with its
tokens, finish reason and Bosun's cost. Only names, ids, codes and counts: message text
only when the operator opted in to content capture (``telemetry.content``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import PurePath

import telemetry
from providers import (
    Completion,
    ModelError,
    ModelRequest,
    Part,
    ScriptExhaustedError,
    TextPart,
    ToolCall,
)
from store import UsageRecord

FINISH_REASONS = {
    "end_turn": "stop", "tool_use": "tool_call", "max_tokens": "length",
    "stop_sequence": "stop", "refusal": "content_filter",
}  # fmt: skip
"""Bosun's stop reasons as the conventions' finish reasons."""


def provider_and_model(spec: str) -> tuple[str, str]:
    """``anthropic:claude-x`` as ``("anthropic", "claude-x")``; a test double's name
    (``scripted``, ``function``) is its own provider, a script file its stem."""
    provider, _, model = spec.partition(":")
    if provider == "scripted" and model:  # a script file's path: its name says enough
        model = PurePath(model).stem
    return provider, model or provider


def error_type(exc: BaseException) -> str:
    """A failure's low-cardinality ``error.type``: a provider's classified code, else the
    exception's class name."""
    if isinstance(exc, ModelError):
        return str(exc.code)
    if isinstance(exc, ScriptExhaustedError):
        return "script_exhausted"
    return "cancelled" if type(exc).__name__ == "CancelledError" else type(exc).__name__


class ChatSpan:
    """One model call's ``chat`` span and GenAI metrics (nothing when tracing is off)."""

    def __init__(self, model: str, role: str, conversation: str | None) -> None:
        provider, name = provider_and_model(model)
        self.attributes: telemetry.Attributes = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
            "gen_ai.request.model": name,
        }  # fmt: skip
        extra = {"bosun.role": role}
        if conversation is not None:
            extra["gen_ai.conversation.id"] = conversation
        self.span = telemetry.start(f"chat {name}", {**self.attributes, **extra})
        self.started = time.perf_counter()

    def request(self, request: ModelRequest) -> None:
        """The request's content, when the operator opted in to capturing it."""
        if not self.span.is_recording():
            return
        messages = [
            {"role": m.role, "parts": [_part(p) for p in m.parts]} for m in request.messages
        ]
        if (captured := telemetry.content(messages)) is not None:
            self.span.set_attribute("gen_ai.input.messages", captured)

    def end(
        self,
        completion: Completion | None,
        record: UsageRecord | None,
        failure: BaseException | None,
    ) -> None:
        """Close the span with what the call returned (or why it failed) and record the
        GenAI metrics."""
        span, attributes = self.span, dict(self.attributes)
        if completion is not None:
            _answered(span, completion, record)
            attributes["gen_ai.response.model"] = provider_and_model(completion.model)[1]
        if failure is not None:
            kind = error_type(failure)
            telemetry.fail(span, kind)
            attributes["error.type"] = kind
        usage = completion.usage if completion is not None else None
        telemetry.model_call(
            attributes,
            input_tokens=_input_tokens(usage) if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            duration_s=time.perf_counter() - self.started,
        )
        span.end()


def _part(part: Part) -> dict[str, object]:
    """A message part in the conventions' shape (``gen_ai.input.messages``)."""
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    if isinstance(part, ToolCall):
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.input}
    return {"type": "tool_call_response", "id": part.tool_use_id, "result": part.content}


def _input_tokens(usage: object) -> int:
    """The conventions count cache reads and writes inside the input tokens."""
    return int(
        usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens  # type: ignore[attr-defined]
    )


def _answered(span: telemetry.SpanLike, completion: Completion, record: UsageRecord | None) -> None:
    if not span.is_recording():
        return
    usage = completion.usage
    span.set_attributes({
        "gen_ai.response.model": provider_and_model(completion.model)[1],
        "gen_ai.response.finish_reasons": [FINISH_REASONS.get(completion.stop_reason, "stop")],
        "gen_ai.usage.input_tokens": _input_tokens(usage),
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
    })  # fmt: skip
    if record is not None:
        span.set_attribute("bosun.cost_usd_micros", record.cost_usd_micros)


def turn_attributes(
    agent: str, *, session_id: str, turn_id: str, org_id: str, resumed: bool, takeover: bool
) -> telemetry.Attributes:
    """The root span's attributes: who runs, in which conversation, which attempt."""
    return {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": session_id, "bosun.turn.id": turn_id,
        "bosun.org.id": org_id, "bosun.turn.resumed": resumed, "bosun.turn.takeover": takeover,
    }  # fmt: skip


def plan_attributes(strategy: str, steps: Sequence[object], attempts: int) -> telemetry.Attributes:
    return {"bosun.plan.strategy": strategy, "bosun.plan.steps": len(steps),
            "bosun.plan.attempts": attempts}  # fmt: skip
