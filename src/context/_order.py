"""Spec §4.3's message order: merged user messages, text held back while a result is due.

Providers want every tool call answered in the very next message, and Anthropic wants
roles to alternate. A transcript built from events breaks both in ordinary ways: a turn
that failed leaves its user message unanswered before the next one; a knowledge or
artifact note, a wrap-up note or the user's answer arrives while a tool result is still
due. ``order_messages`` fixes the order without losing anything: consecutive user
messages become one, and text that arrives while a call is unanswered is held back and
placed right after that call's results, in the same user message.
"""

from __future__ import annotations

from collections.abc import Sequence

from providers import Message, Part, ToolCall, ToolResult


def _merge(first: Message, second: Message) -> Message:
    parts = (*first.parts, *second.parts)
    return Message(role="user", parts=parts, cache=first.cache or second.cache)


class _Ordering:
    """The state of one pass: the output, the calls still unanswered, the held-back text."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self.pending: set[str] = set()
        self.held: list[Part] = []

    def user(self, message: Message) -> None:
        results = [p for p in message.parts if isinstance(p, ToolResult)]
        others = [p for p in message.parts if not isinstance(p, ToolResult)]
        if not self.pending:
            self._append(message)
            return
        self.pending -= {r.tool_use_id for r in results}
        if self.pending:  # still waiting for a result: hold the text back
            self.held += others
            if results:
                self._append(Message(role="user", parts=tuple(results)))
            return
        parts = (*results, *self.held, *others)
        self.held = []
        self._append(message if parts == message.parts else Message(role="user", parts=parts))

    def assistant(self, message: Message) -> None:
        self.flush()  # results that never came: the replay guard answers those calls
        self.out.append(message)
        self.pending = {p.id for p in message.parts if isinstance(p, ToolCall)}

    def flush(self) -> None:
        if self.held:
            self._append(Message(role="user", parts=tuple(self.held)))
            self.held = []

    def _append(self, message: Message) -> None:
        if self.out and self.out[-1].role == "user":
            self.out[-1] = _merge(self.out[-1], message)
        else:
            self.out.append(message)


def order_messages(messages: Sequence[Message]) -> list[Message]:
    """``messages`` in spec §4.3's order: consecutive user messages merged into one, and
    user text (a note, a knowledge or artifact block, the user's words) that arrives while
    a tool call is unanswered placed after its result, in the same user message.

    Nothing is dropped; a message that needs no change is kept as the same object, so an
    ordered transcript comes back equal (and a valid prefix stays byte-identical).
    """
    ordering = _Ordering()
    for message in messages:
        if message.role == "user":
            ordering.user(message)
        else:
            ordering.assistant(message)
    ordering.flush()
    return ordering.out
