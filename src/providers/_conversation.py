"""Which conversation a model call belongs to, for doubles that keep state per conversation.

``ModelRequest`` carries no session (a real provider needs none), yet a ``ScriptedModel``
that serves a whole server must start each session at its script's first step, whatever
other sessions did. The turn runner sets the key around a turn; tasks a turn starts
(parallel steps) inherit it, as asyncio copies context variables into new tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_KEY: ContextVar[str | None] = ContextVar("bosun_conversation", default=None)


def conversation_key() -> str | None:
    """The key of the conversation the current model call belongs to (``None``: none set)."""
    return _KEY.get()


@contextmanager
def in_conversation(key: str) -> Iterator[None]:
    """Make the model calls inside this block (and the tasks it starts) belong to ``key``."""
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)
