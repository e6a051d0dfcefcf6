"""Model-based compression and titles: best-effort, bounded, tested with the doubles."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from context import TokenCounter, compress_history, make_title, needs_compression
from context._compress import COMPRESS_AFTER_MESSAGES
from providers import FunctionModel, Message, ModelRequest, ScriptedModel

MESSAGES = [
    Message.user("I want to sail to Brest on 12 June."),
    Message.assistant("Noted: Brest, 12 June."),
    Message.user("Book the marina for two nights."),
    Message.assistant("Marina booked, ref M-42."),
    Message.user("What's the weather?"),
    Message.assistant("Westerly 15 knots."),
    Message.user("And tides?"),
    Message.assistant("High water 09:12."),
]


async def test_compress_history_summarises_all_but_the_last_messages() -> None:
    model = FunctionModel(lambda request: "  Sailing to Brest 12 June; marina ref M-42.  ")
    summary = await compress_history(model, MESSAGES, keep_last=4, timeout_s=5)
    assert summary == "Sailing to Brest 12 June; marina ref M-42."
    (request,) = model.calls
    assert request.system[0].text.startswith("You compress chat histories")
    (message,) = request.messages
    assert message.text == (
        "<transcript>\n"
        "user: I want to sail to Brest on 12 June.\n"
        "assistant: Noted: Brest, 12 June.\n"
        "user: Book the marina for two nights.\n"
        "assistant: Marina booked, ref M-42.\n"
        "</transcript>"
    )


async def test_compress_history_bounds_its_input() -> None:
    model = FunctionModel(lambda request: "summary")
    many = [Message.user(f"message {i} " + "filler " * 50) for i in range(300)]
    assert await compress_history(model, many, counter=TokenCounter(), max_input_tokens=2_000)
    transcript = model.calls[0].messages[0].text
    assert TokenCounter().count(transcript) <= 2_000 + 10
    assert transcript.startswith("<transcript>\n[… ")  # the oldest were dropped
    assert "message 293 " in transcript  # the newest of the older part survives


async def test_nothing_to_compress_makes_no_call() -> None:
    model = ScriptedModel([])
    assert await compress_history(model, MESSAGES[:6], keep_last=6) is None
    assert model.calls == []


async def test_a_provider_error_or_timeout_gives_none() -> None:
    failing = ScriptedModel([{"error": {"code": "provider_overloaded"}}])
    with capture_logs() as logs:
        assert await compress_history(failing, MESSAGES, keep_last=2) is None
    assert logs[0]["event"] == "context.summariser_failed"
    assert logs[0]["code"] == "provider_overloaded"
    failing.assert_complete()

    async def never(request: ModelRequest) -> AsyncIterator[str]:
        yield "partial "
        await asyncio.Event().wait()

    with capture_logs() as logs:
        assert await compress_history(FunctionModel(never), MESSAGES, timeout_s=0.05) is None
    assert logs[0]["event"] == "context.summariser_timeout"


async def test_an_empty_summary_gives_none() -> None:
    assert await compress_history(FunctionModel(lambda r: "  "), MESSAGES, keep_last=2) is None


@pytest.mark.parametrize(
    ("reply", "title"),
    [
        ("Sailing to Brest", "Sailing to Brest"),
        ('"Sailing to Brest."\nextra line', "Sailing to Brest"),
        ("**Marina booking!**", "Marina booking"),
        ("A" * 80, "A" * 59 + "…"),
        ("   ", None),
    ],
)
async def test_make_title(reply: str, title: str | None) -> None:
    model = ScriptedModel([{"text": reply, "chunks": [reply]}])
    assert await make_title(model, "I want to sail to Brest", timeout_s=5) == title
    assert model.calls[0].messages[0].text == "I want to sail to Brest"
    assert model.calls[0].max_tokens == 32


async def test_make_title_is_best_effort() -> None:
    failing = ScriptedModel([{"error": {"code": "provider_unavailable"}}])
    assert await make_title(failing, "hello") is None


@pytest.mark.parametrize(
    ("since", "tokens", "allocation", "expected"),
    [
        (COMPRESS_AFTER_MESSAGES, 100, 2_500, True),  # many messages past the summary
        (COMPRESS_AFTER_MESSAGES - 1, 100, 2_500, False),
        (10, 2_501, 2_500, True),  # over the allocation
        (10, 2_500, 2_500, False),
        (6, 9_999, 2_500, False),  # nothing older than the verbatim tail to fold in
        (0, 0, 2_500, False),
    ],
)
def test_needs_compression(since: int, tokens: int, allocation: int, expected: bool) -> None:
    assert needs_compression(since, tokens, allocation) is expected
