"""Lay a prompt out for provider prompt caching: stable sections first, volatile last.

Order: tools → the agent's identity (and self block) → static system prompt (+ the abbreviated tool
listing) → the org/user block (who the call is for, then the agent's user data) →
session knowledge → conversation → the current task. A provider caches a prefix up to a
breakpoint, so the layout marks where each stability tier ends, using all 4 marks
Anthropic allows: the tools, the static system part, the org/user block and the
conversation tail. A call without tools spends the spare mark on the end of the
conversation's earlier turns, so a turn reads the previous turn's prefix even when the
tail moved too far for the provider's lookback. Within an executor loop every request is
the previous one plus new messages, so consecutive requests share a byte-identical
prefix; ``prefix_ratio`` measures it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from html import escape
from typing import Any

from providers import (
    Message,
    ModelRequest,
    ResponseSchema,
    SystemBlock,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)

MAX_CACHE_MARKS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptParts:
    """The sections of one model call, from most to least stable.

    ``identity`` is the agent profile's identity prompt, then its self block (who it is,
    what it may use): the first system block, inside the static tier's cached prefix, so
    it costs no cache mark of its own (empty: none).
    ``tool_listing`` is extra system text about tools (unused by executors, whose granted
    tools are always sent whole); ``caller`` (``caller_block``) and ``user_data`` (the
    profile) form the org/user block, stable for a user across sessions and within a
    session; ``knowledge`` is the session's
    loaded context, append-only and oldest first; ``history`` the fitted conversation;
    ``task`` the current user message or step goal (a ``Message`` when ``fit_history``
    cut it). ``client`` is the request's client context block (``fit_client``): per
    request, so it rides in the task message, ahead of the task's text, after every
    cache mark of the stable tiers (a new page never invalidates the cached prefix).
    """

    system: str
    identity: str = ""
    tools: tuple[ToolSpec, ...] = ()
    tool_listing: str = ""
    caller: str = ""
    user_data: str = ""
    knowledge: tuple[str, ...] = ()
    history: tuple[Message, ...] = ()
    task: str | Message | None = None
    client: str = ""


def _task(task: str | Message | None, client: str = "") -> list[Message]:
    if task is None:
        return []
    message = Message.user(task) if isinstance(task, str) else replace(task, cache=False)
    if client:
        message = replace(message, parts=(TextPart(text=client), *message.parts))
    return [message]


def _system_blocks(parts: PromptParts) -> tuple[SystemBlock, ...]:
    static = [text for text in (parts.identity, parts.system, parts.tool_listing) if text]
    blocks = [SystemBlock(text=text, cache=i == len(static) - 1) for i, text in enumerate(static)]
    org_user = [text for text in (parts.caller, parts.user_data) if text]
    blocks += [SystemBlock(text=t, cache=i == len(org_user) - 1) for i, t in enumerate(org_user)]
    if parts.knowledge:
        blocks.append(SystemBlock(text="\n\n".join(parts.knowledge)))
    return tuple(blocks)


def caller_block(*, org_id: str, user_id: str, role: str) -> str:
    """The org/user block's first line: who the call is for. Stable for a user in every
    session, so the tier always exists (and carries its cache mark) even for an agent
    without user data; it names ids and the role, which tools and answers may depend on
    (what the caller may do), never the user's words."""
    attrs = {"org": org_id, "user": user_id, "role": role}
    return "<caller " + " ".join(f'{k}="{escape(v)}"' for k, v in attrs.items()) + "/>"


def _request(
    parts: PromptParts,
    messages: list[Message],
    marks: Sequence[int],
    *,
    max_tokens: int,
    tool_choice: str,
    response_schema: ResponseSchema | None,
) -> ModelRequest:
    """The request with the tail mark on ``marks[0]`` and the spare on ``marks[1]`` when
    the fixed tiers leave room for it."""
    system = _system_blocks(parts)
    fixed = bool(parts.tools) + sum(block.cache for block in system)
    for index in marks[: max(MAX_CACHE_MARKS - fixed, 1)]:
        messages[index] = replace(messages[index], cache=True)
    request = ModelRequest(
        messages=tuple(messages),
        system=system,
        tools=parts.tools,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        cache_tools=bool(parts.tools),
        response_schema=response_schema,
    )
    assert cache_marks(request) <= MAX_CACHE_MARKS, cache_marks(request)
    return request


def layout_request(
    parts: PromptParts,
    *,
    max_tokens: int = 4096,
    tool_choice: str = "auto",
    response_schema: ResponseSchema | None = None,
) -> ModelRequest:
    """A one-shot call (direct answer, merger): history is the stable prefix, the task
    is new.

    The tail (the task) carries the message mark, so the next turn, whose history ends
    with this task and its answer, reads it from the cache; the spare mark, when there
    is room, goes on the last history message, where the previous turn's tail was.
    """
    messages = [replace(m, cache=False) if m.cache else m for m in parts.history]
    earlier = len(messages) - 1
    messages += _task(parts.task, parts.client)
    return _request(
        parts,
        messages,
        _tail_marks(len(messages) - 1, earlier),
        max_tokens=max_tokens,
        tool_choice=tool_choice,
        response_schema=response_schema,
    )


def executor_request(
    parts: PromptParts,
    loop: Sequence[Message],
    *,
    max_tokens: int = 4096,
    tool_choice: str = "auto",
) -> ModelRequest:
    """One request of an executor's tool loop: the fixed parts, then the loop so far.

    Everything sent now is the prefix of the next request, so the message mark goes on
    the last message. Append ``loop`` only, never edit it: a tool result is fitted once,
    when it arrives, so the prefix stays byte-identical.
    """
    messages = [replace(m, cache=False) if m.cache else m for m in parts.history]
    messages += _task(parts.task, parts.client)
    fixed = len(messages) - 1
    messages += [replace(m, cache=False) if m.cache else m for m in loop]
    return _request(
        parts,
        messages,
        _tail_marks(len(messages) - 1, fixed if loop else len(parts.history) - 1),
        max_tokens=max_tokens,
        tool_choice=tool_choice,
        response_schema=None,
    )


def _tail_marks(tail: int, spare: int) -> tuple[int, ...]:
    """The message marks, tail first: the last message, then the spare if it is another
    one (a negative index means there is no such message)."""
    if tail < 0:
        return ()
    return (tail, spare) if 0 <= spare < tail else (tail,)


def cache_marks(request: ModelRequest) -> int:
    """How many cache breakpoints a request asks for."""
    return (
        int(request.cache_tools and bool(request.tools))
        + sum(block.cache for block in request.system)
        + sum(message.cache for message in request.messages)
    )


def _part(part: TextPart | ToolCall | ToolResult) -> dict[str, Any]:
    match part:
        case TextPart(text=text):
            return {"type": "text", "text": text}
        case ToolCall(id=call_id, name=name, input=data):
            return {"type": "tool_call", "id": call_id, "name": name, "input": data}
        case ToolResult(tool_use_id=use_id, content=content, is_error=is_error):
            return {"type": "tool_result", "id": use_id, "content": content, "error": is_error}


def canonical_prompt(request: ModelRequest) -> bytes:
    """The prompt content in provider order (tools, system, messages) as canonical JSON.

    Cache marks are left out: they direct the provider and are not prompt content, and
    the message mark moves forward on every loop request by design.
    """
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in request.tools
    ]
    if request.response_schema is not None:
        tools.append(
            {"name": request.response_schema.name, "schema": request.response_schema.schema}
        )
    document = [
        tools,
        [block.text for block in request.system],
        [{"role": m.role, "content": [_part(p) for p in m.parts]} for m in request.messages],
    ]
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def _common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # the longest n with a[:n] == b[:n], by bisection on C-speed compares
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def prefix_ratio(request_a: ModelRequest, request_b: ModelRequest) -> float:
    """The share of ``request_b``'s prompt that repeats ``request_a``'s byte for byte:
    common prefix length over ``request_b``'s length (canonical serialisation)."""
    a, b = canonical_prompt(request_a), canonical_prompt(request_b)
    return _common_prefix(a, b) / len(b) if b else 1.0
