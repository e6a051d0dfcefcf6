"""Prices per million tokens and the cost of a call in micro-dollars.

The provider's reported usage is the truth for cost; local token counts are estimates.
Unknown models cost nothing, with one warning per model so the gap is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from providers._model import TokenUsage

_log = structlog.get_logger("bosun.prices")


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens, and the shortest prompt prefix the provider caches.

    ``cache_write`` is the 5-minute write; ``cache_write_1h`` the 1-hour one (Anthropic:
    1.25x and 2x the input price). A prefix shorter than ``min_cacheable_tokens`` is never
    cached, however it is marked (the request still succeeds, with no cache figures).
    """

    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_write_1h: float
    min_cacheable_tokens: int


PRICES: dict[str, Price] = {
    # Anthropic: minimum cacheable lengths from the prompt-caching docs (Haiku 4.5 and
    # Opus 4.5/4.6: 4,096 tokens; Sonnet 4.5/4.6: 1,024)
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25, 2.00, 4096),
    "claude-sonnet-4-5": Price(3.00, 15.00, 0.30, 3.75, 6.00, 1024),
    "claude-sonnet-4-6": Price(3.00, 15.00, 0.30, 3.75, 6.00, 1024),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25, 10.00, 4096),
    "claude-opus-4-6": Price(5.00, 25.00, 0.50, 6.25, 10.00, 4096),
    # OpenAI: cached input is read at a discount, writes are free, prompts from 1,024
    # tokens are cached automatically
    "gpt-5": Price(1.25, 10.00, 0.125, 0.0, 0.0, 1024),
    "gpt-5-mini": Price(0.25, 2.00, 0.025, 0.0, 0.0, 1024),
    "gpt-5-nano": Price(0.05, 0.40, 0.005, 0.0, 0.0, 1024),
    "gpt-4.1": Price(2.00, 8.00, 0.50, 0.0, 0.0, 1024),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.0, 0.0, 1024),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.0, 0.0, 1024),
    "gpt-4o": Price(2.50, 10.00, 1.25, 0.0, 0.0, 1024),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.0, 0.0, 1024),
}
_warned: set[str] = set()
FREE = ("scripted", "function")  # the test doubles: no price, and no warning about it


def price_for(model: str) -> Price | None:
    """The price of ``model``, also for dated snapshots (``claude-haiku-4-5-20251001``)."""
    name = model.rsplit("/", 1)[-1].rpartition(":")[2]  # "anthropic:claude-…" works too
    if name in PRICES:
        return PRICES[name]
    candidates = [known for known in PRICES if name.startswith(f"{known}-")]
    return PRICES[max(candidates, key=len)] if candidates else None


def cost_usd_micros(model: str, usage: TokenUsage) -> int:
    """What ``usage`` of ``model`` costs, in millionths of a US dollar (rounded)."""
    price = price_for(model)
    if price is None:
        if model not in _warned and not model.startswith(FREE):
            _warned.add(model)
            _log.warning("prices.unknown_model", model=model)
        return 0
    # dollars per million tokens x tokens = micro-dollars
    written_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    micros = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + (usage.cache_write_tokens - written_1h) * price.cache_write
        + written_1h * price.cache_write_1h
    )
    return round(micros)


def min_cacheable_tokens(model: str) -> int | None:
    """The shortest prefix ``model``'s provider caches (``None``: an unknown model)."""
    price = price_for(model)
    return price.min_cacheable_tokens if price is not None else None
