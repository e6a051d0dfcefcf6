"""Taking over a turn whose worker died: where it was, read back from its log.

The log is the checkpoint. The plan is reused (``plan_created``); finished steps stand
(``step_completed``); a step that was running goes on from a transcript rebuilt from its
events (its text, its tool calls and their results), so the model sees what already ran
and a write is never repeated for want of memory (and a call the model repeats under the
same id replays its recorded result). A tool call cut off mid-run gets its recorded
outcome if it finished, else an ``interrupted`` error: the model is told to check before
trying again. Steps not started yet start as usual. Text the dead worker streamed that the
model no longer remembers writing (an answer cut off mid-stream, a step's words after its
last calls) is written again: ``resets`` are the ``message_reset`` events that tell every
reader to drop it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from context import abandoned
from events import (
    Event,
    MessageReset,
    StepCompleted,
    ToolCompleted,
    ToolError,
    event_data,
)
from executors import PlanSuspended, StepEnd, StepResult, Suspended
from planner import Plan, PlannedStep
from providers import Message, Part, TextPart, ToolCall, ToolResult
from store import Store, StoredEvent
from tools import ToolFailure, ToolOutcome

INTERRUPTED = ToolError(
    code="interrupted",
    message="The worker running this call stopped before it reported back",
    hint="It may or may not have taken effect: check before trying it again",
)


def logged_plan(events: Sequence[StoredEvent]) -> Plan | None:
    """The plan the turn was running, if it got that far."""
    data = next((e.data for e in reversed(events) if e.type == "plan_created"), None)
    if data is None:
        return None
    steps = [
        PlannedStep(
            id=s["id"],
            goal=s["goal"],
            tools=list(s.get("tools", [])),
            depends_on=list(s.get("depends_on", [])),
            **({"max_tool_calls": s["max_tool_calls"]} if s.get("max_tool_calls") else {}),
        )
        for s in data.get("steps", [])
    ]
    return Plan(
        strategy=data["strategy"],
        reasoning=data.get("reasoning", "")[:600],
        steps=steps,
        executors=max(1, int(data.get("executors", 1))),
    )


async def checkpoint(
    store: Store, plan: Plan, events: Sequence[StoredEvent]
) -> tuple[PlanSuspended, list[Event]]:
    """Where ``plan`` stood when the turn's log stopped, as a resumable ``PlanSuspended``,
    and the ``tool_completed`` events owed to calls that were cut off."""
    finished = {e.data["step_id"]: _finished(e.event) for e in events if e.type == "step_completed"}
    started = [e.data["step_id"] for e in events if e.type == "step_started"]
    running = [s for s in plan.steps if s.id in started and s.id not in finished]
    owed: list[Event] = []
    paused = []
    for step in running:
        messages, calls, last, known = _transcript(events, step.id, plan.strategy == "tool")
        if last:  # the last message's results, the cut-off calls' included, in call order
            parts = []
            for call in last:
                if call.id not in known:
                    result, completed = await _cut_off_result(store, call, events[-1].turn_id)
                    known[call.id] = result
                    owed.append(completed)
                parts.append(known[call.id])
            messages.append(Message(role="user", parts=tuple(parts)))
        paused.append(Suspended(step_id=step.id, pending=(), tool_calls=calls,
                                messages=tuple(messages)))  # fmt: skip
    waiting = {s.id for s in running}
    rest = tuple(s.id for s in plan.steps if s.id not in finished and s.id not in waiting)
    outcome = PlanSuspended(
        results=tuple(finished[s.id] for s in plan.steps if s.id in finished),
        suspended=tuple(paused),
        not_started=rest,
    )
    return outcome, owed


def _transcript(
    events: Sequence[StoredEvent], step_id: str, answer_is_step: bool
) -> tuple[list[Message], int, list[ToolCall], dict[str, ToolResult]]:
    """The step's loop transcript rebuilt from its events: assistant messages (text, calls)
    each followed by the results of its calls. Returns it (ending with the last assistant
    message that made calls, without its results), the number of calls, that message's
    calls, and the results logged for them. Text after the last calls (an answer cut off
    mid-stream) is dropped: the step answers again (``resets`` says so in the log)."""
    messages: list[Message] = []
    text: list[str] = []
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    count = 0

    def assistant() -> Message:
        said = "".join(text)
        parts: list[Part] = [TextPart(text=said)] if said.strip() else []
        return Message(role="assistant", parts=(*parts, *calls))

    for event in _said_and_done(events, step_id, answer_is_step):
        data = event.data
        if event.type == "text_delta":
            if calls:  # a new model turn after the last one's calls
                messages.append(assistant())
                messages.append(Message(role="user", parts=tuple(_of(results, c) for c in calls)))
                text, calls = [], []
            text.append(str(data.get("delta", "")))
        elif event.type == "tool_started":
            wire = str(data["tool"]).replace(".", "_")  # as the model called it
            calls.append(ToolCall(id=data["tool_use_id"], name=wire, input=data["input"]))
            count += 1
        elif any(c.id == data.get("tool_use_id") for c in calls):  # tool_completed
            results[data["tool_use_id"]] = _result(data)
    if calls:
        messages.append(assistant())
    return messages, count, calls, {c.id: results[c.id] for c in calls if c.id in results}


def _said_and_done(
    events: Sequence[StoredEvent], step_id: str, answer_is_step: bool
) -> Iterator[StoredEvent]:
    """The step's model text (``text_delta``: its own, or the answer's when the step writes
    it), its ``tool_started`` and every ``tool_completed``, in log order. A message a
    forced loop told the user is left out: it is a call's effect, streamed after the call
    (its ``agent_message`` is marked ``in_answer``), not text the model wrote; so is text
    an earlier takeover abandoned (``message_reset``)."""
    told: list[str] = []
    gone = abandoned(events)
    for event in events:
        data = event.data
        owner = data.get("step_id")
        if event.type == "text_delta" and (owner == step_id or (owner is None and answer_is_step)):
            said = str(data.get("delta", ""))
            if event.seq in gone:
                continue
            if said.removeprefix("\n\n") in told:
                told.remove(said.removeprefix("\n\n"))
                continue
            yield event
        elif event.type == "tool_completed" or (event.type == "tool_started" and owner == step_id):
            yield event
        elif event.type == "agent_message" and owner == step_id and data.get("in_answer"):
            told.append(str(data.get("text", "")))


def _cut_off_from(events: Sequence[StoredEvent], step_id: str, answer_is_step: bool) -> int | None:
    """Where the step's text after its last tool calls starts (``None``: there is none):
    the text ``_transcript`` drops, which the step writes again."""
    since: int | None = None
    for event in _said_and_done(events, step_id, answer_is_step):
        if event.type == "text_delta" and since is None:
            since = event.seq
        elif event.type == "tool_started":
            since = None
    return since


def resets(events: Sequence[StoredEvent], message_id: str, plan: Plan | None) -> list[MessageReset]:
    """The ``message_reset`` events a takeover logs before it writes again: one for each
    message whose streamed text it abandons, from the first abandoned ``text_delta``.
    ``plan`` is the plan whose steps go on from the checkpoint; ``None`` when the answer
    is written afresh. A finished step's text stands; a running step's text after its last
    calls goes (that step writes it again); the answer goes unless a ``tool`` plan's step
    writes it, which then goes on as any running step does."""

    def reset(seq: int, step_id: str | None = None) -> MessageReset:
        return MessageReset(message_id=message_id, reason="takeover", from_seq=seq,
                            step_id=step_id)  # fmt: skip

    gone = abandoned(events)
    answer = next(
        (e.seq for e in events
         if e.type == "text_delta" and "step_id" not in e.data and e.seq not in gone),
        None,
    )  # fmt: skip
    if plan is None or not plan.steps:
        return [] if answer is None else [reset(answer)]
    finished = {e.data["step_id"] for e in events if e.type == "step_completed"}
    started = {e.data["step_id"] for e in events if e.type == "step_started"}
    writes_answer = plan.strategy == "tool"
    out = []
    for step in plan.steps:
        cut = None
        if step.id in started and step.id not in finished:
            cut = _cut_off_from(events, step.id, writes_answer)
        if cut is not None:
            out.append(reset(cut, None if writes_answer else step.id))
    if not writes_answer and answer is not None:  # the merge writes the answer afresh
        out.append(reset(answer))
    return out


def _of(results: dict[str, ToolResult], call: ToolCall) -> ToolResult:
    return results.get(call.id) or _result(
        event_data(ToolCompleted(tool_use_id=call.id, ok=False, error=INTERRUPTED))
    )


def _result(data: dict[str, Any]) -> ToolResult:
    """A ``tool_completed`` event's data as the result the model sees, written the way the
    executor writes it (``ToolOutcome.as_result_text``)."""
    error = data.get("error") or {"code": "failed", "message": "The tool failed"}
    ok = bool(data.get("ok"))
    outcome = ToolOutcome(
        tool_use_id=data["tool_use_id"],
        tool="",
        ok=ok,
        output=data.get("output") if ok else None,
        error=None
        if ok
        else ToolFailure(
            code=error["code"], message=error.get("message", ""), hint=error.get("hint")
        ),
    )
    return ToolResult(
        tool_use_id=outcome.tool_use_id, content=outcome.as_result_text(), is_error=not ok
    )


async def _cut_off_result(
    store: Store, call: ToolCall, turn_id: str | None
) -> tuple[ToolResult, ToolCompleted]:
    """What a call cut off mid-run gets: its recorded outcome in this turn, if it finished,
    else the ``interrupted`` error."""
    assert turn_id is not None, "a turn's own events carry its id"
    row = await store.tool_executions.get(call.id, turn_id=turn_id)
    if row is not None and row.status == "succeeded":
        completed = ToolCompleted(tool_use_id=call.id, ok=True, output=row.output,
                                  inverse_available=row.undoable)  # fmt: skip
    else:
        completed = ToolCompleted(tool_use_id=call.id, ok=False, error=INTERRUPTED)
    return _result(event_data(completed)), completed


def _finished(done: Event) -> StepResult:
    """A finished step as its ``step_completed`` event tells it."""
    assert isinstance(done, StepCompleted), done
    ended: StepEnd = "answered"
    if not done.ok:
        ended = _ENDED.get(done.error.code, "model_failed") if done.error else "model_failed"
    return StepResult(
        step_id=done.step_id, ok=done.ok, summary=done.summary, ended=ended, error=done.error,
        tool_calls=done.tool_calls, failed_tool_calls=done.failed_tool_calls,
        tokens=done.tokens, duration_ms=done.duration_ms,
    )  # fmt: skip


_ENDED: dict[str, StepEnd] = {
    "step_timed_out": "timed_out",
    "step_overran": "overran",
    "step_skipped": "skipped",
}
