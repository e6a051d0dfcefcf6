"""Background runs: an agent's task queued by a trigger, run by any worker with no client.

``submit`` queues a run in its own session and returns at once. Each worker's
``RunDispatcher`` claims queued runs (up to ``per_worker`` of its own at a time, at most
``per_agent`` running per agent across workers, one org at a time round-robin so a busy
org cannot starve the others) and starts each as a turn of its agent's version, the claim
and the turn's opening in one transaction. It dispatches while it has room and something
is claimable, and wakes at once when a run is queued (here, or by any worker on
PostgreSQL: ``store.RunWakes``) and when one of its runs ends; ``poll_s`` is only the
fallback. From then on a run is an ordinary turn: leased, taken over from its log if its
worker dies, with the org's caps; the run's status is its turn's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

import telemetry
from fleet._directory import Agent, AgentDirectory, _agent
from fleet._schedule import GRACE_S, due_tick
from store import AgentRecord, RunRecord, RunTakenError, Store
from tools import UserRole
from turn import ModelResolver, TurnOrder, TurnRunner, new_session

RATE_WINDOW_S = 60
VERSIONS_KEPT = 1024  # agent versions a dispatcher keeps read (then it starts afresh)
RETRY_S = 60.0
"""A run whose start failed (its agent version or models gone, a hiccup) stays queued and
is tried again on this worker after this long, not on every round."""
DISPATCH_READ = 100  # queued runs a dispatcher reads at a time (oldest first)
_log = structlog.get_logger("bosun.runs")


class AgentPausedError(Exception):
    """The agent is paused: it takes no runs."""


class AgentRateLimitedError(Exception):
    """The agent's triggers are over its ``runs_per_minute``."""

    def __init__(self, message: str, resets_at: datetime) -> None:
        super().__init__(message)
        self.resets_at = resets_at


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What a trigger asks of an agent, and who asked."""

    org_id: str
    user_id: str
    role: UserRole
    agent: str
    task: str
    context: dict[str, Any] | None = None
    idempotency_key: str | None = None
    trigger: str = "api"
    """api, schedule, webhook, or a content event's: mention, reply, subscription."""
    trigger_event_id: str | None = None
    """The content event that started it (``fleet._triggers``)."""
    hops: int = 0
    """Content-triggered runs from a person's event to this one (0: not so triggered)."""


def run_message(task: str, context: dict[str, Any] | None) -> str:
    """The run's user message: its task, then its context as JSON."""
    if not context:
        return task
    return f"{task}\n\nContext (JSON):\n{json.dumps(context, ensure_ascii=False, indent=1)}"


class RunDispatcher:
    """Queues runs and starts them on this worker's turn runner."""

    def __init__(
        self,
        store: Store,
        agents: AgentDirectory,
        runner: TurnRunner,
        models: ModelResolver,
        *,
        per_worker: int = 4,
        per_agent: int = 2,
        poll_s: float = 1.0,
        rate_limited: bool = True,
    ) -> None:
        self._store = store
        self.rate_limited = rate_limited  # off: no agent's runs_per_minute applies (dev demos)
        self._agents = agents
        self._runner = runner
        self._models = models
        self.per_worker = per_worker
        self.per_agent = per_agent
        self.poll_s = poll_s
        self._mine: set[str] = set()  # turn ids of runs this worker started
        self._retry_at: dict[str, float] = {}  # runs whose start failed: when to try again
        self._versions: dict[tuple[str, str, int], Agent] = {}  # the agent versions read
        self._skipped: set[tuple[str, str, datetime]] = set()  # ticks over a rate limit
        self._failing: set[tuple[str, str, int, str]] = set()  # schedules logged as failing
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def submit(self, request: RunRequest) -> tuple[RunRecord, bool]:
        """Queue ``request`` (or find the run its idempotency key started); whether it is
        new. Raises ``AgentNotFoundError``, ``AgentPausedError``, ``AgentRateLimitedError``."""
        store, org_id = self._store, request.org_id
        agent = await self._agents.get(org_id, request.agent)
        key = request.idempotency_key
        if key is not None and (earlier := await store.runs.by_key(org_id, agent.handle, key)):
            return earlier, False
        if agent.paused:
            raise AgentPausedError(agent.paused_message())
        await self._within_rate(org_id, agent)
        attributes = {"gen_ai.agent.name": agent.handle, "bosun.run.trigger": request.trigger}
        with telemetry.span(f"queue_run {agent.handle}", attributes) as span:
            session_id = await new_session(
                store, org_id=org_id, user_id=request.user_id, first_message=request.task,
                agent=agent.handle,
            )  # fmt: skip
            run, new = await store.runs.create(
                id=f"run_{uuid.uuid4().hex}", org_id=org_id, agent=agent.handle,
                agent_version=agent.version, session_id=session_id, user_id=request.user_id,
                role=request.role, trigger=request.trigger, task=request.task,
                context=request.context, idempotency_key=key,
                trigger_event_id=request.trigger_event_id, hops=request.hops,
                trace_link=telemetry.current_traceparent(),  # the run's trace links here
            )  # fmt: skip
            span.set_attribute("bosun.run.id", run.id)
        _log.info("run.queued", run_id=run.id, agent=agent.handle, org_id=org_id)
        return run, new  # queuing it woke the dispatchers (``store.RunWakes``)

    async def _within_rate(self, org_id: str, agent: Agent) -> None:
        """Count a trigger against the agent's ``runs_per_minute``, or raise
        ``AgentRateLimitedError`` (nothing counted when rate limits are off)."""
        if not self.rate_limited:
            return
        window = await self._store.rate_limits.hit(
            f"agent-runs:{org_id}:{agent.handle}", window_s=RATE_WINDOW_S
        )
        if window.count > agent.profile.runs_per_minute:
            raise AgentRateLimitedError(
                f"The agent {agent.handle!r} takes at most {agent.profile.runs_per_minute} "
                "runs per minute",
                window.resets_at,
            )

    def start(self) -> None:
        if self._task is None:
            self._store.runs.wakes.add(self._wake.set)
            self._task = asyncio.create_task(self._loop(), name="bosun-run-dispatcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._store.runs.wakes.discard(self._wake.set)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        """Dispatch, then sleep until a run is queued (by any worker), one of this
        worker's runs ends, or ``poll_s`` passes: the fallback, and the schedules' tick
        (fired once per ``poll_s``, not on every wake)."""
        ticks_at = 0.0
        while True:
            if time.monotonic() >= ticks_at:
                await self._guarded(self.fire_schedules, "schedules")
                ticks_at = time.monotonic() + self.poll_s
            self._wake.clear()  # a wake while dispatching means one more round
            await self._guarded(self.dispatch, "dispatch")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=ticks_at - time.monotonic())

    async def poll(self) -> None:
        """One round: fire the due ticks, then start queued runs. Each half is on its own:
        a failure (a database hiccup, a bug) is logged and the loop goes on, and schedules
        that fail never keep queued runs from starting."""
        await self._guarded(self.fire_schedules, "schedules")
        await self._guarded(self.dispatch, "dispatch")

    @staticmethod
    async def _guarded(step: Callable[[], Awaitable[object]], name: str) -> None:
        try:
            await step()
        except Exception as exc:
            _log.error("runs.poll_failed", step=name, error_type=type(exc).__name__, exc_info=exc)

    async def fire_schedules(self, now: datetime | None = None) -> list[str]:
        """Queue a run for every schedule tick due now; the ids of the runs this call
        queued. The tick is the run's idempotency key, so every worker may try: one wins.
        Each agent's tick is on its own: one that fails is logged and skipped."""
        now = now or datetime.now(UTC)
        self._skipped = {s for s in self._skipped if now - s[2] <= timedelta(seconds=GRACE_S)}
        fired = []
        for record in await self._store.agents.everywhere():
            schedule = record.profile.get("schedule")
            if not schedule or record.profile.get("paused") or record.paused_at is not None:
                continue
            try:
                run_id = await self._fire(record, schedule, now)
            except Exception as exc:  # a stored schedule no date matches, a hiccup
                self._broken(record, exc)
                continue
            if run_id is not None:
                fired.append(run_id)
        return fired

    async def _fire(
        self, record: AgentRecord, schedule: dict[str, Any], now: datetime
    ) -> str | None:
        """Queue the run of ``record``'s tick due at ``now``; its id if this call did."""
        tick = due_tick(str(schedule["cron"]), now)
        if tick is None or (record.org_id, record.handle, tick) in self._skipped:
            return None
        user_id, role = _agent(record).acting_user("schedule")
        request = RunRequest(
            org_id=record.org_id, user_id=user_id, role=role, agent=record.handle,
            task=str(schedule["task"]), context=schedule.get("context"),
            idempotency_key=f"schedule:{tick.isoformat()}", trigger="schedule",
        )  # fmt: skip
        try:
            run, new = await self.submit(request)
        except AgentRateLimitedError:  # skipped, and said once, not on every poll
            self._skipped.add((record.org_id, record.handle, tick))
            _log.warning(
                "schedule.skipped", agent=record.handle, org_id=record.org_id,
                tick=tick.isoformat(), reason="agent_rate_limited",
            )  # fmt: skip
            return None
        if not new:
            return None
        _log.info("schedule.fired", agent=record.handle, run_id=run.id, tick=tick.isoformat())
        return run.id

    def _broken(self, record: AgentRecord, exc: Exception) -> None:
        """Log a schedule that failed: once per agent version and kind of failure, not on
        every poll (it is tried again on each)."""
        key = (record.org_id, record.handle, record.version, type(exc).__name__)
        if key in self._failing:
            return
        self._failing.add(key)
        _log.error(
            "schedule.failed", agent=record.handle, org_id=record.org_id,
            version=record.version, error_type=type(exc).__name__, exc_info=exc,
        )  # fmt: skip

    async def dispatch(self) -> list[str]:
        """Claim and start runs while this worker has room and one is claimable; the ids
        of the runs started. A claim lost to another worker (or a start that failed) goes
        on to the next run of the same queue read, not to a second read: workers woken
        together pick the same oldest runs, and the loser takes the one after. Only when
        the read is used up with room left is the queue read again (runs that failed to
        start wait ``RETRY_S``); what is queued later wakes the loop for another call."""
        started: list[str] = []
        while self._room() > 0:
            candidates = await self._pick()
            missed = False
            for run in candidates:
                if self._room() <= 0:
                    return started
                if await self._start(run):
                    started.append(run.id)
                else:
                    missed = True
            if not missed:  # every run the read had started: there were no more
                break
        return started

    def _room(self) -> int:
        self._mine &= set(self._runner.running)
        return self.per_worker - len(self._mine)

    async def _pick(self) -> list[RunRecord]:
        """The queued runs in fair order (none: nothing is claimable now, or every agent
        with queued runs is at ``per_agent``): this worker starts them from the front
        while it has room."""
        now = time.monotonic()
        self._retry_at = {run: at for run, at in self._retry_at.items() if at > now}
        queued, running = await self._store.runs.dispatchable(limit=DISPATCH_READ)
        queued = [run for run in queued if run.id not in self._retry_at]
        return fair_order(queued, running, per_agent=self.per_agent)

    async def _start(self, run: RunRecord) -> bool:
        """Start ``run``; whether it started here (not when another worker claimed it
        first, nor when its start failed: then it is tried again after ``RETRY_S``)."""
        try:
            return await self.claim_and_start(run) is not None
        except Exception as exc:  # this run's agent or kit: the others still start
            self._retry_at[run.id] = time.monotonic() + RETRY_S
            _log.error(
                "run.start_failed", run_id=run.id, agent=run.agent, org_id=run.org_id,
                error_type=type(exc).__name__, exc_info=exc,
            )  # fmt: skip
            return False

    async def claim_and_start(self, run: RunRecord) -> str | None:
        """Claim ``run`` and start its turn here, the claim and the turn's opening in one
        transaction; the turn's id, or ``None`` when another worker claimed it first."""
        turn_id = str(uuid.uuid4())
        try:
            await self._launch(run, turn_id)
        except RunTakenError:
            return None
        return turn_id

    async def _version(self, run: RunRecord) -> Agent:
        """The agent version ``run`` recorded; versions are never rewritten, so kept."""
        key = (run.org_id, run.agent, run.agent_version)
        agent = self._versions.get(key)
        if agent is None:
            agent = await self._agents.at_version(*key)
            if len(self._versions) >= VERSIONS_KEPT:
                self._versions.clear()
            self._versions[key] = agent
        return agent

    async def _launch(self, run: RunRecord, turn_id: str) -> None:
        agent = await self._version(run)
        setup = await self._agents.setup(agent, org_id=run.org_id, background=True)
        models = await self._models.resolve_offered(
            org_id=run.org_id, requested=None, roles=setup.specs
        )
        role: UserRole = run.role  # type: ignore[assignment]
        order = TurnOrder(
            org_id=run.org_id, user_id=run.user_id, role=role,
            agent=(agent.handle, agent.version), trace_link=run.trace_link,
        )  # fmt: skip
        await self._runner.start(
            order, session_id=run.session_id, text=run_message(run.task, run.context),
            models=models, trace_id=uuid.uuid4().hex, kit=setup.kit, turn_id=turn_id,
            run_id=run.id,
        )  # fmt: skip
        self._mine.add(turn_id)
        self._runner.when_done(turn_id, self._wake.set)  # its room goes to the next at once
        _log.info("run.started", run_id=run.id, turn_id=turn_id, agent=run.agent)


def fair_order(
    queued: Sequence[RunRecord], running: dict[tuple[str, str], int], *, per_agent: int
) -> list[RunRecord]:
    """``queued`` (oldest first) in the order to start them: one run per org per round,
    the orgs running the least first, skipping agents already at ``per_agent``."""
    busy = dict(running)
    by_org: dict[str, list[RunRecord]] = defaultdict(list)
    for run in queued:
        by_org[run.org_id].append(run)
    load = {org: sum(n for (o, _), n in running.items() if o == org) for org in by_org}
    order: list[RunRecord] = []
    while any(by_org.values()):
        for org in sorted((o for o in by_org if by_org[o]), key=lambda o: (load[o], o)):
            pick = next((r for r in by_org[org] if busy.get((org, r.agent), 0) < per_agent), None)
            if pick is None:  # every agent of this org is at its limit
                by_org[org] = []
                continue
            by_org[org] = [r for r in by_org[org] if r is not pick]
            busy[(org, pick.agent)] = busy.get((org, pick.agent), 0) + 1
            load[org] += 1
            order.append(pick)
    return order
