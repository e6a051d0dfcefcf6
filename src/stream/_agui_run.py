"""One AG-UI run's events: the turn's log as the ``ag-ui-protocol`` package's events,
encoded as frames (docs/protocols.md has the mapping). A module of its own so that
package (about 50 ms of CPU to import) loads with the first AG-UI request, not with every
app: ``stream._agui`` (the route) imports this module there.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from executors import PendingCall
from store import StoredEvent

if TYPE_CHECKING:
    from stream._agui import AgUiMessage
    from stream._errors import ApiError

CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1}},
    "required": ["answer"],
}


def refusal(exc: ApiError) -> bytes:
    """``exc`` as the one RUN_ERROR frame of a run that never started."""
    return EventEncoder().encode(RunErrorEvent(message=exc.message, code=exc.code)).encode()


def interrupt(call: PendingCall, expires: datetime) -> Interrupt:
    """A pending call as an interrupt: its id is the call's tool use id."""
    when = expires.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    common: dict[str, Any] = {"id": call.tool_use_id, "expires_at": when}
    if call.needs == "confirmation":
        return Interrupt(
            **common,
            reason="tool_call",
            tool_call_id=call.tool_use_id,
            message=f"Run {call.tool}? It needs your approval.",
            response_schema=CONFIRM_SCHEMA,
            metadata={"tool": call.tool, "input": call.input, "confirm": call.confirm},
        )
    if call.needs == "pick":
        candidates = [
            {"id": c.id, "label": c.label, **({"sublabel": c.sublabel} if c.sublabel else {})}
            for c in call.candidates
        ]
        schema = {
            "type": "object",
            "properties": {"id": {"type": "string", "enum": [c.id for c in call.candidates]}},
            "required": ["id"],
        }
        return Interrupt(
            **common,
            reason="input_required",
            message=call.prompt or f"Choose a {call.kind or 'item'}",
            response_schema=schema,
            metadata={"kind": call.kind or "item", "candidates": candidates},
        )
    return Interrupt(
        **common,
        reason="input_required",
        message=call.prompt or "",
        response_schema=ANSWER_SCHEMA,
        metadata={"options": list(call.options)},
    )


Out = list[BaseEvent]


@dataclass(slots=True)
class Run:
    """One AG-UI run over a turn: log events in, AG-UI events out.

    The client keeps the thread's messages across runs, and a turn that waited for answers
    goes on in a later run: ``prime`` reads the turn's log before this run (its plan, its
    suspended steps, the tool calls already shown), and ``knows`` the client's own copy of
    the thread, so nothing it has is sent twice (a re-attached run skips the text it has).
    Steps, text and reasoning messages still open close before the run ends, as the
    client's verifier requires.
    """

    thread_id: str
    run_id: str
    session_id: str
    turn_id: str
    plan: dict[str, Any] | None = None
    step_ids: list[str] = field(default_factory=list)
    open_steps: dict[str, None] = field(default_factory=dict)
    text_id: str | None = None
    reasoning: dict[str, str] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    resolved: set[str] = field(default_factory=set)
    have: dict[str, int] = field(default_factory=dict)
    usage: list[TokenUsage] | None = None
    cancelled: bool = False
    ended: bool = False
    encoder: EventEncoder = field(default_factory=EventEncoder)

    def knows(self, messages: Sequence[AgUiMessage]) -> None:
        """What the client's copy of the thread holds: text, tool calls and their results."""
        for message in messages:
            if message.role in ("assistant", "reasoning") and isinstance(message.content, str):
                self.have[message.id] = len(message.content)
            self.shown.update(call.id for call in message.toolCalls or ())
            if message.role == "tool" and message.toolCallId is not None:
                self.answered.add(message.toolCallId)

    def prime(self, before: Sequence[StoredEvent]) -> None:
        """Read the turn's log before this run: its plan, steps and tool calls."""
        for event in before:
            handler = _PRIMING.get(event.type)
            if handler is not None:
                handler(self, event)

    def opening(self) -> bytes:
        bosun = {"sessionId": self.session_id, "turnId": self.turn_id}
        out: Out = [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata={"bosun": bosun},
            )
        ]
        if self.plan is not None:  # a resumed turn: its plan, and its steps that go on
            out.append(StateSnapshotEvent(snapshot=self._state()))
        out += [self._step_started(step) for step in self.open_steps]
        return self.encode(out)

    def write(self, event: StoredEvent) -> Out:
        handler = _HANDLERS.get(event.type)
        return [] if handler is None else handler(self, event)

    def finish(self, done: StoredEvent, interrupts: list[Interrupt]) -> Out:
        """The run's end for the turn's ``done``: RUN_FINISHED (a suspended turn's outcome
        its interrupts; a cancelled, expired or superseded one's ``cancelled``), or
        RUN_ERROR for a failure no ``error`` event explained."""
        status = str(done.data.get("status"))
        out = self._close_all()
        self.ended = True
        if status == "failed":
            return [*out, RunErrorEvent(message="The turn failed", code="failed")]
        outcome: RunFinishedInterruptOutcome | RunFinishedCancelledOutcome | None = None
        if status == "suspended" and interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        elif self.cancelled or status in ("cancelled", "expired", "superseded"):
            outcome = RunFinishedCancelledOutcome()
        result = None
        if done.data.get("partial"):
            result = {"partial": True, "failedSteps": done.data.get("failed_steps", [])}
        finished = RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            outcome=outcome,
            result=result,
            usage=self.usage,
            metadata={"bosun": {"status": status}},
        )
        return [*out, finished]

    def encode(self, events: Sequence[BaseEvent]) -> bytes:
        return "".join(self.encoder.encode(e) for e in events).encode()

    def _state(self) -> dict[str, Any]:
        """The state a snapshot sends: a copy, as later steps change the plan's."""
        plan = copy.deepcopy(self.plan)
        return {"sessionId": self.session_id, "turnId": self.turn_id, "plan": plan}

    def _close_text(self) -> Out:
        if self.text_id is None:
            return []
        end = TextMessageEndEvent(message_id=self.text_id)
        self.text_id = None
        return [end]

    def _close_reasoning(self, step_id: str) -> Out:
        message_id = self.reasoning.pop(step_id, None)
        return [] if message_id is None else [ReasoningMessageEndEvent(message_id=message_id)]

    def _close_all(self) -> Out:
        out = self._close_text()
        for step_id in list(self.reasoning):
            out += self._close_reasoning(step_id)
        out += [StepFinishedEvent(step_name=step) for step in self.open_steps]
        self.open_steps.clear()
        return out

    def _step_started(self, step_id: str) -> StepStartedEvent:
        goal = self._goal(step_id)
        return StepStartedEvent(
            step_name=step_id, metadata=None if goal is None else {"goal": goal}
        )

    def _goal(self, step_id: str) -> str | None:
        if self.plan is None or step_id not in self.step_ids:
            return None
        return str(self.plan["steps"][self.step_ids.index(step_id)].get("goal"))

    def _status(self, step_id: str, status: str) -> Out:
        """The step's status in the plan's state, as a JSON patch."""
        if self.plan is None or step_id not in self.step_ids:
            return []
        index = self.step_ids.index(step_id)
        self.plan["steps"][index]["status"] = status
        patch = [{"op": "replace", "path": f"/plan/steps/{index}/status", "value": status}]
        return [StateDeltaEvent.model_validate({"type": "STATE_DELTA", "delta": patch})]

    def _unseen(self, message_id: str, text: str) -> str:
        """``text`` less what the client's copy of the message has already."""
        skip = self.have.get(message_id, 0)
        if skip:
            self.have[message_id] = max(0, skip - len(text))
        return text[skip:]

    def _call(self, call: str, name: str, tool_input: Any) -> Out:
        """A tool call, once per thread (a resumed turn's second ``tool_started`` for an
        answered call is not news; nor is a call the client has)."""
        if call in self.shown or call in self.resolved:
            return []
        self.shown.add(call)
        args = json.dumps(tool_input if tool_input is not None else {}, ensure_ascii=False)
        return [
            ToolCallStartEvent(tool_call_id=call, tool_call_name=name),
            ToolCallArgsEvent(tool_call_id=call, delta=args),
            ToolCallEndEvent(tool_call_id=call),
        ]

    def on_plan(self, event: StoredEvent) -> Out:
        steps = [s for s in event.data.get("steps") or [] if isinstance(s, dict) and "id" in s]
        self.step_ids = [str(s["id"]) for s in steps]
        self.plan = {
            "strategy": event.data.get("strategy"),
            "steps": [
                {
                    "id": str(s["id"]),
                    "goal": s.get("goal"),
                    "tools": s.get("tools", []),
                    "dependsOn": s.get("depends_on", []),
                    "status": "pending",
                }
                for s in steps
            ],
        }
        return [StateSnapshotEvent(snapshot=self._state())]

    def on_step(self, event: StoredEvent) -> Out:
        step_id = str(event.data["step_id"])
        if event.type == "step_started":
            out: Out = []
            if step_id not in self.open_steps:
                self.open_steps[step_id] = None
                out.append(self._step_started(step_id))
            return out + self._status(step_id, "running")
        out = self._close_reasoning(step_id)
        if step_id in self.open_steps:
            del self.open_steps[step_id]
            out.append(StepFinishedEvent(step_name=step_id))
        return out + self._status(step_id, "completed" if event.data.get("ok") else "failed")

    def on_text(self, event: StoredEvent) -> Out:
        delta, step = str(event.data["delta"]), event.data.get("step_id")
        out: Out = []
        if step is None:  # the answer
            if self.text_id is None:
                self.text_id = f"{self.turn_id}:{event.seq}"
                out.append(TextMessageStartEvent(message_id=self.text_id, role="assistant"))
            message_id = self.text_id
            content: BaseEvent = TextMessageContentEvent(
                message_id=message_id, delta=self._unseen(message_id, delta)
            )
        else:  # a step's own text: its reasoning
            message_id = self.reasoning.get(str(step)) or f"{self.turn_id}:{step}:{event.seq}"
            if str(step) not in self.reasoning:
                self.reasoning[str(step)] = message_id
                out.append(ReasoningMessageStartEvent(message_id=message_id))
            content = ReasoningMessageContentEvent(
                message_id=message_id, delta=self._unseen(message_id, delta)
            )
        return [*out, content]

    def on_reset(self, event: StoredEvent) -> Out:
        """Text sent cannot be taken back: what the turn's next attempt streams again goes
        in a message of its own (a replay from the log leaves the abandoned text out)."""
        step = event.data.get("step_id")
        return self._close_text() if step is None else self._close_reasoning(str(step))

    def on_note(self, event: StoredEvent) -> Out:
        """An agent's message to the user (``message_notify_user``) as a text message of
        its own, unless it is streamed as the answer's text too."""
        if event.data.get("in_answer"):
            return []
        message_id = f"{self.turn_id}:{event.seq}"
        text = self._unseen(message_id, str(event.data["text"]))
        return [
            *self._close_text(),
            TextMessageStartEvent(message_id=message_id, role="assistant"),
            TextMessageContentEvent(message_id=message_id, delta=text),
            TextMessageEndEvent(message_id=message_id),
        ]

    def on_tool_started(self, event: StoredEvent) -> Out:
        data = event.data
        return self._call(str(data["tool_use_id"]), str(data["tool"]), data.get("input"))

    def on_confirmation(self, event: StoredEvent) -> Out:
        """The call waiting for approval is shown now; the interrupt comes with the run's
        end."""
        return self.on_tool_started(event)

    def on_tool_completed(self, event: StoredEvent) -> Out:
        call = str(event.data["tool_use_id"])
        if call not in self.shown or call in self.answered:
            return []
        self.answered.add(call)
        data = event.data
        result = data.get("output") if data.get("ok") else {"error": data.get("error")}
        return [
            ToolCallResultEvent(
                message_id=f"{self.turn_id}:result:{call}",
                tool_call_id=call,
                content=json.dumps(result, ensure_ascii=False),
                role="tool",
            )
        ]

    def on_resolved(self, event: StoredEvent) -> Out:
        self.resolved.add(str(event.data["tool_use_id"]))
        return []

    def on_artifact(self, event: StoredEvent) -> Out:
        return [CustomEvent(name="bosun.artifact", value=_payload_of(event))]

    def on_usage(self, event: StoredEvent) -> Out:
        self.usage = _token_usage(event.data)
        return [CustomEvent(name="bosun.usage", value=_payload_of(event))]

    def on_error(self, event: StoredEvent) -> Out:
        """A failure ends the run with RUN_ERROR (nothing follows it); a cancel waits for
        its ``done`` to end the run as ``cancelled``."""
        code = str(event.data.get("code") or "internal")
        if code in ("cancelled", "interrupted"):  # interrupted: a newer message cut it
            self.cancelled = True
            return []
        self.ended = True
        message = str(event.data.get("message") or "The turn failed")
        return [RunErrorEvent(message=message, code=code, usage=self.usage)]


def _payload_of(event: StoredEvent) -> dict[str, Any]:
    return {k: v for k, v in event.data.items() if k != "type"}


def _token_usage(data: dict[str, Any]) -> list[TokenUsage]:
    """The turn's usage in the protocol's accounting, one entry per model: input tokens
    count the cached ones too, which Bosun counts apart."""
    calls = data.get("calls") or [data]
    totals: dict[str | None, list[int]] = {}
    for call in calls:
        counts = totals.setdefault(call.get("model"), [0, 0, 0, 0])
        for i, key in enumerate(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        ):
            counts[i] += int(call.get(key) or 0)
    return [
        TokenUsage(
            model=model,
            input_tokens=fresh + read + written,
            output_tokens=output,
            total_tokens=fresh + read + written + output,
            cached_input_tokens=read,
            cache_write_input_tokens=written,
        )
        for model, (fresh, output, read, written) in totals.items()
    ]


_HANDLERS: dict[str, Callable[[Run, StoredEvent], Out]] = {
    "plan_created": Run.on_plan,
    "step_started": Run.on_step,
    "step_completed": Run.on_step,
    "text_delta": Run.on_text,
    "message_reset": Run.on_reset,
    "agent_message": Run.on_note,
    "tool_started": Run.on_tool_started,
    "tool_completed": Run.on_tool_completed,
    "confirmation_pending": Run.on_confirmation,
    "tool_resolved": Run.on_resolved,
    "artifact": Run.on_artifact,
    "usage": Run.on_usage,
    "error": Run.on_error,
}
"""The events a client is shown; picks and questions become interrupts at the run's end,
and any other event (``turn_suspended`` and the other operator-only ones, events added
later) is left out."""
_PRIMING = {
    kind: _HANDLERS[kind]
    for kind in (
        "plan_created",
        "step_started",
        "step_completed",
        "tool_started",
        "tool_completed",
        "confirmation_pending",
        "tool_resolved",
    )
}
"""What a run reads of its turn's earlier runs: the plan, the steps and the tool calls."""
