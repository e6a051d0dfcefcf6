"""Model-based conversation compression and session titles, both best-effort.

A summary replaces the older part of a long history (the turn stores it as a
``history_summarised`` event that later replays start from); a title names the session.
Both are conveniences: on a timeout or a provider error they return ``None`` and the turn
carries on with the fitter's plain cuts and an untitled session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from context._budget import SUMMARISER_BUDGET
from context._conversation import KEEP_LAST
from context._fit import fit_section
from context._sections import Item
from context._tokens import TokenCounter
from context._transcript import compact_text
from providers import Message, Model, ModelError, ModelRequest, SystemBlock, TokenUsage, call_model

log = structlog.get_logger(__name__)

COMPRESS_AFTER_MESSAGES = 24  # messages past the last summary that trigger a new one
TITLE_CHARS = 60
SUMMARISER_PROMPT = (
    "You compress chat histories for an assistant that will continue the conversation. "
    "Write a concise summary of the transcript: the user's goals, facts and preferences "
    "they stated, decisions made, actions taken (with names, ids, dates and numbers "
    "exactly as given), and open questions. The transcript shows tool calls and their "
    "results in compact form ([tool call NAME id=… input=…], [tool result id=… ok|error: "
    "…]): keep every id a tool created or changed (a record, a task, an artifact), with "
    "what it is, since later turns will refer to it; say which calls failed. Plain prose "
    "or short bullets, no preamble. If the transcript starts with an earlier summary, "
    "fold it in, keeping its ids."
)
OnUsage = Callable[[str, TokenUsage], None]  # (model reported, usage): for cost accounting
TITLE_PROMPT = (
    "Write a short title (at most six words) for a chat that starts with the user's "
    "message below. Reply with the title only: no quotes, no trailing punctuation."
)


def needs_compression(
    messages_since_summary: int, tokens: int, allocation: int, *, keep_last: int = KEEP_LAST
) -> bool:
    """Compress when 24+ messages followed the last summary or the history is over its
    allocation, and there is something older than the ``keep_last`` verbatim messages."""
    if messages_since_summary <= keep_last:
        return False
    return messages_since_summary >= COMPRESS_AFTER_MESSAGES or tokens > allocation


async def _reply_text(
    model: Model, request: ModelRequest, timeout_s: float, on_usage: OnUsage | None
) -> str | None:
    try:
        async with asyncio.timeout(timeout_s):
            called = await call_model(model, request)
    except TimeoutError:
        log.warning("context.summariser_timeout", model=model.name, timeout_s=timeout_s)
        return None
    except ModelError as exc:
        log.warning("context.summariser_failed", model=model.name, code=exc.code)
        return None
    if on_usage is not None:
        on_usage(called.completion.model, called.completion.usage)
    return called.text.strip() or None


async def compress_history(
    model: Model,
    messages: Sequence[Message],
    *,
    keep_last: int = KEEP_LAST,
    timeout_s: float = 20.0,
    counter: TokenCounter | None = None,
    max_input_tokens: int = SUMMARISER_BUDGET.tokens("history"),
    max_tokens: int = 600,
    on_usage: OnUsage | None = None,
) -> str | None:
    """A summary of all but the last ``keep_last`` messages, or ``None`` (nothing older,
    a timeout, a provider error, an empty reply).

    Pass ``History.messages`` so an earlier summary note is folded in. The transcript is
    fitted to ``max_input_tokens`` (oldest dropped first) so a very long session still
    makes one bounded call.
    """
    older = list(messages[: max(len(messages) - keep_last, 0)])
    if not older:
        return None
    fill = fit_section(
        "history",
        max_input_tokens,
        [Item(full=compact_text(m), key=f"message {i}") for i, m in enumerate(older)],
        counter=counter or TokenCounter(),
        drop_from="start",
        separator="\n",
    )
    request = ModelRequest(
        system=(SystemBlock(text=SUMMARISER_PROMPT, cache=True),),
        messages=(Message.user(f"<transcript>\n{fill.text}\n</transcript>"),),
        max_tokens=max_tokens,
    )
    return await _reply_text(model, request, timeout_s, on_usage)


async def make_title(
    model: Model,
    first_message: str,
    *,
    timeout_s: float = 10.0,
    max_chars: int = TITLE_CHARS,
    on_usage: OnUsage | None = None,
) -> str | None:
    """A short session title from the first user message, or ``None`` on any failure."""
    request = ModelRequest(
        system=(SystemBlock(text=TITLE_PROMPT, cache=True),),
        messages=(Message.user(first_message[:2_000]),),
        max_tokens=32,
    )
    text = await _reply_text(model, request, timeout_s, on_usage)
    if text is None:
        return None
    title = text.splitlines()[0].strip().strip("\"'`*#").strip().rstrip(".!?:;,").strip()
    if len(title) > max_chars:
        title = title[: max_chars - 1].rstrip() + "…"
    return title or None
