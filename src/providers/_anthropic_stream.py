"""Fold Anthropic's raw stream events into Bosun stream items, purely (STYLE.md 7).

``fold(state, event)`` returns the next state and the items to yield; the adapter's I/O
loop only feeds events in and checks ``state.done`` when the stream ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextDelta,
    ToolUseBlock,
)

from providers._model import (
    Completion,
    ModelError,
    StopReason,
    StreamItem,
    TextChunk,
    TokenUsage,
    ToolCall,
)

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    # The reply was cut short by the context window: a length limit, like max_tokens.
    "model_context_window_exceeded": "max_tokens",
    # Anthropic paused a long turn (server tools, which Bosun does not send); like
    # max_tokens, the reply is unfinished and continues if sent back as it is.
    "pause_turn": "max_tokens",
}


def stop_reason(raw: str | None) -> StopReason:
    """Bosun's stop reason for Anthropic's.

    An unknown (newer) or missing reason maps to ``max_tokens``, the one reason that
    says "this reply may be unfinished": claiming ``end_turn`` for a reply we cannot
    vouch for would pass a possibly truncated answer off as complete.
    """
    return _STOP_REASONS.get(raw or "", "max_tokens")


@dataclass(frozen=True, kw_only=True, slots=True)
class _PendingTool:
    id: str
    name: str
    json: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamState:
    """What the fold knows so far about one reply.

    ``schema_tool`` names the forced tool of a structured-output request: its input is
    yielded as the JSON text of the reply instead of as a ``ToolCall``.
    """

    model: str
    schema_tool: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    raw_stop_reason: str | None = None
    pending: Mapping[int, _PendingTool] = field(default_factory=dict)
    called_tools: bool = False
    answered_schema: bool = False
    broken_tool: str | None = None
    done: bool = False


Fold = tuple[StreamState, list[StreamItem]]


def fold(state: StreamState, event: RawMessageStreamEvent) -> Fold:
    """The state after ``event`` and the Bosun items it produces (often none)."""
    if state.done:
        return state, []  # nothing after message_stop counts
    match event:
        case RawMessageStartEvent():
            usage = event.message.usage
            split = usage.cache_creation  # by TTL; only message_start carries it
            return replace(
                state,
                model=event.message.model or state.model,
                usage=TokenUsage(
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_input_tokens or 0,
                    cache_write_tokens=usage.cache_creation_input_tokens or 0,
                    cache_write_1h_tokens=split.ephemeral_1h_input_tokens if split else 0,
                ),
            ), []
        case RawContentBlockStartEvent():
            return _block_start(state, event)
        case RawContentBlockDeltaEvent():
            return _block_delta(state, event)
        case RawContentBlockStopEvent():
            return _block_stop(state, event.index)
        case RawMessageDeltaEvent():
            return _message_delta(state, event), []
        case RawMessageStopEvent():
            return replace(state, done=True), [_completion(state)]
    return state, []  # event types newer than this adapter carry nothing Bosun uses


def _block_start(state: StreamState, event: RawContentBlockStartEvent) -> Fold:
    block = event.content_block
    if isinstance(block, ToolUseBlock):
        pending = {**state.pending, event.index: _PendingTool(id=block.id, name=block.name)}
        return replace(state, pending=pending), []
    if isinstance(block, TextBlock) and block.text and state.schema_tool is None:
        return state, [TextChunk(text=block.text)]
    return state, []  # thinking and server-tool blocks are not part of Bosun's reply


def _block_delta(state: StreamState, event: RawContentBlockDeltaEvent) -> Fold:
    delta = event.delta
    if isinstance(delta, TextDelta):
        # In structured-output mode only the schema tool's JSON is the reply text.
        if delta.text and state.schema_tool is None:
            return state, [TextChunk(text=delta.text)]
        return state, []
    if isinstance(delta, InputJSONDelta) and event.index in state.pending:
        tool = state.pending[event.index]
        grown = replace(tool, json=tool.json + delta.partial_json)
        return replace(state, pending={**state.pending, event.index: grown}), []
    return state, []


def _block_stop(state: StreamState, index: int) -> Fold:
    tool = state.pending.get(index)
    if tool is None:
        return state, []
    pending = {i: t for i, t in state.pending.items() if i != index}
    state = replace(state, pending=pending)
    arguments = _arguments(tool.json)
    if arguments is None:
        # Decided at message_stop: fine if the reply hit max_tokens, a failure otherwise.
        return replace(state, broken_tool=tool.name), []
    if tool.name == state.schema_tool:
        return replace(state, answered_schema=True), [TextChunk(text=json.dumps(arguments))]
    call = ToolCall(id=tool.id, name=tool.name, input=arguments)
    return replace(state, called_tools=True), [call]


def _arguments(text: str) -> dict[str, Any] | None:
    """The tool input object, ``{}`` for an empty one, ``None`` if it is not an object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _message_delta(state: StreamState, event: RawMessageDeltaEvent) -> StreamState:
    usage = event.usage  # cumulative: the last message_delta wins
    before = state.usage
    written = _pick(usage.cache_creation_input_tokens, before.cache_write_tokens)
    return replace(
        state,
        raw_stop_reason=event.delta.stop_reason or state.raw_stop_reason,
        usage=TokenUsage(
            input_tokens=_pick(usage.input_tokens, before.input_tokens),
            output_tokens=usage.output_tokens,
            cache_read_tokens=_pick(usage.cache_read_input_tokens, before.cache_read_tokens),
            cache_write_tokens=written,
            cache_write_1h_tokens=min(before.cache_write_1h_tokens, written),
        ),
    )


def _pick(reported: int | None, known: int) -> int:
    return known if reported is None else reported


def _completion(state: StreamState) -> Completion:
    stop = stop_reason(state.raw_stop_reason)
    if state.broken_tool is not None and stop != "max_tokens":
        raise ModelError(
            "provider_unavailable",
            f"Anthropic sent input for tool {state.broken_tool!r} that is not a JSON object "
            f"(stop reason {state.raw_stop_reason!r}); retry the request",
        )
    if stop == "tool_use" and state.answered_schema and not state.called_tools:
        stop = "end_turn"  # the forced schema tool is how the answer arrived, not a tool call
    return Completion(stop_reason=stop, usage=state.usage, model=state.model)
