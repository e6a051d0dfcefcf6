"""Mapping a Bosun ``ModelRequest`` onto OpenAI chat-completions parameters.

Pure functions over the SDK's own param types, so the shapes are checked by mypy and the
adapter's I/O code only passes them on. Prompt-cache marks (``cache_tools``,
``SystemBlock.cache``, ``Message.cache``) are ignored: OpenAI caches long prompt prefixes
automatically, and OpenAI-compatible servers have no cache breakpoints to place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.chat.completion_create_params import ResponseFormat
from openai.types.shared_params.function_definition import FunctionDefinition
from openai.types.shared_params.response_format_json_schema import JSONSchema

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

# OpenAI has no error flag on tool messages; the model reads this prefix instead.
TOOL_ERROR_PREFIX = "Error: "


def chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    """The system prompt as one system message, then the conversation.

    System blocks are joined with blank lines into a single ``system`` message: every
    OpenAI-compatible server accepts that, while several system messages confuse some
    chat templates. (``system`` rather than ``developer``: OpenAI maps one onto the other
    for reasoning models, and compatible servers only know ``system``.)
    """
    messages: list[ChatCompletionMessageParam] = []
    if request.system:
        system = "\n\n".join(block.text for block in request.system)
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.extend(_message(message))
    return messages


def _message(message: Message) -> Iterator[ChatCompletionMessageParam]:
    if message.role == "assistant":
        yield _assistant(message)
        return
    # Tool results become ``tool`` messages, which must directly follow the assistant
    # message that made the calls, so they go before any user text of the same message.
    text: list[str] = []
    for part in message.parts:
        match part:
            case ToolResult():
                yield _tool_message(part)
            case TextPart():
                text.append(part.text)
            case ToolCall():
                raise ModelError(
                    "provider_invalid_request",
                    f"A user message holds a tool call ({part.name!r}, id {part.id!r}); "
                    "tool calls belong in assistant messages",
                )
    if text:
        yield {"role": "user", "content": "".join(text)}


def _tool_message(result: ToolResult) -> ChatCompletionToolMessageParam:
    content = f"{TOOL_ERROR_PREFIX}{result.content}" if result.is_error else result.content
    return {"role": "tool", "tool_call_id": result.tool_use_id, "content": content}


def _assistant(message: Message) -> ChatCompletionAssistantMessageParam:
    text: list[str] = []
    calls: list[ChatCompletionMessageFunctionToolCallParam] = []
    for part in message.parts:
        match part:
            case TextPart():
                text.append(part.text)
            case ToolCall():
                calls.append(
                    {
                        "id": part.id,
                        "type": "function",
                        "function": {"name": part.name, "arguments": json.dumps(part.input)},
                    }
                )
            case ToolResult():
                raise ModelError(
                    "provider_invalid_request",
                    f"An assistant message holds a tool result (for id {part.tool_use_id!r}); "
                    "tool results belong in user messages",
                )
    assistant: ChatCompletionAssistantMessageParam = {
        "role": "assistant",
        # OpenAI wants null content (not "") on a message that only calls tools.
        "content": "".join(text) if text else None,
    }
    if calls:
        assistant["tool_calls"] = calls
    return assistant


def chat_tools(tools: tuple[ToolSpec, ...]) -> list[ChatCompletionToolParam]:
    return [{"type": "function", "function": _function(tool)} for tool in tools]


def _function(tool: ToolSpec) -> FunctionDefinition:
    function: FunctionDefinition = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return function


def chat_tool_choice(tool_choice: str) -> ChatCompletionToolChoiceOptionParam:
    """Bosun's tool choice in OpenAI's spelling: ``any`` is ``required``, a name is named."""
    if tool_choice == "auto":
        return "auto"
    if tool_choice == "none":
        return "none"
    if tool_choice == "any":
        return "required"
    named: ChatCompletionNamedToolChoiceParam = {
        "type": "function",
        "function": {"name": tool_choice},
    }
    return named


def response_format(schema: ResponseSchema) -> ResponseFormat:
    """A ``json_schema`` response format; strict only when the schema allows it.

    Strict mode guarantees the shape but rejects any schema where an object allows extra
    properties or leaves a property optional. Rewriting the schema to fit would change its
    meaning (optional fields would become required), so other schemas are sent non-strict
    and the caller validates the JSON it gets back, as it must for any provider.
    """
    json_schema: JSONSchema = {
        "name": schema.name,
        "schema": schema.schema,
        "strict": is_strict_compatible(schema.schema),
    }
    if schema.description:
        json_schema["description"] = schema.description
    return {"type": "json_schema", "json_schema": json_schema}


def is_strict_compatible(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict structured outputs accept ``schema`` unchanged.

    The root must be an object, and every object in it must forbid additional properties
    and list all of its properties as required.
    """
    return schema.get("type") == "object" and all(
        _strict_object(node) for node in _subschemas(schema)
    )


def _strict_object(node: Mapping[str, Any]) -> bool:
    if node.get("type") != "object" and "properties" not in node:
        return True
    properties = node.get("properties", {})
    return node.get("additionalProperties") is False and set(node.get("required", ())) == set(
        properties
    )


def _subschemas(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """``node`` and every schema nested in it (properties, items, combinators, defs)."""
    yield node
    for key in ("properties", "$defs", "definitions"):
        for child in node.get(key, {}).values():
            if isinstance(child, Mapping):
                yield from _subschemas(child)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for child in node.get(key, ()):
            if isinstance(child, Mapping):
                yield from _subschemas(child)
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _subschemas(items)
