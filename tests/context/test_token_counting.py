"""Offline, hash-checked token counting: encodings, safety factor, cache, threads."""

from __future__ import annotations

import asyncio
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import context._tokens as tokens_module
from context import EncodingIntegrityError, TokenCounter
from context._tokens import (
    CLAUDE_SAFETY_FACTOR,
    LARGE_TEXT_CHARS,
    OPEN_MODEL_SAFETY_FACTOR,
    encoding_for,
    load_encoding,
)
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

VENDORED = Path(tokens_module.__file__).parent / "encodings"
MIXED = "Ahoy! Ünïcödé, 日本語のテキスト, emoji 🚢⚓️, code `x = f(1)`\n\tand <|endoftext|> too."


def test_vendored_encodings_load_and_match_tiktoken_ids() -> None:
    # Reference ids from tiktoken's published encodings.
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert load_encoding("o200k_base").encode("hello world") == [24912, 2375]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_encode_decode_round_trip(name: str) -> None:
    counter = TokenCounter("openai:gpt-4" if name == "cl100k_base" else "openai:gpt-4o")
    assert counter.encoding_name == name
    ids = counter.encode(MIXED)
    assert counter.decode(ids) == MIXED
    assert counter.raw_count(MIXED) == len(ids)  # special-token text counts as plain text


def test_a_corrupted_copy_fails_the_hash_check(tmp_path: Path) -> None:
    shutil.copy(VENDORED / "cl100k_base.tiktoken", tmp_path / "cl100k_base.tiktoken")
    assert load_encoding("cl100k_base", tmp_path).encode("hello world") == [15339, 1917]

    broken = tmp_path / "broken"
    broken.mkdir()
    data = bytearray((VENDORED / "cl100k_base.tiktoken").read_bytes())
    data[1000] ^= 0x01
    (broken / "cl100k_base.tiktoken").write_bytes(bytes(data))
    with pytest.raises(EncodingIntegrityError, match=r"SHA-256 [0-9a-f]{64}, expected 2239"):
        load_encoding("cl100k_base", broken)
    with pytest.raises(EncodingIntegrityError):
        TokenCounter("openai:gpt-4", encodings_dir=broken)


def test_unknown_encoding_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Unknown encoding 'p50k_base'.*cl100k_base"):
        load_encoding("p50k_base")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("anthropic:claude-haiku-4-5", ("cl100k_base", CLAUDE_SAFETY_FACTOR)),
        ("claude-sonnet-4-5", ("cl100k_base", CLAUDE_SAFETY_FACTOR)),
        ("openai:gpt-4.1-mini", ("o200k_base", 1.0)),
        ("openai:gpt-4o", ("o200k_base", 1.0)),
        ("openai:gpt-5", ("o200k_base", 1.0)),
        ("openai:gpt-oss-120b", ("o200k_base", 1.0)),
        ("openai:gpt-4", ("cl100k_base", 1.0)),
        ("openai:gpt-3.5-turbo", ("cl100k_base", 1.0)),
        ("gpt-4o-mini", ("o200k_base", 1.0)),
        ("openai-compatible:llama3.1@http://127.0.0.1:11434/v1", ("o200k_base", 1.2)),
        ("openai:some-future-model", ("o200k_base", OPEN_MODEL_SAFETY_FACTOR)),
        ("scripted:examples/hello.yaml", ("o200k_base", 1.0)),
        (None, ("o200k_base", 1.0)),
    ],
)
def test_encoding_follows_the_model_family(spec: str | None, expected: tuple[str, float]) -> None:
    assert encoding_for(spec) == expected


def test_claude_counts_carry_the_safety_factor() -> None:
    counter = TokenCounter("anthropic:claude-haiku-4-5")
    assert counter.safety_factor == CLAUDE_SAFETY_FACTOR == 1.35
    assert counter.pad(100) == 135  # not 136: float noise is rounded away
    assert counter.pad(1) == 2
    for text in ("hi", MIXED, "word " * 777):
        raw = counter.raw_count(text)
        assert counter.count(text) == math.ceil(round(raw * 1.35, 6)) > raw
    exact = TokenCounter("openai:gpt-4")
    assert exact.count(MIXED) == exact.raw_count(MIXED) == counter.raw_count(MIXED)


def _spy_encode(counter: TokenCounter) -> list[str]:
    seen: list[str] = []
    real = counter.encode

    def encode(text: str) -> list[int]:
        seen.append(text)
        return real(text)

    counter.encode = encode  # type: ignore[method-assign]
    return seen


def test_counts_are_cached_least_recently_used_first_out() -> None:
    counter = TokenCounter(cache_size=2)
    encoded = _spy_encode(counter)
    for text in ("a a", "b b", "a a", "c c"):  # "b b" is now the least recently used
        counter.count(text)
    assert encoded == ["a a", "b b", "c c"]
    counter.count("a a")
    counter.count("c c")
    assert encoded == ["a a", "b b", "c c"]
    counter.count("b b")
    assert encoded == ["a a", "b b", "c c", "b b"]


def test_large_texts_are_cached_by_digest() -> None:
    counter = TokenCounter()
    encoded = _spy_encode(counter)
    big = "lorem ipsum dolor " * 12_000
    assert counter.count(big) == counter.count(big)
    assert len(encoded) == 1
    assert all(isinstance(key, bytes) and len(key) == 16 for key in counter._cache)


def _spy_to_thread(monkeypatch: pytest.MonkeyPatch) -> list[Callable[..., Any]]:
    calls: list[Callable[..., Any]] = []
    real = asyncio.to_thread

    async def to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    return calls


async def test_acount_moves_large_texts_to_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_to_thread(monkeypatch)
    counter = TokenCounter("anthropic:claude-haiku-4-5")
    small = "short text"
    assert await counter.acount(small) == counter.count(small)
    assert calls == []
    big = "The quick brown fox jumps over the lazy dog. " * 4_500  # ~200 KB
    assert len(big) > 10 * LARGE_TEXT_CHARS
    assert await counter.acount(big) == counter.count(big)
    assert len(calls) == 1
    await counter.acount(big)  # cached now: no second trip
    assert len(calls) == 1


async def test_the_loop_keeps_running_while_a_large_text_is_counted() -> None:
    counter = TokenCounter()
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    count = await counter.acount("fresh text for this test only. " * 7_000)  # ~210 KB
    during = ticks - before
    stop.set()
    await task
    assert count > 40_000
    # Counted on the loop, the ticker could not run at all between these two reads.
    assert during > 0


def test_truncate_cuts_at_a_token_boundary_without_broken_characters() -> None:
    for counter in (TokenCounter(), TokenCounter("anthropic:claude-haiku-4-5")):
        text = "日本語のテキスト🚢⚓️ and some English words. " * 40
        for limit in (0, 1, 7, 50, 333):
            head = counter.truncate(text, limit)
            assert text.startswith(head)
            assert "\ufffd" not in head
            assert counter.count(head) <= limit
        assert counter.truncate(text, 10_000) == text
        assert counter.count(counter.truncate(text, 50)) >= 40  # cuts near the limit


def _request() -> ModelRequest:
    return ModelRequest(
        system=(SystemBlock(text="You are Bosun.", cache=True), SystemBlock(text="Profile: Ada")),
        messages=(
            Message.user("What's on my schedule?"),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Checking."),
                    ToolCall(id="t1", name="get_schedule", input={"days_ahead": 3}),
                ),
            ),
            Message(role="user", parts=(ToolResult(tool_use_id="t1", content="Mon: dentist"),)),
        ),
        tools=(
            ToolSpec(
                name="get_schedule",
                description="List calendar events.",
                input_schema={"type": "object", "properties": {"days_ahead": {"type": "integer"}}},
            ),
        ),
        response_schema=ResponseSchema(name="answer", schema={"type": "object"}),
    )


def test_count_request_adds_content_and_small_overheads() -> None:
    counter = TokenCounter("anthropic:claude-haiku-4-5")
    request = _request()
    content = (
        counter.count("You are Bosun.")
        + counter.count("Profile: Ada")
        + counter.count("What's on my schedule?")
        + counter.count("Checking.")
        + counter.count("get_schedule")
        + counter.count('{"days_ahead":3}')
        + counter.count("Mon: dentist")
        + counter.count(tokens_module.tools_json(request))
        + counter.count('{"type":"object"}')
    )
    overheads = (
        tokens_module.REQUEST_OVERHEAD
        + 5 * tokens_module.MESSAGE_OVERHEAD  # 2 system blocks, 3 messages
        + 2 * tokens_module.PART_OVERHEAD  # a tool call and a tool result
    )
    assert counter.count_request(request) == content + overheads


async def test_acount_request_uses_a_thread_for_large_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _spy_to_thread(monkeypatch)
    counter = TokenCounter()
    small = _request()
    assert await counter.acount_request(small) == counter.count_request(small)
    assert calls == []
    big = ModelRequest(messages=tuple(Message.user("x y z " * 500) for _ in range(20)))
    assert await counter.acount_request(big) == counter.count_request(big)
    assert len(calls) == 1
