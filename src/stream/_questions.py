"""A suspended turn as its log tells it, and the user's next message answering its
questions (``message_ask_user``): the message resumes the turn instead of starting one.

A question is a pending call like a confirmation or a pick (its execution row is
``pending``); the answer is recorded on that row as its output (``{"answer": text}``), so
the resumed step's runner replays it as the call's result, from the log, in any process.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from events import Done, Event, ToolResolved, UserMessage
from executors import PendingCall, PlanSuspended, restore
from planner import Plan
from store import Store, StoredEvent, TurnRecord
from stream._api import Services
from stream._auth import Principal
from stream._errors import ApiError
from turn import TurnHandle


@dataclass(frozen=True, slots=True)
class Waiting:
    """A suspended turn as its log tells it."""

    turn: TurnRecord
    opening: UserMessage
    plan: Plan
    paused: PlanSuspended

    def call(self, tool_use_id: str) -> PendingCall | None:
        """The pending call ``tool_use_id`` if it waits for the user's answer."""
        return next(
            (
                call
                for step in self.paused.suspended
                for call in step.pending
                if call.tool_use_id == tool_use_id and call.needs is not None
            ),
            None,
        )

    @property
    def asks(self) -> list[PendingCall]:
        return [c for s in self.paused.suspended for c in s.pending if c.needs is not None]


async def answer_questions(
    services: Services, principal: Principal, session_id: str, text: str
) -> TurnHandle | None:
    """Answer the questions (``message_ask_user``) the session's suspended turn waits for
    with the user's message ``text``, and resume the turn once nothing else waits; its
    handle (``after``: where this request's part of its stream starts), or ``None`` when
    no question waits (the message starts a new turn, which supersedes the old one)."""
    store = services.store
    async with services.locks(session_id):
        waiting = await waiting_turn(store, session_id)
        asked = [] if waiting is None else [c for c in waiting.asks if c.needs == "answer"]
        questions = [c for c in asked if waiting and await is_pending(store, c, waiting.turn.id)]
        if waiting is None or not questions:
            return None
        turn = waiting.turn
        events: list[Event] = [UserMessage(message_id=f"msg_{uuid.uuid4().hex}", text=text)]
        for call in questions:
            await store.tool_executions.resolve(
                call.tool_use_id, turn_id=turn.id, session_id=session_id,
                status="succeeded", output={"answer": text},
            )  # fmt: skip
            events.append(ToolResolved(tool_use_id=call.tool_use_id, decision="answered"))
        stored = await _go_on(services, principal, waiting, events)
    return TurnHandle(session_id, turn.id, turn.trace_id, after=stored[0].seq - 1)


async def _go_on(
    services: Services, principal: Principal, waiting: Waiting, events: list[Event]
) -> list[StoredEvent]:
    """Log the answers; resume the turn if nothing else waits, else close it suspended."""
    store, turn = services.store, waiting.turn
    still = [c for c in waiting.asks if await is_pending(store, c, turn.id)]
    if still:
        closing = [*events, Done(session_id=turn.session_id, status="suspended")]
        return await store.log.append(turn.session_id, closing, turn_id=turn.id, finish="suspended")
    runner = services.runner
    held = (runner.worker_id, runner.lease_until())
    if not await store.sessions.resume_turn(turn.id, worker_id=held[0], lease_until=held[1]):
        raise ApiError(409, "tool_already_resolved", "This turn is already resuming")
    stored = await store.log.append(turn.session_id, events, turn_id=turn.id)
    models = await services.models.resolve(org_id=principal.org_id, requested=None)
    await services.runner.resume(
        turn, opening=waiting.opening, org_id=principal.org_id, user_id=principal.user_id,
        role=principal.role, models=models, suspended=(waiting.plan, waiting.paused),
    )  # fmt: skip
    return stored


async def waiting_turn(store: Store, session_id: str) -> Waiting | None:
    """The session's latest turn if it is suspended, with what its log says it waits for.
    Only the latest: once the user has sent another message, older questions are moot."""
    turn = await store.sessions.latest_turn(session_id)
    if turn is None or turn.status != "suspended":
        return None
    events = await store.log.read(session_id, turn_id=turn.id)
    opening = next((e.event for e in events if e.type == "user_message"), None)
    snapshot = next((e for e in reversed(events) if e.type == "turn_suspended"), None)
    if snapshot is None or not isinstance(opening, UserMessage):
        return None
    plan, paused = restore(snapshot.data)
    return Waiting(turn=turn, opening=opening, plan=plan, paused=paused)


async def is_pending(store: Store, call: PendingCall, turn_id: str) -> bool:
    row = await store.tool_executions.get(call.tool_use_id, turn_id=turn_id)
    return row is None or row.status == "pending"
