"""Starts turns as tasks that outlive the HTTP request, and stops them cleanly."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from context import ClientContext
from events import Done, Error, Event, MessageDone, SessionStarted, TurnStatus, Usage, UserMessage
from executors import PlanSuspended
from planner import Plan
from store import Claim, QueuedTurn, StaleOwnerError, Store, TurnOpening, TurnRecord
from tools import UserRole
from turn._models import TurnRoleModels
from turn._phases import TurnKit
from turn._turn import Turn, run_turn
from turn._workers import new_worker_id

_log = structlog.get_logger("bosun.turns")
SESSION_TITLE_CHARS = 80
"""A new session's title until the summariser writes one: the start of its first message."""
CANCEL_TIMEOUT_S = 1.0
"""How long ``cancel`` waits for cancelled turns to close their logs."""


@dataclass(frozen=True, slots=True)
class TurnHandle:
    """A started (or queued) turn; ``after`` is the log position its events for this
    request follow (non-zero when a message answered a suspended turn's question and
    resumed it, or was queued behind a running turn)."""

    session_id: str
    turn_id: str
    trace_id: str
    after: int = 0
    queued: bool = False  # a double text waiting for the session's running turn to end


async def new_session(
    store: Store,
    *,
    org_id: str,
    user_id: str,
    first_message: str,
    agent: str | None = None,
    session_id: str | None = None,
) -> str:
    """Open a session (with ``agent``, a profile's handle) for a conversation starting
    with ``first_message``; its id (``session_id`` when the caller chose it: a chat
    protocol's thread). Its title is the message's start until the summariser writes a
    better one."""
    session_id = session_id or str(uuid.uuid4())
    title = first_message[:SESSION_TITLE_CHARS]
    await store.sessions.create(
        org_id=org_id, user_id=user_id, session_id=session_id, title=title, agent=agent
    )
    return session_id


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOrder:
    """Who asks for a turn and what their request chose: all its job records (on the
    turn's row), so another worker (a resume, a takeover, a queued turn's start) runs it
    the same way. ``model_spec`` and ``planner_spec``: the models the request picked for
    the answering roles and the planner, if any; ``agent``: the handle and version of the
    agent whose kit it runs with (none: the server's own); ``client``: the request's client
    context (where the user was, their locale)."""

    org_id: str
    user_id: str
    role: UserRole = "member"
    model_spec: str | None = None
    planner_spec: str | None = None
    agent: tuple[str, int] | None = None
    client: ClientContext | None = None
    trace_link: str | None = None  # the traceparent of what queued it (a run's trigger)

    def job(self) -> dict[str, Any]:
        job: dict[str, Any] = {
            "org_id": self.org_id, "user_id": self.user_id, "role": self.role,
            "model": self.model_spec,
        }  # fmt: skip
        if self.planner_spec is not None:
            job["planner_model"] = self.planner_spec
        if self.agent is not None:
            job["agent"], job["agent_version"] = self.agent
        if self.client is not None and not self.client.empty:
            job["client"] = self.client.to_job()
        if self.trace_link is not None:
            job["trace_link"] = self.trace_link
        return job


TurnSetup = Callable[[Mapping[str, Any]], Awaitable[tuple[TurnKit, TurnRoleModels]]]
"""The kit and models a recorded job runs with (its agent's version): for resumes and
takeovers, which start from the job alone."""

TurnEnded = Callable[[Mapping[str, Any], str, TurnStatus, int], Awaitable[None]]
"""Told after a turn's task closed its log (its job, its id, its status: ``suspended``
too, and what its model calls cost, in micro-dollars): what the upper layers do then (an
agent's costs, a run's notice). Its failure never touches the turn."""


class TurnRunner:
    """Owns the running turn tasks of this process, each under a lease in the database."""

    def __init__(
        self,
        store: Store,
        *,
        turn_timeout_s: float,
        kit: TurnKit | None = None,
        worker_id: str | None = None,
        lease_s: float = 15.0,
        setups: TurnSetup | None = None,
        ended: TurnEnded | None = None,
    ) -> None:
        self._store = store
        self._turn_timeout_s = turn_timeout_s
        self._kit = kit or TurnKit()
        self.setups = setups
        self.ended = ended
        self.worker_id = worker_id or new_worker_id()
        self.lease_s = lease_s
        self._tasks: dict[str, asyncio.Task[TurnStatus | None]] = {}
        self._sessions: dict[str, str] = {}  # turn_id -> session_id, while it runs
        self._closing = asyncio.Lock()  # concurrent cancels close a turn once
        self._interrupted: set[str] = set()  # turns cancelled because a newer message came
        self._stopping = False  # shutting down: queued turns wait for another worker

    def lease_until(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.lease_s)

    @property
    def running(self) -> list[str]:
        """The ids of the turns this process is running."""
        return list(self._tasks)

    def when_done(self, turn_id: str, callback: Callable[[], None]) -> bool:
        """Call ``callback`` once ``turn_id``'s task here has ended (after the runner has
        forgotten it, so ``running`` no longer names it); whether it runs here at all."""
        task = self._tasks.get(turn_id)
        if task is None:
            return False
        task.add_done_callback(lambda _: callback())
        return True

    async def start(
        self,
        order: TurnOrder,
        *,
        session_id: str,
        text: str,
        models: TurnRoleModels,
        trace_id: str,
        kit: TurnKit | None = None,
        turn_id: str | None = None,
        run_id: str | None = None,
    ) -> TurnHandle:
        """Log the turn's opening events, then run it in the background, under this
        worker's lease; the job row (``order``'s) says enough for another worker to take it
        over (``kit``: the one of ``order.agent``; ``turn_id``: an id the caller chose;
        ``run_id``: the queued background run it does, claimed in the transaction that
        opens the turn, ``RunTakenError`` if another worker claimed it first)."""
        if run_id is None:  # a run's session is its own, new: nothing waits in it
            await self._supersede(session_id)
        opening = UserMessage(message_id=f"msg_{uuid.uuid4().hex}", text=text)
        job = order.job()
        if run_id is not None:  # a run: a resume or takeover sets it up as one (approvals defer)
            job["trigger"] = "run"
        turn = self._turn(
            session_id=session_id, turn_id=turn_id or str(uuid.uuid4()), trace_id=trace_id,
            job=job, opening=opening, models=models,
        )  # fmt: skip
        events: list[Event] = [SessionStarted(session_id=session_id, turn_id=turn.turn_id), opening]
        if run_id is not None:
            await self._store.runs.open_claimed(
                run_id,
                TurnOpening(
                    session_id=session_id, turn_id=turn.turn_id, trace_id=trace_id,
                    events=events, worker_id=self.worker_id, lease_until=self.lease_until(),
                    job=job,
                ),
            )  # fmt: skip
            return self._launch(turn, kit, job)
        _, epoch = await self._store.log.open_turn(
            session_id,
            events,
            turn_id=turn.turn_id,
            trace_id=trace_id,
            worker_id=self.worker_id,
            lease_until=self.lease_until(),
            job=job,
        )
        return self._launch(replace(turn, epoch=epoch), kit, job)

    async def _supersede(self, session_id: str) -> None:
        """A new message makes the session's open questions moot: its suspended turns end
        ``superseded`` (their pending calls too) before the new turn's first event."""
        for waiting in await self._store.sessions.suspended_turns(session_id=session_id):
            if await self._store.log.close_unanswered(session_id, waiting.id, "superseded"):
                _log.info("turn.superseded", turn_id=waiting.id, session_id=session_id)

    async def queue(
        self, order: TurnOrder, *, session_id: str, text: str, trace_id: str
    ) -> TurnHandle:
        """Store ``text`` as the session's next turn, started when the running one ends
        (by the worker whose turn ended, or any worker's keeper) with the job ``start``
        would record; its handle, whose ``after`` is the log's end now (its events come
        later)."""
        turn_id = str(uuid.uuid4())
        await self._store.queue.add(
            session_id, turn_id=turn_id, trace_id=trace_id, text=text,
            job=order.job(),
        )  # fmt: skip
        after = await self._store.log.last_seq(session_id)
        _log.info("turn.queued", turn_id=turn_id, session_id=session_id)
        await self.start_next(session_id)  # the running turn may have ended meanwhile
        return TurnHandle(session_id, turn_id, trace_id, after=after, queued=True)

    async def start_next(self, session_id: str) -> TurnHandle | None:
        """Start the session's oldest queued turn here if no turn runs in it (the database
        decides, so of several workers trying at most one does); ``None`` if none did."""
        if self._stopping or self.setups is None:  # a queued job runs with its agent's kit
            return None
        if not await self._store.queue.waiting(session_id):  # most ends: a read, no write
            return None
        started = await self._store.queue.start_next(
            session_id, worker_id=self.worker_id, lease_until=self.lease_until()
        )
        if started is None:
            return None
        await self._supersede(session_id)  # a new message: questions waiting are moot
        _log.info("turn.dequeued", turn_id=started.turn_id, session_id=session_id)
        kit, models = await self.setups(started.job)
        return self._launch(self._dequeued(started, models, epoch=0), kit, started.job)

    def _dequeued(self, started: QueuedTurn, models: TurnRoleModels, *, epoch: int) -> Turn:
        turn = self._turn(
            session_id=started.session_id, turn_id=started.turn_id, trace_id=started.trace_id,
            job=started.job, opening=started.opening, models=models,
        )  # fmt: skip
        return replace(turn, epoch=epoch)

    def interrupt(self, turn_id: str) -> bool:
        """Cancel ``turn_id`` if this process runs it, as interrupted (a newer message):
        it closes keeping its answer so far. Whether it ran here."""
        task = self._tasks.get(turn_id)
        if task is None or task.done():
            return False
        if turn_id not in self._interrupted:
            self._interrupted.add(turn_id)
            task.cancel()
        _log.info("turn.interrupted", turn_id=turn_id, worker_id=self.worker_id)
        return True

    async def _next_after(self, session_id: str) -> None:
        """Start what was queued behind a turn that just ended; a failure is logged (the
        keeper starts it later), never raised into the ended turn."""
        try:
            await self.start_next(session_id)
        except Exception as exc:
            _log.error(
                "turn.dequeue_failed", session_id=session_id, error_type=type(exc).__name__,
                exc_info=exc,
            )  # fmt: skip

    async def resume(
        self,
        turn: TurnRecord,
        *,
        opening: UserMessage,
        org_id: str,
        user_id: str,
        role: UserRole,
        models: TurnRoleModels,
        suspended: tuple[Plan, PlanSuspended],
    ) -> TurnHandle:
        """Run a suspended turn on from ``suspended`` (read back from its log), in the
        background. The caller has marked it running again (``Sessions.resume_turn``);
        this worker takes its lease. ``opening`` is the turn's ``user_message``; the answer
        keeps its message id."""
        epoch, job = await self._store.leases.take(
            turn.id,
            self.worker_id,
            self.lease_s,
            job=TurnOrder(org_id=org_id, user_id=user_id, role=role).job(),
        )
        kit = None
        if job is not None and self.setups is not None:  # the models and kit it started with
            kit, models = await self.setups(job)
        job = job or TurnOrder(org_id=org_id, user_id=user_id, role=role).job()
        resumed = self._turn(
            session_id=turn.session_id, turn_id=turn.id, trace_id=turn.trace_id,
            job=job, opening=opening, models=models,
        )  # fmt: skip
        return self._launch(replace(resumed, resume=suspended, epoch=epoch), kit, job)

    def take_over(
        self,
        claim: Claim,
        opening: UserMessage,
        models: TurnRoleModels,
        kit: TurnKit | None = None,
    ) -> TurnHandle:
        """Run a turn claimed from a dead worker on from where its log ends."""
        turn = self._turn(
            session_id=claim.session_id, turn_id=claim.turn_id, trace_id=claim.trace_id,
            job=claim.job or {}, opening=opening, models=models,
        )  # fmt: skip
        return self._launch(replace(turn, takeover=True, epoch=claim.epoch), kit, claim.job or {})

    def _turn(
        self,
        *,
        session_id: str,
        turn_id: str,
        trace_id: str,
        job: dict[str, Any],
        opening: UserMessage,
        models: TurnRoleModels,
    ) -> Turn:
        """The turn a job describes: who asked (``job``), what (``opening``), with which
        models; the answer keeps the opening's message id."""
        return Turn(
            session_id=session_id,
            turn_id=turn_id,
            trace_id=trace_id,
            org_id=str(job["org_id"]),
            user_id=str(job["user_id"]),
            role=job.get("role", "member"),
            message_id=opening.message_id,
            text=opening.text,
            model=models.answer,
            planner=models.planner,
            summariser=models.summariser,
            executor=models.executor,
            timeout_s=self._turn_timeout_s,
            client=ClientContext.from_job(job.get("client")),
            agent=job.get("agent"),
            trace_link=job.get("trace_link"),
        )

    def fenced(self, turn_ids: set[str]) -> None:
        """Stop the local tasks of turns another worker has taken over: their writes would
        be refused anyway (their epoch is stale)."""
        for turn_id in turn_ids:
            task = self._tasks.get(turn_id)
            if task is not None and not task.done():
                _log.warning("turn.lost_lease", turn_id=turn_id, worker_id=self.worker_id)
                task.cancel()

    def _launch(
        self, turn: Turn, kit: TurnKit | None = None, job: Mapping[str, Any] | None = None
    ) -> TurnHandle:
        owned = self._owned(turn, kit or self._kit, job or {})
        task = asyncio.create_task(owned, name=f"turn-{turn.turn_id}")
        self._tasks[turn.turn_id] = task
        self._sessions[turn.turn_id] = turn.session_id
        task.add_done_callback(lambda _: self._forget(turn.turn_id))
        return TurnHandle(session_id=turn.session_id, turn_id=turn.turn_id, trace_id=turn.trace_id)

    async def _owned(self, turn: Turn, kit: TurnKit, job: Mapping[str, Any]) -> TurnStatus | None:
        """Run ``turn``; ``None`` when it turned out another worker owns it now. Once it
        closed its log (cancelled too), the ``ended`` hook is told."""
        status: TurnStatus | None = None
        spent = [0]

        def on_usage(usage: Usage) -> None:
            spent[0] = usage.cost_usd_micros

        def stopped() -> bool:
            return turn.turn_id in self._interrupted

        try:
            status = await run_turn(self._store, turn, kit, on_usage=on_usage, stopped=stopped)
            return status
        except StaleOwnerError:
            _log.warning("turn.fenced", turn_id=turn.turn_id, worker_id=self.worker_id)
            return None
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        finally:
            self._interrupted.discard(turn.turn_id)
            if status is not None:
                await asyncio.shield(self.turn_ended(job, turn.turn_id, status, spent[0]))
                await asyncio.shield(self._next_after(turn.session_id))

    async def turn_ended(
        self, job: Mapping[str, Any], turn_id: str, status: TurnStatus, spent: int = 0
    ) -> None:
        """Tell the ``ended`` hook that a turn closed (also for turns closed without a task:
        cancelled before they ran, expired); its failure is logged, never raised."""
        if self.ended is None:
            return
        try:
            await self.ended(job, turn_id, status, spent)
        except Exception as exc:
            _log.error(
                "turn.ended_hook_failed", turn_id=turn_id, error_type=type(exc).__name__,
                exc_info=exc,
            )  # fmt: skip

    def _forget(self, turn_id: str) -> None:
        self._tasks.pop(turn_id, None)
        self._sessions.pop(turn_id, None)

    async def cancel(self, session_id: str, *, timeout_s: float = CANCEL_TIMEOUT_S) -> list[str]:
        """Cancel the session's running turns in this process and wait (up to ``timeout_s``)
        for them to close; return their ids (none running: an empty list).

        A cancelled turn logs ``error`` (``cancelled``) and ``done`` (``cancelled``) itself;
        a task cancelled before it ever ran cannot, so it is closed here instead.
        """
        tasks = {
            turn_id: task
            for turn_id, task in self._tasks.items()
            # Cancel once (a second cancel would cut its closing write short); a task
            # that has just finished cannot be cancelled and is not reported.
            if self._sessions.get(turn_id) == session_id and (task.cancelling() or task.cancel())
        }
        if not tasks:
            return []
        _, pending = await asyncio.wait(tasks.values(), timeout=timeout_s)
        if pending:
            _log.warning("turns.cancel_slow", session_id=session_id, pending=len(pending))
        async with self._closing:
            running = {t.id: t for t in await self._store.sessions.running_turns(session_id)}
            for turn_id, task in tasks.items():
                if task.done() and turn_id in running:  # cancelled before its first step
                    await self._close_cancelled(running[turn_id])
                    await self.turn_ended({}, turn_id, "cancelled")
        _log.info("turns.cancelled", session_id=session_id, turn_ids=list(tasks))
        return list(tasks)

    async def _close_cancelled(self, turn: TurnRecord) -> None:
        status: TurnStatus = "cancelled"
        await self._store.log.append(
            turn.session_id,
            [
                Error(code="cancelled", message="The turn was cancelled", trace_id=turn.trace_id),
                Done(session_id=turn.session_id, status=status),
            ],
            turn_id=turn.id,
            finish=status,
        )

    async def wait(self, turn_id: str) -> None:
        """Wait for a turn of this process to end (returns at once if it has)."""
        task = self._tasks.get(turn_id)
        if task is not None:
            await asyncio.wait([task])  # however it ended: done, failed, or cancelled

    async def shutdown(self, grace_s: float) -> None:
        """Let running turns finish for ``grace_s``, then cancel (they log ``cancelled``).
        Queued turns stay queued: another worker (or this one restarted) starts them."""
        self._stopping = True
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close_interrupted(self, claim: Claim, message_id: str, answering: bool) -> None:
        """End a claimed turn that a newer message interrupted while its worker died: as
        its own task would have (``message_done`` ``interrupted`` if it had begun to
        answer, ``error`` ``interrupted``, ``done`` ``cancelled``)."""
        why = "A newer message interrupted this turn; the answer so far is kept"
        kept = [MessageDone(message_id=message_id, stop_reason="interrupted")] if answering else []
        error = Error(code="interrupted", message=why, trace_id=claim.trace_id)
        await self._close_claim(claim, [*kept, error], "cancelled")
        await self.turn_ended(claim.job or {}, claim.turn_id, "cancelled")

    async def close_unresumable(self, claim: Claim, why: str) -> None:
        """End a claimed turn that cannot go on (it has no job record or no opening message:
        a process from before leases left it), so its log ends in ``done``."""
        error = Error(code="internal", message=why, trace_id=claim.trace_id)
        await self._close_claim(claim, [error], "failed")
        _log.warning("turn.unresumable", turn_id=claim.turn_id, worker_id=self.worker_id)

    async def _close_claim(self, claim: Claim, events: list[Event], status: TurnStatus) -> None:
        closing = [*events, Done(session_id=claim.session_id, status=status)]
        await self._store.log.append(
            claim.session_id, closing, turn_id=claim.turn_id, finish=status, epoch=claim.epoch
        )
