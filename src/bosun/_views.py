"""Small typed views of a conversation's steps, read from the events a client would get:
what a test of a toolset asserts on (``bosun.testing.converse``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from context import answer_text
from events import (
    INTERNAL_EVENTS,
    Candidate,
    ConfirmationPending,
    DisambiguationPending,
    Done,
    Error,
    Event,
    QuestionPending,
    ToolCompleted,
    ToolError,
    ToolResolved,
    ToolStarted,
    TurnStatus,
)
from store import StoredEvent

Needs = Literal["confirmation", "pick", "question"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Pending:
    """A call the turn waits on the user for: a ``confirmation`` (of ``tool`` with
    ``input``), a ``pick`` among ``candidates`` or a ``question`` (``prompt``, with
    suggested ``options``). Answer it by its ``tool_use_id``."""

    tool_use_id: str
    needs: Needs
    tool: str | None = None
    input: dict[str, Any] | None = None
    prompt: str = ""
    candidates: tuple[Candidate, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRun:
    """A tool call of the step: ``ok`` is ``None`` while it has no result (it waits)."""

    tool_use_id: str
    tool: str
    input: dict[str, Any]
    ok: bool | None = None
    output: Any = None
    error: ToolError | None = None
    inverse_available: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnResult:
    """One step of a conversation (a message, or the answer to a pending call): the events
    a client streams from it to the turn's end or pause, and what they say."""

    session_id: str
    turn_id: str
    events: tuple[Event, ...]
    status: TurnStatus | None
    """The turn's ``done`` status (``suspended``: it waits on ``pending``)."""
    answer: str
    pending: tuple[Pending, ...]
    tools: tuple[ToolRun, ...]
    error: Error | None

    @property
    def confirmation(self) -> Pending | None:
        return self._waiting("confirmation")

    @property
    def pick(self) -> Pending | None:
        return self._waiting("pick")

    @property
    def question(self) -> Pending | None:
        return self._waiting("question")

    def runs(self, tool: str) -> list[ToolRun]:
        """This step's calls of ``tool`` (its registry name, ``router.action``)."""
        return [run for run in self.tools if run.tool == tool]

    def _waiting(self, needs: Needs) -> Pending | None:
        return next((p for p in self.pending if p.needs == needs), None)


@dataclass(frozen=True, kw_only=True, slots=True)
class UndoResult:
    """An undo: the inverse's own call (``tool_use_id``) of the write ``undone``."""

    tool_use_id: str
    undone: str
    ok: bool
    output: Any
    error: ToolError | None
    events: tuple[Event, ...]


def turn_result(
    logged: Sequence[StoredEvent], *, session_id: str, turn_id: str, after: int
) -> TurnResult:
    """The view of the turn's events after ``after``; ``logged``: the whole turn's log (a
    call may wait since an earlier step of the same turn)."""
    part = [e for e in logged if e.seq > after]
    events = tuple(e.event for e in part if e.type not in INTERNAL_EVENTS)
    done = next((e for e in reversed(events) if isinstance(e, Done)), None)
    status = done.status if done is not None else None
    return TurnResult(
        session_id=session_id,
        turn_id=turn_id,
        events=events,
        status=status,
        answer=answer_text(part),
        pending=_pending([e.event for e in logged]) if status == "suspended" else (),
        tools=tool_runs(events),
        error=next((e for e in reversed(events) if isinstance(e, Error)), None),
    )


def _pending(events: Sequence[Event]) -> tuple[Pending, ...]:
    asked: dict[str, Pending] = {}
    for event in events:
        match event:
            case ConfirmationPending():
                asked[event.tool_use_id] = Pending(
                    tool_use_id=event.tool_use_id, needs="confirmation", tool=event.tool,
                    input=event.input,
                )  # fmt: skip
            case DisambiguationPending():
                asked[event.tool_use_id] = Pending(
                    tool_use_id=event.tool_use_id, needs="pick", prompt=event.prompt,
                    candidates=tuple(event.candidates),
                )  # fmt: skip
            case QuestionPending():
                asked[event.tool_use_id] = Pending(
                    tool_use_id=event.tool_use_id, needs="question", prompt=event.question,
                    options=tuple(event.options),
                )  # fmt: skip
            case ToolResolved():
                asked.pop(event.tool_use_id, None)
            case _:
                pass
    return tuple(asked.values())


def tool_runs(events: Sequence[Event]) -> tuple[ToolRun, ...]:
    """The calls ``events`` started, with their results where they have one."""
    runs: dict[str, ToolRun] = {}
    for event in events:
        if isinstance(event, ToolStarted):
            runs[event.tool_use_id] = ToolRun(
                tool_use_id=event.tool_use_id, tool=event.tool, input=event.input
            )
        elif isinstance(event, ToolCompleted) and event.tool_use_id in runs:
            started = runs[event.tool_use_id]
            runs[event.tool_use_id] = ToolRun(
                tool_use_id=started.tool_use_id, tool=started.tool, input=started.input,
                ok=event.ok, output=event.output, error=event.error,
                inverse_available=event.inverse_available,
            )  # fmt: skip
    return tuple(runs.values())
