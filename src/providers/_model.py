"""The one narrow ``Model`` protocol every provider adapter and test double implements.

A request carries messages, a system prompt split into blocks (a block marked ``cache``
ends a stable section where an adapter may place a prompt-cache breakpoint), tools and a
tool choice. The reply streams back text chunks and complete tool calls, and always ends
with one ``Completion`` carrying the stop reason and the token usage.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal"]
ProviderErrorCode = Literal[
    "provider_invalid_request",
    "provider_unauthorized",
    "provider_rate_limited",
    "provider_overloaded",
    "provider_unavailable",
    "provider_timeout",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A complete tool call (adapters join streamed argument fragments before yielding)."""

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False


Part = TextPart | ToolCall | ToolResult


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """A conversation message; ``cache`` marks the end of a stable prefix (see SystemBlock)."""

    role: Literal["user", "assistant"]
    parts: tuple[Part, ...]
    cache: bool = False

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", parts=(TextPart(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", parts=(TextPart(text=text),))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


@dataclass(frozen=True, kw_only=True, slots=True)
class SystemBlock:
    """A section of the system prompt; ``cache`` marks the end of a stable prefix."""

    text: str
    cache: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseSchema:
    """Ask for a reply that is one JSON document matching ``schema`` (structured output).

    The reply arrives as text chunks that join into the JSON document; each adapter uses
    its provider's own mechanism (a JSON-schema response format, or a forced tool call).
    """

    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One model call.

    Prompt-cache layout: ``cache_tools`` and the ``cache`` flags on system blocks and
    messages mark where stable sections end (tools, static system, per-user data, the
    message tail). Adapters whose provider caches explicitly place breakpoints there (at
    most 4, the last ones win); the others ignore the marks.

    ``parallel_tool_calls=False`` asks the provider for one tool call per reply
    (Anthropic's ``disable_parallel_tool_use``, OpenAI's ``parallel_tool_calls``); a
    provider may still send more, so a caller that needs one enforces it too.
    """

    messages: tuple[Message, ...]
    system: tuple[SystemBlock, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"  # "auto", "any", "none" or a tool name
    max_tokens: int = 4096
    cache_tools: bool = False
    response_schema: ResponseSchema | None = None
    parallel_tool_calls: bool = True  # False: ask for at most one tool call in the reply


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenUsage:
    """Tokens of one call. ``input_tokens`` excludes cache reads and writes (Anthropic's
    convention; adapters for providers that count cached tokens inside the prompt
    subtract them), so cost = each count times its own price."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TextChunk:
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    """The last item of every reply stream."""

    stop_reason: StopReason
    usage: TokenUsage
    model: str


StreamItem = TextChunk | ToolCall | Completion


@runtime_checkable
class Model(Protocol):
    """Anything that can stream a reply to a ``ModelRequest``.

    Close the returned iterator (``contextlib.aclosing``) to stop a reply early: adapters
    close the provider stream when that happens.
    """

    @property
    def name(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]: ...


class ModelError(Exception):
    """A classified provider failure; ``code`` is one of the stable codes in API.md."""

    def __init__(
        self,
        code: ProviderErrorCode,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ProviderErrorCode = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.retry_after_s = retry_after_s  # the provider's own Retry-After, when it sent one


class ModelSpecError(ValueError):
    """A model spec string that names no usable model."""
