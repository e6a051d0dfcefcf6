"""Rebuild the conversation from the session log (the log is the only source of truth)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from providers import Message
from store import StoredEvent


@dataclass(slots=True)
class _TurnText:
    user: str | None = None
    answer: list[str] = field(default_factory=list)
    finished: bool = False


def conversation(
    events: Iterable[StoredEvent], *, exclude_turn: str | None = None
) -> list[Message]:
    """User messages and the final answers of finished turns, in turn order.

    Turns are keyed by ``turn_id`` because concurrent turns interleave in the log. An
    answer counts only once its ``message_done`` is logged: a reply cut off by an error is
    not replayed to the model as if it were whole.
    """
    turns: dict[str, _TurnText] = {}
    for stored in events:
        if stored.turn_id is None or stored.turn_id == exclude_turn:
            continue
        turn = turns.setdefault(stored.turn_id, _TurnText())
        data = stored.data
        if stored.type == "user_message":
            turn.user = data["text"]
        elif stored.type == "text_delta" and data.get("step_id") is None:
            turn.answer.append(data["delta"])
        elif stored.type == "message_done":
            turn.finished = True
    messages: list[Message] = []
    for turn in turns.values():
        if turn.user is not None:
            messages.append(Message.user(turn.user))
        if turn.finished:
            messages.append(Message.assistant("".join(turn.answer)))
    return messages
