"""Scripted replies in Anthropic's wire format, for ``FakeProvider`` (offline tests).

Point ``AnthropicModel`` (or any Anthropic SDK client) at a ``FakeServer`` and enqueue:

- ``anthropic_reply(...)``: a whole streamed message (text, tool calls, usage);
- ``anthropic_error(status)``: an HTTP error with Anthropic's JSON error body;
- ``anthropic_transcript(path)``: a recorded SSE transcript, replayed verbatim.

To break a stream mid-reply, cut any of them:
``dataclasses.replace(anthropic_reply(text="Hello"), cut_after=3)`` sends the first three
SSE frames and then drops the connection without finishing the body.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from providers._fake_server import Exchange, json_exchange, sse_frames, transcript_chunks
from providers._model import TokenUsage, ToolCall

SSE_HEADERS = (("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"))

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

Event = tuple[str | None, Any]
_NO_USAGE = TokenUsage()


class PromptCache:
    """A simulation of Anthropic's prompt cache, shared by the replies of one test.

    A request's prompt is its blocks in the API's cache order (each tool, each system
    block, each message content block). Every ``cache_control`` breakpoint writes the
    prefix up to it; a later request reads the longest prefix it shares with a written
    one, found at or up to 20 blocks before one of its own breakpoints (the API's
    lookback). Tokens are estimated at 4 characters each (``min_tokens``: prefixes
    shorter than this are not cached, like the API's minimum). So usage is derived from
    what was actually sent: a changed prefix reads nothing, a repeated one reads it all.
    """

    LOOKBACK = 20

    def __init__(self, *, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: Any, output_tokens: int) -> TokenUsage:
        """The usage of one request with ``body`` (and remember what it wrote)."""
        blocks = _cache_blocks(body if isinstance(body, dict) else {})
        keys, sizes, total = [], [], 0
        digest = hashlib.sha256()
        for text, _ in blocks:
            digest.update(text.encode())
            keys.append(digest.copy().hexdigest())
            total += -(-len(text) // 4)
            sizes.append(total)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        with self._lock:
            hit = max(
                (j for b in marks for j in range(max(b - self.LOOKBACK, 0), b + 1)
                 if keys[j] in self._written),
                default=-1,
            )  # fmt: skip
            last = marks[-1] if marks else -1
            for b in marks:
                if sizes[b] >= self.min_tokens:
                    self._written.add(keys[b])
        read = sizes[hit] if hit >= 0 else 0
        write = sizes[last] - read if last > hit and sizes[last] >= self.min_tokens else 0
        return TokenUsage(
            input_tokens=total - read - write,
            output_tokens=output_tokens,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )


def _cache_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt's blocks in cache order, as canonical JSON without the cache directive,
    each with whether it carries a breakpoint."""
    blocks: list[dict[str, Any]] = list(body.get("tools") or [])
    system = body.get("system") or []
    blocks += [{"type": "text", "text": system}] if isinstance(system, str) else system
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks += [{"role": message.get("role"), **block} for block in content or []]
    out = []
    for block in blocks:
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((json.dumps(plain, sort_keys=True), "cache_control" in block))
    return out


def anthropic_reply(
    *,
    text: str = "",
    tool_calls: Iterable[ToolCall] = (),
    usage: TokenUsage = _NO_USAGE,
    stop_reason: str | None = None,
    model: str = "claude-haiku-4-5",
    text_chunk_size: int | None = None,
    json_chunk_size: int | None = None,
    cache: PromptCache | None = None,
) -> Exchange:
    """A complete streamed message, framed the way the Messages API sends it.

    ``text`` becomes one text block and each tool call a ``tool_use`` block; the chunk
    sizes split text and tool-input JSON into deltas of that many characters (default:
    one delta each). ``stop_reason`` defaults to ``tool_use`` when there are tool calls,
    else ``end_turn``; any raw Anthropic value (``"pause_turn"``) may be given. With a
    ``cache``, the input and cache figures of ``usage`` are computed from the request
    when it arrives (``PromptCache``); only its ``output_tokens`` are used.
    """
    if cache is not None:

        def respond(body: Any) -> tuple[bytes, ...]:
            reply = anthropic_reply(
                text=text, tool_calls=tool_calls, usage=cache.usage(body, usage.output_tokens),
                stop_reason=stop_reason, model=model, text_chunk_size=text_chunk_size,
                json_chunk_size=json_chunk_size,
            )  # fmt: skip
            return reply.chunks

        tool_calls = tuple(tool_calls)
        return Exchange(headers=SSE_HEADERS, respond=respond)
    calls = tuple(tool_calls)
    events: list[Event] = [("message_start", _message_start(model, usage))]
    blocks: list[list[Event]] = []
    if text:
        blocks.append(_text_block(len(blocks), text, text_chunk_size))
    for call in calls:
        blocks.append(_tool_block(len(blocks), call, json_chunk_size))
    for number, block in enumerate(blocks):
        events += block[:1]
        if number == 0:
            events.append(("ping", {"type": "ping"}))  # the API pings after the first start
        events += block[1:]
    if not blocks:
        events.append(("ping", {"type": "ping"}))
    stop = stop_reason or ("tool_use" if calls else "end_turn")
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": _usage(usage, usage.output_tokens),
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Exchange(headers=SSE_HEADERS, chunks=sse_frames(events))


def anthropic_error(
    status: int,
    error_type: str | None = None,
    message: str | None = None,
    *,
    retry_after_ms: int | None = None,
) -> Exchange:
    """An HTTP error reply with Anthropic's body ``{"type": "error", "error": {...}}``.

    ``error_type`` defaults to the one the API uses for ``status`` (529:
    ``overloaded_error``, 429: ``rate_limit_error``, ...); ``retry_after_ms`` adds the
    header the SDK's retry loop honours (1 keeps retry tests fast).
    """
    kind = error_type or _ERROR_TYPES.get(status, "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message or kind}}
    headers = () if retry_after_ms is None else (("retry-after-ms", str(retry_after_ms)),)
    return json_exchange(status, body, headers)


def anthropic_transcript(text_or_path: str | Path) -> Exchange:
    """A recorded SSE transcript replayed frame by frame.

    A ``Path``, or a string without a newline, is read as a file; other strings are the
    transcript itself.
    """
    if isinstance(text_or_path, Path) or "\n" not in text_or_path:
        text = Path(text_or_path).read_text(encoding="utf-8")
    else:
        text = text_or_path
    return Exchange(headers=SSE_HEADERS, chunks=transcript_chunks(text))


def _message_start(model: str, usage: TokenUsage) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_fake_01",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(usage, min(usage.output_tokens, 1)),
        },
    }


def _usage(usage: TokenUsage, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": output_tokens,
    }


def _pieces(text: str, size: int | None) -> list[str]:
    if not size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text_block(index: int, text: str, size: int | None) -> list[Event]:
    return [
        _start(index, {"type": "text", "text": ""}),
        *(_delta(index, {"type": "text_delta", "text": piece}) for piece in _pieces(text, size)),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _tool_block(index: int, call: ToolCall, size: int | None) -> list[Event]:
    arguments = json.dumps(call.input) if call.input else ""
    # Like the API: an empty first fragment, then the JSON in pieces.
    pieces = ["", *_pieces(arguments, size)] if arguments else [""]
    return [
        _start(index, {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
        *(_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in pieces),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _start(index: int, block: dict[str, Any]) -> Event:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def _delta(index: int, delta: dict[str, Any]) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
