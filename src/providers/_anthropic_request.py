"""Map a ``ModelRequest`` onto the Anthropic Messages API request body.

Pure functions over the SDK's own param types, so the mapping (role merging, tool choice,
structured output, prompt-cache breakpoints) is unit-tested without any I/O.
"""

from __future__ import annotations

from anthropic.types import (
    CacheControlEphemeralParam,
    MessageParam,
    TextBlockParam,
    ToolChoiceParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from anthropic.types.message_create_params import MessageCreateParamsStreaming

from providers._config import CacheTTL
from providers._model import (
    Message,
    ModelError,
    ModelRequest,
    ResponseSchema,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)

MAX_CACHE_BREAKPOINTS = 4
"""Anthropic rejects a request with more ``cache_control`` blocks than this."""

ContentBlockParam = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam
Cacheable = ContentBlockParam | ToolParam


def build_params(
    request: ModelRequest, *, model: str, cache_ttl: CacheTTL = "5m"
) -> MessageCreateParamsStreaming:
    """The streaming ``messages.create`` arguments for ``request``.

    Raises ``ModelError("provider_invalid_request")`` for a conversation Anthropic would
    reject anyway (a tool call in a user message, a tool result in an assistant one).
    """
    tools = [_tool(spec) for spec in request.tools]
    if request.response_schema is not None:
        tools.append(_schema_tool(request.response_schema))
    sent_system = [b for b in request.system if b.text]  # Anthropic rejects empty blocks
    system = [TextBlockParam(type="text", text=b.text) for b in sent_system]
    messages, message_marks = _messages(request.messages)

    marks: list[Cacheable] = []
    if request.cache_tools and tools:
        marks.append(tools[-1])
    marks += [block for block, b in zip(system, sent_system, strict=True) if b.cache]
    marks += message_marks
    _place_breakpoints(marks, cache_ttl)

    params = MessageCreateParamsStreaming(
        model=model, max_tokens=request.max_tokens, messages=messages, stream=True
    )
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
        params["tool_choice"] = _tool_choice(request)
    return params


def _place_breakpoints(marks: list[Cacheable], ttl: CacheTTL) -> None:
    """Put ``cache_control`` on the last ``MAX_CACHE_BREAKPOINTS`` marked blocks.

    The last ones win because a breakpoint caches the whole prefix before it: the latest
    breakpoints cover the most, the earlier ones only save a re-write when the tail moves.
    """
    for block in marks[-MAX_CACHE_BREAKPOINTS:]:
        block["cache_control"] = CacheControlEphemeralParam(type="ephemeral", ttl=ttl)


def _tool(spec: ToolSpec) -> ToolParam:
    tool = ToolParam(name=spec.name, input_schema=spec.input_schema)
    if spec.description:
        tool["description"] = spec.description
    return tool


def _schema_tool(schema: ResponseSchema) -> ToolParam:
    """Structured output as a forced tool call: the tool's input is the JSON reply."""
    description = schema.description or "Give your final answer as this tool's input."
    return ToolParam(name=schema.name, description=description, input_schema=schema.schema)


def _tool_choice(request: ModelRequest) -> ToolChoiceParam:
    """The tool choice, with ``disable_parallel_tool_use`` when the request wants one call
    per reply (``none`` takes no such flag: it allows no call at all)."""
    if request.response_schema is not None:
        return {"type": "tool", "name": request.response_schema.name}
    choice: ToolChoiceParam
    match request.tool_choice:
        case "none":
            return {"type": "none"}
        case "auto":
            choice = {"type": "auto"}
        case "any":
            choice = {"type": "any"}
        case name:
            choice = {"type": "tool", "name": name}
    if not request.parallel_tool_calls:
        choice["disable_parallel_tool_use"] = True
    return choice


def _messages(messages: tuple[Message, ...]) -> tuple[list[MessageParam], list[Cacheable]]:
    """Anthropic messages, with consecutive same-role messages merged (the API wants
    alternation), and the blocks that end a message marked ``cache``, in prompt order."""
    merged: list[MessageParam] = []
    marks: list[Cacheable] = []
    last_role: str | None = None
    current: list[ContentBlockParam] = []
    for position, message in enumerate(messages):
        blocks = [b for p in message.parts if (b := _block(p, message, position)) is not None]
        if not blocks:
            continue  # Anthropic rejects empty content; an empty message carries nothing
        if message.role != last_role:
            current = []
            merged.append(_message_param(message, current))
            last_role = message.role
        current.extend(blocks)
        if message.cache:
            marks.append(blocks[-1])
    return merged, marks


def _message_param(message: Message, content: list[ContentBlockParam]) -> MessageParam:
    if message.role == "user":
        return {"role": "user", "content": content}
    return {"role": "assistant", "content": content}


def _block(
    part: TextPart | ToolCall | ToolResult, message: Message, position: int
) -> ContentBlockParam | None:
    match part:
        case TextPart(text=text):
            # Anthropic rejects empty text blocks; an empty part says nothing anyway.
            return TextBlockParam(type="text", text=text) if text else None
        case ToolCall(id=id_, name=name, input=input_) if message.role == "assistant":
            return ToolUseBlockParam(type="tool_use", id=id_, name=name, input=input_)
        case ToolResult(tool_use_id=tool_use_id, content=content, is_error=is_error) if (
            message.role == "user"
        ):
            return ToolResultBlockParam(
                type="tool_result", tool_use_id=tool_use_id, content=content, is_error=is_error
            )
    kind = type(part).__name__
    expected = "assistant" if isinstance(part, ToolCall) else "user"
    raise ModelError(
        "provider_invalid_request",
        f"Message {position} is a {message.role!r} message holding a {kind}; "
        f"move it to a message with role {expected!r}",
    )
