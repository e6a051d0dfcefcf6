"""One model call, consumed the one way every role needs: text forwarded as it streams,
tool calls and the completion collected. The planner, the executors, the merge and the
answer, history compression and titles all call through here, so none hand-writes the
loop over ``Model.stream`` (and a change to the stream's items has one place to land).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import assert_never

from providers._model import Completion, Model, ModelRequest, TextChunk, ToolCall
from providers._prices import cost_usd_micros


@dataclass(frozen=True, kw_only=True, slots=True)
class Called:
    """What one call gave: its whole text, its tool calls (in order) and its completion."""

    text: str
    calls: tuple[ToolCall, ...]
    completion: Completion

    @property
    def cost_usd_micros(self) -> int:
        return cost_usd_micros(self.completion.model, self.completion.usage)


async def call_model(
    model: Model, request: ModelRequest, *, on_text: Callable[[str], None] | None = None
) -> Called:
    """Stream ``request`` to ``model``: each non-empty text piece goes to ``on_text`` as it
    arrives; raises ``ModelError`` as the model does."""
    pieces: list[str] = []
    calls: list[ToolCall] = []
    completion: Completion | None = None
    async with aclosing(model.stream(request)) as stream:
        async for item in stream:
            match item:
                case TextChunk(text=text):
                    if text:
                        pieces.append(text)
                        if on_text is not None:
                            on_text(text)
                case ToolCall():
                    calls.append(item)
                case Completion():
                    completion = item
                case _:
                    assert_never(item)
    assert completion is not None, f"model {model.name!r} ended its stream without a Completion"
    return Called(text="".join(pieces), calls=tuple(calls), completion=completion)
