"""A session's messages with the tool calls each one made, folded from the log.

``conversation`` is the text a model is shown; a client that draws a past session also
needs what the agent did between the user's words and its answer: each tool call with its
input, how it ended (ok, error, waiting for the user, rejected, queued, undone...), its
output (bounded), error and artifacts, and the plan step it ran in. ``session_messages``
rebuilds that from the log alone (pure: events in, messages out), so ``GET
/v1/sessions/{id}`` serves it without a client replaying the raw events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from context._conversation import abandoned
from store import StoredEvent

CallStatus = Literal[
    "running",
    "ok",
    "error",
    "pending_confirmation",
    "pending_pick",
    "pending_answer",
    "rejected",
    "queued_for_approval",
    "undone",
    "expired",
    "cancelled",
]
OUTPUT_CAP_CHARS = 4_000
"""An output whose compact JSON is longer is not sent whole: ``output_summary`` has its
first ``SUMMARY_CHARS`` characters (the raw log, ``GET .../events``, keeps all of it)."""
SUMMARY_CHARS = 1_000
_PENDING: dict[str, CallStatus] = {
    "confirmation_pending": "pending_confirmation",
    "disambiguation_pending": "pending_pick",
    "question_pending": "pending_answer",
}
_UNSETTLED = ("running", "pending_confirmation", "pending_pick", "pending_answer")
UNDO_SUFFIX = "-undo"


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactRef:
    """An artifact a call created or revised (the payload is at the artifacts route)."""

    artifact_id: str
    version: int
    artifact_type: str
    title: str


@dataclass(kw_only=True, slots=True)
class CallDetail:
    """One tool call as a client shows it; ``output`` is ``None`` when ``output_truncated``
    (then ``output_summary`` is the start of its JSON and ``output_chars`` its length)."""

    tool_use_id: str
    tool: str
    input: dict[str, Any]
    status: CallStatus = "running"
    output: Any = None
    output_summary: str | None = None
    output_truncated: bool = False
    output_chars: int = 0
    error: dict[str, Any] | None = None
    step_id: str | None = None
    step_goal: str | None = None
    decision: str | None = None
    undone_by: str | None = None
    artifacts: list[ArtifactRef] = field(default_factory=list)

    def settle(self, *, ok: bool, output: Any, error: dict[str, Any] | None) -> None:
        """Record how the call ended (a later result, e.g. an approved queued call's, wins)."""
        self.output, self.output_summary, self.output_truncated, self.output_chars = bounded(
            output if ok else None
        )
        self.error = error if not ok else None
        if ok:
            queued = isinstance(output, dict) and output.get("status") == "queued_for_approval"
            self.status = "queued_for_approval" if queued else "ok"
        else:
            rejected = (error or {}).get("code") == "rejected_by_user"
            self.status = "rejected" if rejected else "error"


@dataclass(kw_only=True, slots=True)
class StepDetail:
    """A plan step of the turn: its goal, how it went, and the text it streamed (less what
    a takeover abandoned); its calls name it by ``step_id``."""

    step_id: str
    goal: str
    status: Literal["waiting", "running", "ok", "failed"] = "waiting"
    text: str = ""
    summary: str | None = None
    error_code: str | None = None
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageDetail:
    """A message of the session. An assistant message is ``complete`` once its answer was
    logged whole (``message_done``); an incomplete one stands for a turn that made tool
    calls and then waited for the user, failed or is still running."""

    role: Literal["user", "assistant"]
    text: str
    turn_id: str | None
    seq: int
    complete: bool = True
    tool_calls: tuple[CallDetail, ...] = ()
    steps: tuple[StepDetail, ...] = ()
    stop_reason: str | None = None  # its message_done's: why a complete answer ended


def bounded(output: Any) -> tuple[Any, str | None, bool, int]:
    """``(output, summary, truncated, chars)``: the output itself up to
    ``OUTPUT_CAP_CHARS`` of compact JSON, else the start of that JSON."""
    if output is None:
        return None, None, False, 0
    text = json.dumps(output, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) <= OUTPUT_CAP_CHARS:
        return output, None, False, len(text)
    return None, f"{text[:SUMMARY_CHARS]}…", True, len(text)


@dataclass(slots=True)
class _Segment:
    """What follows one user message of a turn (a turn answered a question has two)."""

    user: MessageDetail | None
    answer: list[str] = field(default_factory=list)
    calls: list[CallDetail] = field(default_factory=list)
    steps: list[StepDetail] = field(default_factory=list)
    done_seq: int | None = None
    stop_reason: str | None = None
    last_seq: int = 0


@dataclass(slots=True)
class _Turn:
    turn_id: str
    segments: list[_Segment] = field(default_factory=list)
    calls: dict[str, CallDetail] = field(default_factory=dict)
    steps: dict[str, StepDetail] = field(default_factory=dict)
    status: str | None = None

    def segment(self) -> _Segment:
        if not self.segments:
            self.segments.append(_Segment(user=None))
        return self.segments[-1]


class _Fold:
    """The running reconstruction: turns in the order they first appear in the log."""

    def __init__(self, gone: set[int]) -> None:
        self.gone = gone
        self.turns: dict[str, _Turn] = {}
        self.latest: dict[str, CallDetail] = {}  # by tool_use_id: what turn-less events name
        self.undoing: dict[str, CallDetail] = {}  # an undo's id -> the write it undoes

    def add(self, stored: StoredEvent) -> None:
        if stored.turn_id is None or stored.type == "approval_resolved":
            self._outside(stored)
            return
        turn = self.turns.setdefault(stored.turn_id, _Turn(stored.turn_id))
        data, kind = stored.data, stored.type
        if kind == "user_message":
            user = MessageDetail(
                role="user", text=data["text"], turn_id=turn.turn_id, seq=stored.seq
            )
            turn.segments.append(_Segment(user=user))
        segment = turn.segment()
        segment.last_seq = stored.seq
        if kind == "plan_created":
            _plan(turn, segment, data)
        elif kind == "text_delta":
            if stored.seq not in self.gone:
                _text(turn, segment, data)
        elif kind in ("step_started", "step_completed"):
            _step(turn, kind, data)
        elif kind == "message_done":
            segment.done_seq, segment.stop_reason = stored.seq, data.get("stop_reason")
        elif kind == "done":
            turn.status = data.get("status")
        else:
            self._call_event(turn, segment, kind, data)

    def _call_event(self, turn: _Turn, segment: _Segment, kind: str, data: dict[str, Any]) -> None:
        if kind == "tool_started" or kind in _PENDING:
            started = self._call(turn, segment, data)
            if kind in _PENDING:
                started.status = _PENDING[kind]
            return
        call = turn.calls.get(data.get("tool_use_id", ""))
        if call is None:
            return
        if kind == "tool_completed":
            call.settle(ok=bool(data["ok"]), output=data.get("output"), error=data.get("error"))
        elif kind == "artifact":
            call.artifacts.append(_artifact(data))
        elif kind == "tool_resolved":
            call.decision = data["decision"]
            # An approved call runs next (its tool_completed says how); a pick or an
            # answer is the call's result.
            status: dict[str, CallStatus] = {
                "rejected": "rejected", "approved": "running", "picked": "ok", "answered": "ok",
            }  # fmt: skip
            call.status = status.get(call.decision, call.status)

    def _call(self, turn: _Turn, segment: _Segment, data: dict[str, Any]) -> CallDetail:
        """The call ``data`` names, added to ``segment`` when it is new to the turn."""
        tool_use_id = data["tool_use_id"]
        call = turn.calls.get(tool_use_id)
        if call is None:
            step_id = data.get("step_id")
            call = CallDetail(
                tool_use_id=tool_use_id,
                tool=data.get("tool") or data.get("kind") or "",
                input=data.get("input") or {},
                step_id=step_id,
                step_goal=turn.steps[step_id].goal if step_id in turn.steps else None,
            )
            turn.calls[tool_use_id] = call
            segment.calls.append(call)
        self.latest[tool_use_id] = call
        return call

    def _outside(self, stored: StoredEvent) -> None:
        """Events logged outside any turn: an undo (``{id}-undo``) and a queued call's
        approval, each about a call some turn made."""
        data = stored.data
        tool_use_id = str(data.get("tool_use_id", ""))
        if stored.type == "tool_started" and tool_use_id.endswith(UNDO_SUFFIX):
            original = self.latest.get(tool_use_id.removesuffix(UNDO_SUFFIX))
            if original is not None:
                self.undoing[tool_use_id] = original
        elif stored.type == "tool_completed" and tool_use_id in self.undoing:
            if data.get("ok"):
                undone = self.undoing[tool_use_id]
                undone.status, undone.undone_by = "undone", tool_use_id
        elif stored.type == "approval_resolved" and tool_use_id in self.latest:
            call = self.latest[tool_use_id]
            call.decision = data["decision"]
            if data["decision"] == "approved":
                call.settle(
                    ok=bool(data.get("ok")), output=data.get("output"), error=data.get("error")
                )
            else:
                call.status = "rejected" if data["decision"] == "rejected" else "expired"

    def messages(self) -> list[MessageDetail]:
        out: list[MessageDetail] = []
        for turn in self.turns.values():
            for segment in turn.segments:
                if segment.user is not None:
                    out.append(segment.user)
                for call in segment.calls:
                    call.status = _ended(call.status, turn.status)
                if segment.done_seq is None and not (segment.calls or segment.steps):
                    continue
                out.append(
                    MessageDetail(
                        role="assistant",
                        text="".join(segment.answer),
                        turn_id=turn.turn_id,
                        seq=segment.done_seq or segment.last_seq,
                        complete=segment.done_seq is not None,
                        tool_calls=tuple(segment.calls),
                        steps=tuple(segment.steps),
                        stop_reason=segment.stop_reason,
                    )
                )
        return out


def _plan(turn: _Turn, segment: _Segment, data: dict[str, Any]) -> None:
    """A (re)plan's steps; a resumed turn logs its plan once, so each step is new."""
    for planned in data.get("steps", []):
        step = StepDetail(
            step_id=planned["id"],
            goal=planned.get("goal", ""),
            depends_on=tuple(planned.get("depends_on", ())),
        )
        turn.steps[step.step_id] = step
        segment.steps.append(step)


def _text(turn: _Turn, segment: _Segment, data: dict[str, Any]) -> None:
    step_id = data.get("step_id")
    if step_id is None:
        segment.answer.append(data["delta"])
    elif step_id in turn.steps:
        turn.steps[step_id].text += data["delta"]


def _step(turn: _Turn, kind: str, data: dict[str, Any]) -> None:
    step = turn.steps.get(data.get("step_id", ""))
    if step is None:
        return
    if kind == "step_started":
        step.status = "running"
        return
    step.status = "ok" if data.get("ok") else "failed"
    step.summary = data.get("summary") or None
    step.error_code = (data.get("error") or {}).get("code")


def _artifact(data: dict[str, Any]) -> ArtifactRef:
    return ArtifactRef(
        artifact_id=data["artifact_id"],
        version=int(data.get("version", 1)),
        artifact_type=data.get("artifact_type", ""),
        title=data.get("title", ""),
    )


def _ended(status: CallStatus, turn_status: str | None) -> CallStatus:
    """A call with no result yet, once its turn has ended: its wait for the user ran out
    (``expired``), or the turn stopped without its result (``cancelled``)."""
    if status not in _UNSETTLED or turn_status in (None, "suspended"):
        return status
    waited = status != "running"
    return "expired" if waited and turn_status == "expired" else "cancelled"


def session_messages(events: Iterable[StoredEvent]) -> list[MessageDetail]:
    """The session's messages in turn order, each assistant message with its tool calls.

    User texts and answers are those of ``conversation`` (text a takeover abandoned is left
    out, an answer is ``complete`` once its ``message_done`` is logged), but every user
    message of a turn is kept (a question's answer is one), and a turn that made tool calls
    without finishing its answer still has an (incomplete) assistant message holding them.
    A planned turn's steps (goal, status, streamed text) are on the message of the plan.
    """
    logged = list(events)
    fold = _Fold(abandoned(logged))
    for stored in logged:
        fold.add(stored)
    return fold.messages()
