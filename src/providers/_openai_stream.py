"""Folding OpenAI chat-completion chunks into Bosun stream items, with no I/O.

``fold(state, chunk)`` returns the next state and the items the chunk completes: text as
it arrives, tool calls once their choice finishes (arguments arrive as JSON fragments
keyed by ``index``, several calls possibly interleaved). ``completion(state)`` gives the
closing ``Completion`` once the stream is over, or fails if the message never finished.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.completion_usage import CompletionUsage

from providers._model import (
    Completion,
    ModelError,
    StopReason,
    StreamItem,
    TextChunk,
    TokenUsage,
    ToolCall,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamState:
    """What a reply stream has said so far (the adapter's name is only used in errors)."""

    source: str
    model: str = ""
    calls: Mapping[int, PartialToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    called: bool = False
    refused: bool = False
    usage: TokenUsage | None = None


def fold(state: StreamState, chunk: ChatCompletionChunk) -> tuple[StreamState, list[StreamItem]]:
    """The state after ``chunk`` and the stream items it completes."""
    items: list[StreamItem] = []
    if chunk.model and not state.model:
        state = replace(state, model=chunk.model)
    if chunk.usage is not None:  # the last chunk (choices=[]), or with the finish on some servers
        state = replace(state, usage=token_usage(chunk.usage))
    for choice in chunk.choices:
        if choice.index:  # we never ask for n > 1; loose servers may send no index (None)
            continue
        delta = choice.delta
        if delta.content:
            items.append(TextChunk(text=delta.content))
        if delta.refusal:  # a structured-output refusal: the text explains it
            items.append(TextChunk(text=delta.refusal))
            state = replace(state, refused=True)
        if delta.tool_calls:
            state = replace(state, calls=_merge(state.calls, delta.tool_calls))
        if choice.finish_reason is not None and state.finish_reason is None:
            calls = [_tool_call(state, index) for index in sorted(state.calls)]
            items.extend(calls)
            state = replace(
                state,
                finish_reason=choice.finish_reason,
                calls={},
                called=state.called or bool(calls),
            )
    return state, items


def _merge(
    calls: Mapping[int, PartialToolCall], fragments: list[ChoiceDeltaToolCall]
) -> dict[int, PartialToolCall]:
    merged = dict(calls)
    for fragment in fragments:
        index = _index(merged, fragment)
        call = merged.get(index, PartialToolCall())
        name = fragment.function.name if fragment.function else None
        arguments = fragment.function.arguments if fragment.function else None
        merged[index] = PartialToolCall(
            id=call.id or fragment.id or "",
            # OpenAI sends the name once; some compatible servers repeat it in every fragment.
            name=call.name or name or "",
            arguments=call.arguments + (arguments or ""),
        )
    return merged


def _index(calls: Mapping[int, PartialToolCall], fragment: ChoiceDeltaToolCall) -> int:
    """The fragment's ``index``; servers that omit it send each call whole, with its own id."""
    if fragment.index is not None:
        return fragment.index
    if not calls:
        return 0
    last = max(calls)
    return last + 1 if fragment.id and fragment.id != calls[last].id else last


def _tool_call(state: StreamState, index: int) -> ToolCall:
    call = state.calls[index]
    if not call.name:
        raise ModelError(
            "provider_unavailable",
            f"{state.source} streamed tool call #{index} without a function name; retry the call",
        )
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        # Do not echo the arguments: they may quote the user's data.
        raise ModelError(
            "provider_unavailable",
            f"{state.source} streamed arguments for tool {call.name!r} that are not a JSON "
            f"object ({len(call.arguments)} characters); retry the call, or raise max_tokens "
            "if the reply was cut short",
        )
    # A few compatible servers send no call ids; the id only has to pair a call with its result.
    return ToolCall(id=call.id or f"call_{index}", name=call.name, input=arguments)


def token_usage(usage: CompletionUsage) -> TokenUsage:
    """OpenAI usage in Bosun's convention: cached prompt tokens are not input tokens.

    OpenAI counts cache hits inside ``prompt_tokens`` and charges no cache writes, so
    ``cache_write_tokens`` is always 0 (``prompt_tokens_details.cache_write_tokens`` is
    informational and stays billed as input).
    """
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens if details is not None else None) or 0
    return TokenUsage(
        input_tokens=(usage.prompt_tokens or 0) - cached,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached,
    )


def completion(state: StreamState, *, default_model: str) -> Completion:
    """The closing item of a stream that has ended; fails if no choice ever finished.

    Servers that send no usage chunk (some OpenAI-compatible ones ignore
    ``stream_options``) get zero usage rather than a failure.
    """
    if state.finish_reason is None:
        raise ModelError(
            "provider_unavailable",
            f"The {state.source} stream ended before the message was complete (no "
            "finish_reason was received); the reply so far is partial, retry the call",
        )
    return Completion(
        stop_reason=stop_reason(state.finish_reason, called=state.called, refused=state.refused),
        usage=state.usage or TokenUsage(),
        model=state.model or default_model,
    )


def stop_reason(finish_reason: str, *, called: bool, refused: bool) -> StopReason:
    """OpenAI's finish reason in Bosun's terms.

    Tool calls win over ``stop`` because some compatible servers (older Ollama) finish a
    tool-calling reply with ``stop``; unknown reasons from such servers count as an end.
    """
    if finish_reason == "length":
        return "max_tokens"
    if finish_reason == "content_filter" or refused:
        return "refusal"
    if called or finish_reason in ("tool_calls", "function_call"):
        return "tool_use"
    return "end_turn"
