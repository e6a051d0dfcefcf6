"""Scripted replies in OpenAI's chat-completions wire format, for ``FakeProvider``.

Public so users can test against the real ``openai`` SDK offline: point ``OpenAIModel``
(or any OpenAI client) at a ``FakeServer`` and enqueue ``openai_reply(...)``,
``openai_error(...)`` or a recorded ``openai_transcript(...)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from providers._fake_server import Exchange, json_exchange, sse_frames, transcript_chunks
from providers._model import TokenUsage, ToolCall

_SSE_HEADERS = (("content-type", "text/event-stream; charset=utf-8"),)
_CREATED = 1_767_225_600  # fixed, so replies are reproducible
_FINGERPRINT = "fp_fake0000"
_NO_USAGE = TokenUsage()


def openai_reply(
    *,
    text: str = "",
    tool_calls: Sequence[ToolCall] = (),
    usage: TokenUsage = _NO_USAGE,
    finish_reason: str | None = None,
    model: str = "gpt-4.1-mini",
    text_chunk_size: int | None = None,
    args_chunk_size: int | None = None,
    include_usage: bool = True,
) -> Exchange:
    """A streamed chat completion as OpenAI sends it with ``include_usage``.

    A role chunk, the text (in pieces of ``text_chunk_size`` characters, else whole), each
    tool call (name first, then arguments in pieces of ``args_chunk_size``), the finish
    chunk (``tool_calls`` or ``stop`` unless given), a usage chunk with ``choices=[]``,
    then ``[DONE]``. ``usage`` is in Bosun's convention and is converted back: OpenAI's
    ``prompt_tokens`` include the cached ones.
    """
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
    deltas += [{"content": piece} for piece in _pieces(text, text_chunk_size)]
    for index, call in enumerate(tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in _pieces(json.dumps(call.input), args_chunk_size)
        ]
    events = [_chunk(model, delta) for delta in deltas]
    reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    events.append(_chunk(model, {}, finish_reason=reason))
    if include_usage:
        events.append({**_chunk(model, {}), "choices": [], "usage": _wire_usage(usage)})
    return Exchange(
        headers=_SSE_HEADERS,
        chunks=(*sse_frames([(None, event) for event in events]), b"data: [DONE]\n\n"),
    )


def openai_error(
    status: int,
    error_type: str,
    message: str,
    *,
    code: str | None = None,
    retry_after_ms: int | None = None,
) -> Exchange:
    """An error reply with OpenAI's body; ``retry_after_ms`` makes SDK retries fast."""
    headers = () if retry_after_ms is None else (("retry-after-ms", str(retry_after_ms)),)
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return json_exchange(status, body, headers)


def openai_transcript(text_or_path: str | Path) -> Exchange:
    """Replay a recorded SSE transcript verbatim: a ``Path`` is read, a ``str`` is the text."""
    text = (
        text_or_path.read_text(encoding="utf-8") if isinstance(text_or_path, Path) else text_or_path
    )
    return Exchange(headers=_SSE_HEADERS, chunks=transcript_chunks(text))


def _chunk(
    model: str, delta: dict[str, Any], *, finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake0000000000000000000000",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "service_tier": "default",
        "system_fingerprint": _FINGERPRINT,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
    }


def _pieces(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    if size is None:
        return [text]
    assert size > 0, f"chunk size must be positive, got {size!r}"
    return [text[start : start + size] for start in range(0, len(text), size)]


def _wire_usage(usage: TokenUsage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
