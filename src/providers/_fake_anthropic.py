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
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from providers._fake_server import Exchange, json_exchange, sse_frames, transcript_chunks
from providers._model import TokenUsage, ToolCall
from providers._prices import price_for

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
    prefix up to it (keyed by the hash of the canonical prefix) for its ``ttl`` ("5m" when
    none is given); a later request reads the longest live prefix it shares with a
    written one, found at or up to 20 blocks before one of its own breakpoints (the API's
    lookback), and a read refreshes the entry's TTL. Tokens are estimated at 4 characters
    each; a prefix shorter than ``min_tokens`` is not cached, like the API's minimum
    (``None``: the request model's minimum cacheable length from the price table, 0 for
    an unknown model; the default 0 caches every marked prefix). So usage is derived
    from what was actually sent: a changed prefix reads nothing, a repeated one reads it
    all, and each written token is counted under the TTL of the breakpoint that wrote it
    (``cache_write_1h_tokens`` for "1h").
    ``clock`` (seconds, monotonic) lets a test age the cache.
    """

    LOOKBACK = 20
    TTL_S: ClassVar[dict[str, float]] = {"5m": 300.0, "1h": 3600.0}

    def __init__(
        self, *, min_tokens: int | None = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_tokens = min_tokens
        self.clock = clock
        self._entries: dict[str, tuple[float, float]] = {}  # prefix hash -> (expiry, TTL)
        self._lock = threading.Lock()

    def usage(self, body: Any, output_tokens: int) -> TokenUsage:
        """The usage of one request with ``body`` (and remember what it wrote)."""
        body = body if isinstance(body, dict) else {}
        blocks = _cache_blocks(body)
        keys, sizes, total = [], [], 0
        digest = hashlib.sha256()
        for text, _ in blocks:
            digest.update(text.encode())
            keys.append(digest.copy().hexdigest())
            total += -(-len(text) // 4)
            sizes.append(total)
        marks = {i: ttl for i, (_, ttl) in enumerate(blocks) if ttl is not None}
        least = self._least(body)
        with self._lock:
            now = self.clock()
            hit = self._hit(keys, marks, now)
            read = sizes[hit] if hit >= 0 else 0
            written, written_1h = 0, 0
            for b, ttl in marks.items():
                if sizes[b] < least:
                    continue
                self._keep(keys[b], now, self.TTL_S[ttl])
                if b > hit:
                    piece = sizes[b] - read - written
                    written += piece
                    written_1h += piece if ttl == "1h" else 0
        return TokenUsage(
            input_tokens=total - read - written,
            output_tokens=output_tokens,
            cache_read_tokens=read,
            cache_write_tokens=written,
            cache_write_1h_tokens=written_1h,
        )

    def _least(self, body: dict[str, Any]) -> int:
        if self.min_tokens is not None:
            return self.min_tokens
        price = price_for(str(body.get("model", "")))
        return price.min_cacheable_tokens if price is not None else 0

    def _hit(self, keys: list[str], marks: dict[int, str], now: float) -> int:
        """The last block of the longest live cached prefix a breakpoint finds (-1: none);
        the entry it reads lives on (the API refreshes a TTL on every read)."""
        live = [
            j
            for b in marks
            for j in range(max(b - self.LOOKBACK, 0), b + 1)
            if self._entries.get(keys[j], (0.0, 0.0))[0] > now
        ]
        if not live:
            return -1
        hit = max(live)
        self._keep(keys[hit], now, self._entries[keys[hit]][1])
        return hit

    def _keep(self, key: str, now: float, ttl_s: float) -> None:
        """Write or refresh an entry; it keeps the longer of its TTLs."""
        expiry, kept = self._entries.get(key, (0.0, 0.0))
        ttl_s = max(ttl_s, kept) if expiry > now else ttl_s
        self._entries[key] = (max(expiry, now + ttl_s), ttl_s)


def _cache_blocks(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The prompt's blocks in cache order, as canonical JSON without the cache directive,
    each with the TTL of its breakpoint (``None``: it carries none)."""
    blocks: list[dict[str, Any]] = list(body.get("tools") or [])
    system = body.get("system") or []
    blocks += [{"type": "text", "text": system}] if isinstance(system, str) else system
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks += [{"role": message.get("role"), **block} for block in content or []]
    out: list[tuple[str, str | None]] = []
    for block in blocks:
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        control = block.get("cache_control")
        ttl = str(control.get("ttl", "5m")) if isinstance(control, dict) else None
        out.append((json.dumps(plain, sort_keys=True), ttl))
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


def _usage(usage: TokenUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write_tokens - usage.cache_write_1h_tokens,
            "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
        },
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
