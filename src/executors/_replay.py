"""The replay-integrity guard: repair a transcript whose tool calls are not all answered.

Providers reject a history in which an assistant's tool call has no result in the very
next message (the user typed instead of clicking, a turn stopped mid-message), or in which
a result answers no call of the message before it. ``repair_transcript`` is the pure fix;
``guard_transcript`` applies it to a step's transcript before every model call and records
each repair (a ``replay_violation`` event and a ``replay.violation`` log line, ids only).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from context import order_messages
from events import ReplayViolation
from executors._state import StepEnv, StepState
from providers import Message, Part, ToolCall, ToolResult

REPLAY_VIOLATION = "replay_integrity_violation"
"""The error code of a synthetic result (one of the stable codes in docs/api.md)."""

_log = structlog.get_logger("bosun.executors")


@dataclass(frozen=True, slots=True)
class Repair:
    """A transcript made valid: ``answered`` calls got a synthetic error result,
    ``dropped`` results (answering no call of the message before them) were removed."""

    messages: tuple[Message, ...]
    answered: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.answered or self.dropped)


def repair_transcript(messages: Sequence[Message]) -> Repair:
    """Pair every tool call with exactly one result in the message right after it.

    - a call with no result gets a synthetic error result (``replay_integrity_violation``,
      ``is_error``) at the start of the next user message, or in a new user message when
      the next message is the assistant's or there is none;
    - a result that answers no call of the assistant message before it (an unknown id, a
      duplicate, a result after a message without calls) is dropped, since providers
      reject it too; a message left empty by that is dropped whole.

    A message that needs no repair is kept as it is (the same object), so a valid
    transcript comes back unchanged and a repaired one keeps every untouched message
    byte-identical (the prompt-cache prefix).
    """
    out: list[Message] = []
    answered: list[str] = []
    dropped: list[str] = []
    calls: tuple[ToolCall, ...] = ()  # the previous assistant message's calls
    for message in messages:
        if message.role == "user":
            fixed, missing, stray = _answer(message, calls)
            answered += missing
            dropped += stray
            if fixed is not None:
                out.append(fixed)
        else:
            if calls:  # an assistant message right after one with calls
                out.append(_results_only(calls))
                answered += [c.id for c in calls]
            out.append(message)
        calls = _calls(message) if message.role == "assistant" else ()
    if calls:  # the transcript ends with unanswered calls
        out.append(_results_only(calls))
        answered += [c.id for c in calls]
    if not answered and not dropped:
        return Repair(messages=tuple(messages))
    return Repair(messages=tuple(out), answered=tuple(answered), dropped=tuple(dropped))


def guard_transcript(state: StepState, env: StepEnv) -> None:
    """Order the step's transcript (spec §4.3: consecutive user messages merged, text
    that came while a result was due placed after it), then repair it in place before a
    model call, and record the repair.

    The repaired transcript replaces the old one, so each violation is repaired (and
    recorded) once and later requests keep the same prefix.
    """
    ordered = order_messages(state.messages)  # spec §4.3: merged, text after results
    repair = repair_transcript(ordered)
    if not repair.changed:
        if ordered != state.messages:
            state.messages[:] = ordered
        return
    state.messages[:] = repair.messages
    env.emit(
        ReplayViolation(
            tool_use_ids=list(repair.answered), dropped=list(repair.dropped), step_id=env.step_id
        )
    )
    _log.warning(
        "replay.violation",
        session_id=env.scope.session_id,
        turn_id=env.scope.turn_id,
        step_id=env.step_id,
        tool_use_ids=list(repair.answered),
        dropped=list(repair.dropped),
    )


def synthetic_result(call: ToolCall) -> ToolResult:
    """The error result standing in for a call that was never answered."""
    error = {
        "code": REPLAY_VIOLATION,
        "message": (
            f"{call.name} call {call.id!r} has no recorded result (the conversation moved on "
            "before it was resolved); treat it as not done"
        ),
        "hint": "If it is still needed, check the current state with a read tool, then call "
        "it again",
    }
    content = json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":"))
    return ToolResult(tool_use_id=call.id, content=content, is_error=True)


def _calls(message: Message) -> tuple[ToolCall, ...]:
    return tuple(p for p in message.parts if isinstance(p, ToolCall))


def _results_only(calls: Sequence[ToolCall]) -> Message:
    return Message(role="user", parts=tuple(synthetic_result(c) for c in calls))


def _answer(
    message: Message, calls: Sequence[ToolCall]
) -> tuple[Message | None, list[str], list[str]]:
    """``message`` (a user message) answering ``calls``: (the message as it should be, or
    ``None`` to drop it; the call ids answered synthetically; the result ids dropped)."""
    wanted = {c.id for c in calls}
    kept: dict[str, ToolResult] = {}
    stray: list[str] = []
    others: list[Part] = []
    for part in message.parts:
        if not isinstance(part, ToolResult):
            others.append(part)
        elif part.tool_use_id in wanted and part.tool_use_id not in kept:
            kept[part.tool_use_id] = part
        else:
            stray.append(part.tool_use_id)
    missing = [c for c in calls if c.id not in kept]
    if not missing and not stray:
        return message, [], []
    # Results first, in call order: providers want them before any text of the message.
    results = [kept.get(c.id) or synthetic_result(c) for c in calls]
    parts = (*results, *others)
    fixed = replace(message, parts=parts) if parts else None
    return fixed, [c.id for c in missing], stray
