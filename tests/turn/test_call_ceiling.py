"""A model call's cost ceiling, what the meter reserves against an org's daily cap."""

from __future__ import annotations

from providers import Message, ModelRequest, SystemBlock, TextPart, TokenUsage, cost_usd_micros
from turn._metering import call_ceiling

REQUEST = ModelRequest(
    system=(SystemBlock(text="You are terse. " * 200),),
    messages=(Message(role="user", parts=(TextPart(text="héllo " * 300),)),),
    max_tokens=1000,
)


def test_a_priced_models_ceiling_counts_every_input_byte_and_the_output_allowance() -> None:
    size = len(REQUEST.system[0].text.encode()) + len(("héllo " * 300).encode())
    expected = max(
        cost_usd_micros("claude-haiku-4-5", TokenUsage(input_tokens=size)),
        cost_usd_micros(
            "claude-haiku-4-5", TokenUsage(cache_write_tokens=size, cache_write_1h_tokens=size)
        ),
    ) + cost_usd_micros("claude-haiku-4-5", TokenUsage(output_tokens=1000))
    assert call_ceiling("anthropic:claude-haiku-4-5", REQUEST) == expected > 0


def test_a_free_models_ceiling_is_nothing_without_sizing_the_request() -> None:
    """A model without a price (a test double, a local model) costs nothing, so the
    request is not walked at all: a part that could not even be sized does not matter."""
    unsized = ModelRequest(messages=REQUEST.messages, response_schema=object())  # type: ignore[arg-type]
    assert call_ceiling("function:bench", REQUEST) == 0
    assert call_ceiling("function:bench", unsized) == 0
