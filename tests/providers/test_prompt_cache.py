"""The price of cache writes by TTL, the minimum cacheable lengths beside the prices, and
the fake server's prompt-cache simulation (prefix hashes, TTLs, the minimum, the 5m/1h
split of what it writes), read through the real SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from providers import (
    Completion,
    Message,
    ModelRequest,
    SystemBlock,
    TokenUsage,
    cost_usd_micros,
    min_cacheable_tokens,
)
from providers._anthropic import AnthropicModel
from providers._config import ProviderConfig
from providers._prices import PRICES
from providers.fake import FakeProvider, FakeServer, PromptCache, anthropic_reply

STATIC = "You answer questions about the studio. " * 60  # ~590 tokens at 4 chars each


def test_one_hour_writes_cost_twice_the_input_price() -> None:
    five = TokenUsage(cache_write_tokens=1_000_000)
    hour = TokenUsage(cache_write_tokens=1_000_000, cache_write_1h_tokens=1_000_000)
    mixed = TokenUsage(cache_write_tokens=1_000_000, cache_write_1h_tokens=400_000)
    for model, price in PRICES.items():
        if model.startswith("claude"):
            assert price.cache_write == 1.25 * price.input, model
            assert price.cache_write_1h == 2 * price.input, model
    assert cost_usd_micros("claude-sonnet-4-5", five) == 3_750_000
    assert cost_usd_micros("claude-sonnet-4-5", hour) == 6_000_000
    assert cost_usd_micros("claude-sonnet-4-5", mixed) == 600_000 * 3.75 + 400_000 * 6
    # OpenAI charges no cache writes, whatever the TTL
    assert cost_usd_micros("gpt-4.1", hour) == 0


def test_the_minimum_cacheable_length_is_kept_beside_the_price() -> None:
    assert min_cacheable_tokens("claude-sonnet-4-5-20250929") == 1024
    assert min_cacheable_tokens("anthropic:claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-opus-4-5") == 4096
    assert min_cacheable_tokens("gpt-4.1-mini") == 1024
    assert min_cacheable_tokens("scripted:demo") is None


def body(*messages: str, ttl: str = "1h", tail: str = "5m", model: str = "m") -> dict[str, Any]:
    """A Messages API body: one marked system block, then the messages, the last marked."""
    content = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": m}]}
        for i, m in enumerate(messages)
    ]
    content[-1]["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": tail}
    system = [{"type": "text", "text": STATIC, "cache_control": {"type": "ephemeral", "ttl": ttl}}]
    return {"model": model, "system": system, "messages": content}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_writes_are_split_by_the_ttl_of_the_breakpoint_that_wrote_them() -> None:
    cache = PromptCache(clock=Clock())
    first = cache.usage(body("What is open today?"), 5)
    system_only = PromptCache().usage({**body("x"), "messages": []}, 0)
    static = system_only.cache_write_tokens  # the system block's estimated tokens
    assert static > 500
    assert first.cache_read_tokens == 0 and first.input_tokens == 0
    assert first.cache_write_1h_tokens == static  # up to the system block's 1h mark
    assert 0 < first.cache_write_tokens - static < 20  # the question, up to its 5m mark

    second = cache.usage(body("What is open today?", "The gym.", "And tomorrow?"), 5)
    assert second.cache_read_tokens == first.cache_write_tokens  # the whole first prompt
    assert second.cache_write_1h_tokens == 0 and 0 < second.cache_write_tokens < 40
    assert second.input_tokens == 0


def test_entries_expire_after_their_ttl_and_a_read_refreshes_them() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock)
    first = cache.usage(body("Hello?"), 1)
    whole, static = first.cache_write_tokens, first.cache_write_1h_tokens

    clock.now = 299.0  # within five minutes: the tail entry is read and refreshed
    assert cache.usage(body("Hello?"), 1).cache_read_tokens == whole
    clock.now = 598.0  # 299 s after the refresh: still there
    assert cache.usage(body("Hello?"), 1).cache_read_tokens == whole
    clock.now = 598.0 + 301  # the 5-minute tail is gone, the 1-hour system block is not
    late = cache.usage(body("Hello?"), 1)
    assert (late.cache_read_tokens, late.cache_write_tokens) == (static, whole - static)
    clock.now += 3601  # now the system block too
    assert cache.usage(body("Hello?"), 1).cache_read_tokens == 0


def test_a_prefix_below_the_model_minimum_is_never_cached() -> None:
    cache = PromptCache(min_tokens=None)  # the request model's own minimum
    for _ in range(2):
        short = cache.usage(body("Hi", model="claude-sonnet-4-6"), 1)  # ~620 < 1,024 tokens
        assert (short.cache_read_tokens, short.cache_write_tokens) == (0, 0)
        assert 600 < short.input_tokens < 1024
    long_question = "Which classes run on Monday? " * 120  # ~870 more tokens
    written = cache.usage(body(long_question, model="claude-sonnet-4-6"), 1)
    assert written.cache_write_tokens > 1024 and written.cache_write_1h_tokens == 0  # system <
    again = cache.usage(body(long_question, model="claude-sonnet-4-6"), 1)
    assert again.cache_read_tokens == written.cache_write_tokens and again.input_tokens == 0


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(FakeProvider()) as started:
        yield started


async def test_the_sdk_reads_the_simulated_split(server: FakeServer) -> None:
    cache = PromptCache()
    server.provider.enqueue(*(anthropic_reply(text="ok", cache=cache) for _ in range(2)))
    config = ProviderConfig(anthropic_api_key="k", anthropic_base_url=server.url, max_retries=0)
    model = AnthropicModel("claude-sonnet-4-6", config=config)
    request = ModelRequest(
        system=(SystemBlock(text=STATIC, cache=True),),
        messages=(Message(role="user", parts=Message.user("Hello?").parts, cache=True),),
    )
    completions = []
    try:
        for _ in range(2):
            async for item in model.stream(request):
                if isinstance(item, Completion):
                    completions.append(item)
    finally:
        await model.aclose()

    first, second = (c.usage for c in completions)
    static = first.cache_write_1h_tokens
    tail = first.cache_write_tokens - static
    assert static > 500 and 0 < tail < 20
    assert (second.cache_read_tokens, second.cache_write_tokens) == (static + tail, 0)
    # the system block's tokens at $6, the question's at $3.75 per million tokens
    assert cost_usd_micros("claude-sonnet-4-6", first) == round(static * 6 + tail * 3.75)
