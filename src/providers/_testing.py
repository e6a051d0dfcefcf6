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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

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
    makes the step answer only a request whose text (system prompt and messages) contains
    it: concurrent callers (a planner, parallel executors, a merge) then each get their
    own replies whatever order they call in. A tool call's input string
    ``"{{result.KEY}}"`` becomes KEY of the request's latest tool result (a JSON object),
    so a script can pass on an id the server made (``{{result.artifact_id}}``).
    """

    model_config = ConfigDict(extra="forbid")
    match: str | None = None
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


class ScriptExhaustedError(AssertionError):
    """A ``ScriptedModel`` was called more times than it has steps."""


class ScriptedModel:
    """A model that replays a fixed list of replies, one per call.

    Steps are strings, ``Reply`` objects or mappings in the ``ScriptStep`` shape.
    ``repeat=True`` starts over when the list runs out (handy for demos); otherwise an
    extra call fails, and ``assert_complete()`` fails if steps were left unused.
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
        self._used = [False] * len(self._steps)
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
        return self._used.count(False)

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

    def _take(self, request: ModelRequest) -> ScriptStep:
        """The first unused step (in script order) whose ``match`` the request contains."""
        text = "\n".join([*(b.text for b in request.system), *(m.text for m in request.messages)])
        for attempt in range(2):
            for index, step in enumerate(self._steps):
                if not self._used[index] and (step.match is None or step.match in text):
                    self._used[index] = True
                    return step
            if attempt == 0 and self._repeat and self._steps:
                self._used = [False] * len(self._steps)  # start over
            else:
                break
        unmatched = f", {self.remaining} unused but not matching" if self.remaining else ""
        raise ScriptExhaustedError(
            f"{self._name} has no step left for call {len(self.calls)} "
            f"({len(self._steps)} scripted{unmatched})"
        )


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
