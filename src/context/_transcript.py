"""The session log as the model's native transcript (trainer spec §4.3).

Each finished turn replays as the model lived it: the user's text, the assistant's text,
each tool call (``ToolCall``, its id kept) followed in the next user message by its
``ToolResult`` and the tagged blocks that belong to it (``<artifact …>``). A call with no
recorded result (a crash, a suspension the user never answered) gets a typed error result,
so the transcript is always valid for a provider. Calls made inside a complex plan's steps
are kept too (with their ids): they are what the turn did. The steps' own words are not:
the merge's answer is what was said.

Results over ``RESULT_CHARS`` are abbreviated in place, the same way every time (a prefix
of the compact JSON and a marker naming the tool that reads them whole), so a transcript
is byte-identical from one turn to the next and stays in the provider's prompt cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from context._artifact_text import artifact_text
from providers import Message, Part, TextPart, ToolCall, ToolResult
from store import StoredEvent

RESULT_CHARS = 1_500
"""A replayed tool result longer than this is abbreviated (its head and a marker)."""
_HEAD_CHARS = 600
READ_RESULT_TOOL = "tool_results.read"
"""The built-in tool that reads an abbreviated result whole (registry name)."""
ABBREVIATED = (
    "…[abbreviated: {chars:,} characters in all; call "
    + READ_RESULT_TOOL.replace(".", "_")
    + ' with {{"tool_use_id": "{id}"}} to read it whole]'
)
NO_RESULT = "replay_integrity_violation"
"""The error code of the result standing in for a call that has none in the log."""
_COMPACT_CHARS = 300  # what the compact form keeps of a result


class _Artifact(NamedTuple):
    id: str
    version: int
    type: str
    summary: str


@dataclass(slots=True)
class _Call:
    call: ToolCall
    seq: int
    result: ToolResult | None = None
    blocks: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Text:
    text: str
    seq: int


@dataclass(slots=True)
class TurnLog:
    """One turn's part of the log, folded: its user text, then its answer text and calls
    in the order they happened."""

    user: str | None = None
    user_seq: int = 0
    pieces: list[_Text | _Call] = field(default_factory=list)
    calls: dict[str, _Call] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    done_seq: int | None = None
    asked: bool = False  # the turn asked the user: their next message is a tool result

    def fold(self, stored: StoredEvent) -> None:
        """Take one event of this turn (``text_delta``s a takeover abandoned excluded)."""
        data, seq = stored.data, stored.seq
        match stored.type:
            case "user_message" if self.user is None:
                self.user, self.user_seq = str(data["text"]), seq
            case "user_message" if not self.asked:  # more words before the turn answered
                self.pieces.append(_Text(text=str(data["text"]), seq=seq))
            case "text_delta" if data.get("step_id") is None and not self.in_flight:
                self._say(str(data["delta"]), seq)
            case "tool_started":
                self._start(data, seq)
            case "tool_completed":
                self._complete(data, seq)
            case "artifact":
                self._artifact(data, seq)
            case "question_pending":
                self.asked = True
            case "message_done":
                self.done_seq = seq

    def _say(self, delta: str, seq: int) -> None:
        last = self.pieces[-1] if self.pieces else None
        if isinstance(last, _Text):
            last.text, last.seq = last.text + delta, seq
        else:
            self.pieces.append(_Text(text=delta, seq=seq))

    def _start(self, data: dict[str, Any], seq: int) -> None:
        use_id = str(data["tool_use_id"])
        if use_id in self.calls:
            return  # a takeover runs a cut-off call again under its id: one call
        name = str(data["tool"]).replace(".", "_")  # the wire name the model used
        raw = data.get("input")
        call = ToolCall(id=use_id, name=name, input=dict(raw) if isinstance(raw, dict) else {})
        self.calls[use_id] = entry = _Call(call=call, seq=seq)
        self.pieces.append(entry)
        self.in_flight.add(use_id)  # what a tool says meanwhile is its own (notify_user)

    def _complete(self, data: dict[str, Any], seq: int) -> None:
        use_id = str(data["tool_use_id"])
        self.in_flight.discard(use_id)
        entry = self.calls.get(use_id)
        if entry is None or entry.result is not None:
            return  # its call is older than what was read (before a summary), or told twice
        entry.result = result_of(data)
        entry.seq = max(entry.seq, seq)

    def _artifact(self, data: dict[str, Any], seq: int) -> None:
        entry = self.calls.get(str(data.get("tool_use_id")))
        if entry is None:
            return
        tag = _Artifact(
            id=str(data["artifact_id"]), version=int(data["version"]),
            type=str(data["artifact_type"]), summary=str(data.get("summary", "")),
        )  # fmt: skip
        entry.blocks.append(artifact_text(tag))
        entry.seq = max(entry.seq, seq)

    def messages(self) -> list[tuple[Message, int]]:
        """The turn as native messages, each with the log seq that completed it (a call
        and its result share their result's, so no summary boundary falls between). A turn
        that never finished (no ``message_done``) keeps its user text and its calls (they
        happened) but not its half-written answer."""
        out: list[tuple[Message, int]] = []
        if self.user is not None:
            out.append((Message.user(self.user), self.user_seq))
        parts: list[Part] = []
        seq = self.user_seq
        for piece in self.pieces:
            seq = max(seq, piece.seq)
            if isinstance(piece, _Text):
                if self.done_seq is not None and piece.text:
                    parts.append(TextPart(text=piece.text))
                continue
            parts.append(piece.call)
            out.append((Message(role="assistant", parts=tuple(parts)), seq))
            result = piece.result or missing_result(piece.call)
            blocks = tuple(TextPart(text=block) for block in piece.blocks)
            out.append((Message(role="user", parts=(result, *blocks)), seq))
            parts = []
        if parts and self.done_seq is not None:
            out.append((Message(role="assistant", parts=tuple(parts)), max(seq, self.done_seq)))
        return out


def result_of(data: dict[str, Any]) -> ToolResult:
    """A ``tool_completed`` event as the result a model is shown: the output as compact
    JSON (``{"error": …}`` when it failed), abbreviated past ``RESULT_CHARS``."""
    ok = bool(data.get("ok"))
    payload: Any
    if ok:
        output = data.get("output")
        payload = {"ok": True} if output is None else output
    else:
        error = data.get("error") or {"code": "failed", "message": "The tool failed"}
        payload = {"error": {k: v for k, v in error.items() if v is not None}}
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    use_id = str(data["tool_use_id"])
    return ToolResult(tool_use_id=use_id, content=abbreviate(text, use_id), is_error=not ok)


def abbreviate(text: str, use_id: str) -> str:
    """``text`` as replayed: whole up to ``RESULT_CHARS``, else its head and a marker
    naming the read tool (a pure function of the text: the same bytes every turn)."""
    if len(text) <= RESULT_CHARS:
        return text
    return text[:_HEAD_CHARS] + ABBREVIATED.format(chars=len(text), id=use_id)


def missing_result(call: ToolCall) -> ToolResult:
    """The typed error result of a call the log has no result for."""
    error = {
        "code": NO_RESULT,
        "message": (
            f"{call.name} call {call.id!r} has no recorded result (its turn stopped before "
            "it finished); treat it as not done"
        ),
        "hint": "If it is still needed, check the current state with a read tool, then call "
        "it again",
    }
    content = json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":"))
    return ToolResult(tool_use_id=call.id, content=content, is_error=True)


def answers(call_message: Message, result_message: Message) -> bool:
    """Whether ``result_message`` holds the results of ``call_message``'s tool calls
    (the two must stay together: neither may be sent without the other)."""
    return (
        call_message.role == "assistant"
        and result_message.role == "user"
        and any(isinstance(p, ToolCall) for p in call_message.parts)
        and any(isinstance(p, ToolResult) for p in result_message.parts)
    )


def pair_units(messages: Sequence[Message]) -> list[list[int]]:
    """``messages``' indices grouped so that a message with tool calls and the message
    with their results are one unit (what a fitter keeps or drops whole)."""
    units: list[list[int]] = []
    for index, message in enumerate(messages):
        if units and index and answers(messages[index - 1], message):
            units[-1].append(index)
        else:
            units.append([index])
    return units


def without_orphans(messages: Sequence[Message]) -> list[Message]:
    """``messages`` less the tool results at their start that answer no call shown (the
    call was summarised or dropped): a provider rejects an orphan result."""
    out = list(messages)
    while out and out[0].role == "user" and any(isinstance(p, ToolResult) for p in out[0].parts):
        rest = tuple(p for p in out[0].parts if not isinstance(p, ToolResult))
        if rest:
            out[0] = Message(role="user", parts=rest)
            break
        out.pop(0)
    return out


def compact_text(message: Message) -> str:
    """A message as ``role: text``, its tool calls and results in compact form (the call
    with its id and input, the result's status and head): what the planner and the
    summariser read of earlier tool work."""
    pieces: list[str] = []
    for part in message.parts:
        match part:
            case TextPart(text=text):
                pieces.append(text)
            case ToolCall(id=use_id, name=name, input=data):
                args = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
                pieces.append(f"[tool call {name} id={use_id} input={_head(args)}]")
            case ToolResult(tool_use_id=use_id, content=content, is_error=is_error):
                status = "error" if is_error else "ok"
                pieces.append(f"[tool result id={use_id} {status}: {_head(content)}]")
    return f"{message.role}: {' '.join(pieces)}"


def _head(text: str) -> str:
    return text if len(text) <= _COMPACT_CHARS else text[:_COMPACT_CHARS] + "…"


def compact_messages(messages: Iterable[Message]) -> list[Message]:
    """``messages`` as plain text in compact form (``compact_text``), roles kept: the
    planner's view of earlier turns, ids and outcomes of tool work without whole results."""
    out: list[Message] = []
    for message in messages:
        if not any(isinstance(p, ToolCall | ToolResult) for p in message.parts):
            out.append(message)
            continue
        body = compact_text(message).split(": ", 1)[1]
        out.append(Message(role=message.role, parts=(TextPart(text=body),)))
    return out
