"""Test doubles that speak the ``Model`` protocol: ``FunctionModel`` and ``ScriptedModel``.

Both are public (``bosun.testing``) so users can test their own tools and deployments with
no network. Each records the requests it received in ``calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from providers._conversation import conversation_key
from providers._model import (
    Completion,
    ModelError,
    ModelRequest,
    ProviderErrorCode,
    StopReason,
    StreamItem,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolResult,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """A whole model reply, for doubles that do not need to stream piece by piece."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    stop_reason: StopReason | None = None


ReplyLike = str | Reply
FunctionResult = ReplyLike | Awaitable[ReplyLike] | AsyncIterator[str | ToolCall | TokenUsage]


def _split_words(text: str) -> list[str]:
    """Chunks the way a provider streams them: word by word, whitespace kept."""
    return re.findall(r"\S+\s*|\s+", text)


async def _reply_items(
    reply: Reply, chunks: Sequence[str], model: str
) -> AsyncGenerator[StreamItem, None]:
    for chunk in chunks:
        yield TextChunk(text=chunk)
    for call in reply.tool_calls:
        yield call
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    yield Completion(stop_reason=stop, usage=reply.usage, model=model)


class FunctionModel:
    """A model whose replies come from a Python callable.

    ``fn(request)`` returns a string, a ``Reply``, an awaitable of either, or an async
    iterator of text pieces, ``ToolCall``s and ``TokenUsage`` (summed) to stream.
    """

    def __init__(
        self, fn: Callable[[ModelRequest], FunctionResult], *, name: str = "function"
    ) -> None:
        self._fn = fn
        self._name = name
        self.calls: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        self.calls.append(request)
        result = self._fn(request)
        if isinstance(result, AsyncIterator):
            async with contextlib.aclosing(self._stream_items(result)) as items:
                async for item in items:
                    yield item
            return
        if inspect.isawaitable(result):
            result = await result
        reply = Reply(text=result) if isinstance(result, str) else result
        async for item in _reply_items(reply, [reply.text] if reply.text else [], self._name):
            yield item

    async def _stream_items(
        self, pieces: AsyncIterator[str | ToolCall | TokenUsage]
    ) -> AsyncGenerator[StreamItem, None]:
        usage = TokenUsage()
        called = False
        try:
            async for piece in pieces:
                if isinstance(piece, str):
                    yield TextChunk(text=piece)
                elif isinstance(piece, ToolCall):
                    called = True
                    yield piece
                else:
                    usage = usage + piece
        finally:  # closing the stream early closes the caller's iterator too
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()
        stop: StopReason = "tool_use" if called else "end_turn"
        yield Completion(stop_reason=stop, usage=usage, model=self._name)


class _ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class _ScriptedError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: ProviderErrorCode
    message: str = "scripted provider failure"
    after_chunks: int = 0


class _ScriptedUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ScriptStep(BaseModel):
    """One scripted reply, as written in a script file.

    ``text`` streams word by word unless ``chunks`` gives the pieces; ``delay_s`` waits
    before each chunk; ``error`` fails the call (after ``after_chunks`` chunks). ``match``
    makes the step answer only a request whose text (system prompt, messages and tool
    results) contains it (a list: every one of them): concurrent callers (a planner,
    parallel executors, a merge) then each get their own replies whatever order they
    call in, and a reply can depend on a tool's result (``rejected_by_user``). A tool
    call's input string ``"{{result.KEY}}"`` becomes KEY of the request's latest tool
    result (a JSON object), so a script can pass on an id the server made
    (``{{result.artifact_id}}``).
    """

    model_config = ConfigDict(extra="forbid")
    match: str | list[str] | None = None
    text: str = ""
    chunks: list[str] | None = None
    tool_calls: list[_ScriptedToolCall] = Field(default_factory=list)
    usage: _ScriptedUsage = Field(default_factory=_ScriptedUsage)
    stop_reason: StopReason | None = None
    delay_s: float = Field(default=0.0, ge=0, le=60)
    error: _ScriptedError | None = None


class _ScriptFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[str | ScriptStep]  # a bare string is a text-only step
    repeat: bool = False


SCRIPT_EXHAUSTED = "script_exhausted"
"""The ``error`` code of a turn whose scripted model had no step for one of its calls."""

FIRST_WORDS = 8
"""How many words of the request a ``ScriptExhaustedError`` quotes to its turn's client."""


class ScriptExhaustedError(AssertionError):
    """A ``ScriptedModel`` was called more times than it has steps (that match the call).

    Its ``str`` names the script and the call only (it may reach a log); ``words`` holds
    the start of the request's last user message and ``role`` the turn role that called
    (set by whoever knows it), for ``describe``: the message the turn's own client sees.
    """

    code = SCRIPT_EXHAUSTED

    def __init__(self, message: str, *, script: str, words: str = "") -> None:
        super().__init__(message)
        self.script = script
        self.words = words
        self.role: str | None = None

    def describe(self) -> str:
        """Which script, which role and which request found no step: user text, so for
        the client who sent it, never for logs."""
        role = f" for the {self.role}" if self.role else ""
        asked = f' (the request began "{self.words}")' if self.words else ""
        return (
            f"The script {self.script!r} has no step{role} that answers this call{asked}; "
            "add a step whose match this request contains, or start a new session"
        )


class ScriptedModel:
    """A model that replays a fixed list of replies, one per call.

    Steps are strings, ``Reply`` objects or mappings in the ``ScriptStep`` shape.
    ``repeat=True`` starts over when the list runs out (handy for demos); otherwise an
    extra call fails, and ``assert_complete()`` fails if steps were left unused.

    Each conversation (``in_conversation``: a session, as the turn runner sets it) keeps
    its own place in the script, so a new session starts at the first step whatever
    other sessions did; calls outside any conversation share one place. ``calls`` records
    every request; ``remaining`` counts the steps no conversation has used.
    """

    def __init__(
        self,
        steps: Sequence[str | Reply | Mapping[str, Any]],
        *,
        repeat: bool = False,
        name: str = "scripted",
    ) -> None:
        self._steps = [self._coerce(step) for step in steps]
        self._repeat = repeat
        self._name = name
        self._used = [False] * len(self._steps)  # calls outside any conversation
        self._by_key: OrderedDict[str, list[bool]] = OrderedDict()  # least recent first
        self._ever = [False] * len(self._steps)
        self.calls: list[ModelRequest] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load steps from JSON or YAML: a list of steps, or ``{steps: [...], repeat: bool}``."""
        path = Path(path)
        raw = path.read_text(encoding="utf-8")
        data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
        script = _ScriptFile.model_validate({"steps": data} if isinstance(data, list) else data)
        return cls(
            [s if isinstance(s, str) else s.model_dump() for s in script.steps],
            repeat=script.repeat,
            name=f"scripted:{path.name}",
        )

    @staticmethod
    def _coerce(step: str | Reply | Mapping[str, Any]) -> ScriptStep:
        if isinstance(step, str):
            return ScriptStep(text=step)
        if isinstance(step, Reply):
            return ScriptStep(
                text=step.text,
                tool_calls=[
                    _ScriptedToolCall(id=c.id, name=c.name, input=c.input) for c in step.tool_calls
                ],
                usage=_ScriptedUsage(**_usage_dict(step.usage)),
                stop_reason=step.stop_reason,
            )
        return ScriptStep.model_validate(step)

    @property
    def name(self) -> str:
        return self._name

    @property
    def remaining(self) -> int:
        return self._ever.count(False)

    def assert_complete(self) -> None:
        """Fail if any scripted step was never used."""
        if self.remaining > 0 and not self._repeat:
            raise AssertionError(
                f"{self._name}: {self.remaining} of {len(self._steps)} scripted steps unused"
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        self.calls.append(request)
        step = self._take(request)
        chunks = step.chunks if step.chunks is not None else _split_words(step.text)
        result = _last_result(request)
        calls = tuple(
            ToolCall(
                id=c.id or f"toolu_{len(self.calls)}_{i}",
                name=c.name,
                input=_filled(c.input, result),
            )
            for i, c in enumerate(step.tool_calls)
        )
        reply = Reply(
            text=step.text,
            tool_calls=calls,
            usage=TokenUsage(**step.usage.model_dump()),
            stop_reason=step.stop_reason,
        )
        sent = 0
        async for item in _reply_items(reply, chunks, self._name):
            # Fail before the Completion at the latest, even with fewer chunks than after_chunks.
            if step.error is not None and (
                sent == step.error.after_chunks or isinstance(item, Completion)
            ):
                raise ModelError(step.error.code, step.error.message)
            if step.delay_s and isinstance(item, TextChunk):
                await asyncio.sleep(step.delay_s)
            sent += isinstance(item, TextChunk)
            yield item

    def _marks(self) -> list[bool]:
        """The used marks of the current conversation's place in the script (the least
        recently used conversation's are dropped past ``MAX_CONVERSATIONS``)."""
        key = conversation_key()
        if key is None:
            return self._used
        marks = self._by_key.get(key)
        if marks is None:
            marks = self._by_key[key] = [False] * len(self._steps)
            if len(self._by_key) > MAX_CONVERSATIONS:
                self._by_key.popitem(last=False)
        else:
            self._by_key.move_to_end(key)
        return marks

    def _take(self, request: ModelRequest) -> ScriptStep:
        """The first step (in script order) unused in this conversation whose ``match``
        the request contains."""
        text = _request_text(request)
        marks = self._marks()
        for attempt in range(2):
            for index, step in enumerate(self._steps):
                if not marks[index] and _matches(step.match, text):
                    marks[index] = self._ever[index] = True
                    return step
            if attempt == 0 and self._repeat and self._steps:
                marks[:] = [False] * len(self._steps)  # start over
            else:
                break
        left = marks.count(False)
        unmatched = f", {left} unused but not matching" if left else ""
        raise ScriptExhaustedError(
            f"{self._name} has no step left for call {len(self.calls)} "
            f"({len(self._steps)} scripted{unmatched})",
            script=self._name,
            words=_first_words(request),
        )


MAX_CONVERSATIONS = 4096
"""How many conversations' places a ``ScriptedModel`` keeps (a bounded map: a long-running
demo server forgets its oldest sessions, which then start their script over)."""


def _request_text(request: ModelRequest) -> str:
    """What a step's ``match`` looks in: the system prompt, messages and tool results."""
    parts = [b.text for b in request.system]
    for message in request.messages:
        parts.append(message.text)
        parts.extend(p.content for p in message.parts if isinstance(p, ToolResult))
    return "\n".join(parts)


def _matches(match: str | list[str] | None, text: str) -> bool:
    if match is None:
        return True
    return all(phrase in text for phrase in ([match] if isinstance(match, str) else match))


def _first_words(request: ModelRequest) -> str:
    """The first ``FIRST_WORDS`` words of the request's last user message with text."""
    for message in reversed(request.messages):
        if message.role == "user" and message.text.strip():
            words = message.text.split()
            more = " …" if len(words) > FIRST_WORDS else ""
            return " ".join(words[:FIRST_WORDS]) + more
    return ""


_FROM_RESULT = re.compile(r"\{\{result\.([A-Za-z0-9_]+)\}\}")
"""A scripted tool input's ``"{{result.KEY}}"``: KEY of the latest tool result, so a script
can pass on an id the server made (``artifact_id``), which it cannot know in advance."""


def _last_result(request: ModelRequest) -> dict[str, Any]:
    """The latest tool result of the request as a JSON object (its first line), or ``{}``."""
    for message in reversed(request.messages):
        for part in reversed(message.parts):
            if isinstance(part, ToolResult):
                try:
                    value = json.loads(part.content.split("\n", 1)[0])
                except ValueError:
                    return {}
                return value if isinstance(value, dict) else {}
    return {}


def _filled(value: Any, result: dict[str, Any]) -> Any:
    """``value`` with every ``"{{result.KEY}}"`` string replaced by ``result[KEY]``."""
    if isinstance(value, str):
        found = _FROM_RESULT.fullmatch(value)
        return result.get(found[1], value) if found else value
    if isinstance(value, dict):
        return {k: _filled(v, result) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, result) for v in value]
    return value


def _usage_dict(usage: TokenUsage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
