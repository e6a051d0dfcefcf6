"""One turn, with no HTTP in sight: read the conversation, call the model, log every event.

The turn runs as its own task and only appends to the log; SSE responses tail the log.
Whatever happens (a model error, a crash, a cancellation) the turn closes with an ``error``
when it failed and always with ``done``, in the same transaction that closes the turn row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import structlog

from context import (
    KEEP_LAST,
    History,
    SourceScope,
    compress_history,
    history,
    make_title,
    needs_compression,
    render_message,
)
from events import (
    ContextBudget,
    ContextLoaded,
    Done,
    Error,
    Event,
    FailedStep,
    HistorySummarised,
    MessageDone,
    TextDelta,
    TurnStatus,
)
from executors import PlanSuspended, StepShare, TurnScope
from planner import Plan
from providers import Model, ModelError
from store import EventLog, Store
from tools import ToolContext, UserRole
from turn import _observe as observe
from turn._answer import answer
from turn._execute import execute_plan
from turn._metering import BudgetExceededError, TurnMeter
from turn._phases import TurnKit, knowledge, load_picked_sources, plan_events, plan_turn
from turn._takeover import checkpoint, logged_plan

AGENT_DISABLED = (
    "No model is configured, so the agent is disabled. Start the server with "
    "`bosun serve --model PROVIDER:MODEL` (for example scripted:replies.yaml) or set "
    "BOSUN_MODELS__DEFAULT."
)
_log = structlog.get_logger("bosun.turn")


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnModels:
    """The models turns may use, by role, and those a request may pick by spec.

    ``merger`` writes answers (falling back to ``executor``); ``planner`` triages and
    plans (no planner: every turn is answered directly); ``summariser`` compresses long
    histories and titles sessions. ``build(spec, api_key)`` makes an instance with an
    org's own provider key; ``specs`` names each role's spec for that lookup.
    """

    executor: Model | None = None
    merger: Model | None = None
    planner: Model | None = None
    summariser: Model | None = None
    specs: Mapping[str, str] = field(default_factory=dict)
    selectable: Mapping[str, Model] = field(default_factory=dict)
    build: Callable[[str, str], Model] | None = None

    @property
    def answerer(self) -> Model | None:
        return self.merger or self.executor


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    session_id: str
    turn_id: str
    trace_id: str
    org_id: str
    user_id: str
    role: UserRole
    message_id: str
    text: str
    model: Model | None  # writes the answer
    planner: Model | None = None
    summariser: Model | None = None
    executor: Model | None = None  # runs plan steps with tools
    timeout_s: float = 300.0
    resume: tuple[Plan, PlanSuspended] | None = None  # go on from a suspension, no planning
    takeover: bool = False  # another worker ran it and died: go on from where its log ends
    epoch: int | None = None  # the session's ownership epoch this worker writes under


class BatchingAppender:
    """Appends a turn's events in order, grouping those that arrive during a write.

    With a fast model many deltas share one transaction (group commit); with a slow one
    each is committed as soon as it arrives. ``close`` writes the closing events and the
    turn's final status after everything queued before them.
    """

    def __init__(
        self, log: EventLog, session_id: str, turn_id: str, epoch: int | None = None
    ) -> None:
        self._log = log
        self._session_id = session_id
        self._turn_id = turn_id
        self._epoch = epoch
        self._pending: list[Event] = []
        self._writer: asyncio.Task[None] | None = None

    def add(self, event: Event) -> None:
        self._pending.append(event)
        if self._writer is None or self._writer.done():
            if self._writer is not None:
                self._writer.result()  # surface a failed write instead of losing events
            self._writer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            await self._log.append(
                self._session_id, batch, turn_id=self._turn_id, epoch=self._epoch
            )

    async def close(self, events: list[Event], status: TurnStatus) -> None:
        if self._writer is not None:
            await asyncio.shield(self._writer)
        batch, self._pending = [*self._pending, *events], []
        await self._log.append(
            self._session_id, batch, turn_id=self._turn_id, finish=status, epoch=self._epoch
        )


async def run_turn(store: Store, turn: Turn, kit: TurnKit | None = None) -> TurnStatus:
    """Run ``turn`` to its end and return its final status; never raises but on cancel.

    Every event logged while it runs (tools, caps and replay repairs included) carries the
    turn's ``trace_id``, ``org_id``, ``session_id`` and ``turn_id`` (context variables);
    it logs ``turn.started``, then ``turn.completed`` or ``turn.failed`` (``_observe``).
    """
    ids = {"trace_id": turn.trace_id, "org_id": turn.org_id, "session_id": turn.session_id}
    with structlog.contextvars.bound_contextvars(**ids, turn_id=turn.turn_id):
        started = time.perf_counter()
        observe.turn_started(turn, resumed=turn.resume is not None)
        log = _log.bind(trace_id=turn.trace_id, session_id=turn.session_id, turn_id=turn.turn_id)
        out = BatchingAppender(store.log, turn.session_id, turn.turn_id, turn.epoch)
        kit = kit or TurnKit()
        meter = TurnMeter(
            store, kit.caps, org_id=turn.org_id, user_id=turn.user_id,
            session_id=turn.session_id, turn_id=turn.turn_id,
        )  # fmt: skip
        turn = metered(turn, meter)
        closing: list[Event]
        status: TurnStatus
        failed: tuple[FailedStep, ...] = ()

        def ended(status: TurnStatus) -> None:
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            usage = meter.usage_event()
            observe.turn_ended(
                turn, status=status, closing=closing, usage=usage, duration_ms=elapsed_ms
            )

        try:
            if turn.model is None:
                closing, status = [_error(turn, "agent_disabled", AGENT_DISABLED)], "failed"
            else:
                async with asyncio.timeout(turn.timeout_s):
                    await meter.check()
                    deadline = asyncio.get_running_loop().time() + turn.timeout_s
                    closing, status, failed = await _run(
                        store, kit, turn, turn.model, out, _Budget(meter, deadline)
                    )
        except BudgetExceededError as exc:
            log.info("turn.budget_exceeded", org_id=turn.org_id)
            closing, status = [_error(turn, "budget_exceeded", exc.message)], "failed"
        except TimeoutError:
            message = f"The model did not finish within the turn limit of {turn.timeout_s:g} s"
            closing, status = [_error(turn, "provider_timeout", message)], "failed"
        except ModelError as exc:
            log.warning("turn.provider_error", code=exc.code, request_id=exc.request_id)
            suffix = f" (provider request id {exc.request_id})" if exc.request_id else ""
            error = _error(turn, exc.code, exc.message + suffix)
            closing, status = [replace(error, retry_after_s=exc.retry_after_s)], "failed"
        except asyncio.CancelledError:
            closing = [_error(turn, "cancelled", "The turn was cancelled")]
            await asyncio.shield(_close(out, turn, closing, "cancelled", meter))
            ended("cancelled")
            raise
        except Exception as exc:
            log.error("turn.crashed", error_type=type(exc).__name__, exc_info=exc)
            message = "The turn failed unexpectedly; quote the trace id when reporting it"
            closing, status = [_error(turn, "internal", message)], "failed"
        await _close(out, turn, closing, status, meter, failed)
        ended(status)
        return status


def metered(turn: Turn, meter: TurnMeter) -> Turn:
    """``turn`` with each role's model metered under that role."""

    def wrap(model: Model | None, role: str) -> Model | None:
        return None if model is None else meter.wrap(model, role)

    return replace(
        turn,
        model=wrap(turn.model, "merger"),
        planner=wrap(turn.planner, "planner"),
        summariser=wrap(turn.summariser, "summariser"),
        executor=wrap(turn.executor or turn.model, "executor"),
    )


async def _close(
    out: BatchingAppender,
    turn: Turn,
    closing: list[Event],
    status: TurnStatus,
    meter: TurnMeter,
    failed: tuple[FailedStep, ...] = (),
) -> None:
    """End the log: ``message_done``, then ``usage`` (whenever a model call was made, so the
    usage rows and the events always agree), then ``error``, then ``done`` (``partial``,
    with the steps that failed, when the answer stands without some of its steps)."""
    errors = [e for e in closing if isinstance(e, Error)]
    usage = [meter.usage_event()] if meter.by_role or status in ("completed", "suspended") else []
    events = [*(e for e in closing if not isinstance(e, Error)), *usage, *errors]
    partial = status == "completed" and bool(failed)
    done = Done(
        session_id=turn.session_id,
        status=status,
        partial=True if partial else None,
        failed_steps=list(failed) if partial else None,
    )
    await out.close([*events, done], status)


def _error(turn: Turn, code: str, message: str) -> Error:
    return Error(code=code, message=message, trace_id=turn.trace_id)


@dataclass(frozen=True, slots=True)
class _Budget:
    """What the turn has spent (the meter) and when it must end."""

    meter: TurnMeter
    deadline: float

    def left(self, budget: StepShare) -> StepShare:
        """What is left of the turn's ``budget`` for its steps, now."""
        spent = self.meter.usage_event()
        tokens = (
            spent.input_tokens
            + spent.output_tokens
            + spent.cache_read_tokens
            + spent.cache_write_tokens
        )
        wall = self.deadline - asyncio.get_running_loop().time()
        return StepShare(
            tokens=None if budget.tokens is None else max(budget.tokens - tokens, 0),
            usd_micros=(
                None
                if budget.usd_micros is None
                else max(budget.usd_micros - spent.cost_usd_micros, 0)
            ),
            tool_calls=budget.tool_calls,
            wall_s=max(wall * (1 - CLOSING_SHARE), 0.001),
        )


CLOSING_SHARE = 0.1
"""The share of a turn's remaining wall time its steps leave for the merge and closing."""


async def _run(
    store: Store,
    kit: TurnKit,
    turn: Turn,
    model: Model,
    out: BatchingAppender,
    budget: _Budget,
) -> tuple[list[Event], TurnStatus, tuple[FailedStep, ...]]:
    """Plan, load sources, execute or answer; return the closing events, the status and
    the plan's steps that failed."""
    log = await store.log.read(turn.session_id)
    view = history(log, exclude_turn=turn.turn_id)
    loaded: list[ContextLoaded] = []
    paused: PlanSuspended | None = None
    # A dead worker's turn goes on from where its log ends: its plan, if it got that far.
    mine = [e for e in log if e.turn_id == turn.turn_id] if turn.takeover else []
    plan = logged_plan(mine)
    if turn.resume is not None:  # this turn's plan and loads are in the log already
        plan, paused = turn.resume
    elif plan is not None:
        if plan.steps and kit.tools is not None:
            paused, owed = await checkpoint(store, plan, mine)
            for event in owed:
                out.add(event)
    elif turn.planner is not None:
        outcome = await plan_turn(kit, turn.planner, turn.text, role=turn.role, view=view, log=log)
        for event in plan_events(outcome):
            out.add(event)
        scope = SourceScope(org_id=turn.org_id, user_id=turn.user_id, session_id=turn.session_id)
        loaded = await load_picked_sources(
            kit, outcome, scope=scope, log=log, counter=kit.counter(model)
        )
        for event in loaded:
            out.add(event)
        plan = outcome.plan
    if plan is not None and plan.steps and kit.tools is not None:
        executed = await execute_plan(
            store,
            kit,
            plan,
            executor=turn.executor or model,
            merger=model,
            scope=TurnScope(
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                ctx=ToolContext(
                    store=store, org_id=turn.org_id, user_id=turn.user_id, role=turn.role
                ),
            ),
            text=turn.text,
            view=view,
            knowledge=knowledge(log, loaded),
            emit=out.add,
            resume=paused,
            budget=budget.left(kit.turn_budget),
        )
        status, stop_reason, failed = executed.status, executed.stop_reason, executed.failed
    else:
        reply = await answer(
            model,
            turn.text,
            view=view,
            knowledge=knowledge(log, loaded),
            budget=kit.budgets.merger,
            counter=kit.counter(model),
            on_text=lambda text: out.add(TextDelta(delta=text)),
        )
        out.add(ContextBudget(role="merger", report=reply.report.to_dict()))
        status, stop_reason, failed = "completed", reply.completion.stop_reason, ()
    if turn.summariser is not None and turn.resume is None:  # the first part did upkeep
        for event in await _upkeep(store, kit, turn, turn.summariser, view):
            out.add(event)
    done: list[Event] = (
        []
        if stop_reason is None
        else [MessageDone(message_id=turn.message_id, stop_reason=stop_reason)]
    )
    return done, status, failed


async def _upkeep(
    store: Store,
    kit: TurnKit,
    turn: Turn,
    summariser: Model,
    view: History,
) -> list[Event]:
    """Best-effort, after the answer: compress a long history, title a new session. At the
    daily cap it is skipped: the answer stands."""
    try:
        return await _upkeep_calls(store, kit, turn, summariser, view)
    except BudgetExceededError:
        _log.info("turn.upkeep_skipped", reason="budget_exceeded", turn_id=turn.turn_id)
        return []


async def _upkeep_calls(
    store: Store, kit: TurnKit, turn: Turn, summariser: Model, view: History
) -> list[Event]:
    events: list[Event] = []
    counter = kit.counter(summariser)
    tokens = sum(counter.count(render_message(m)) for m in view.messages)
    allocation = kit.budgets.merger.tokens("conversation")
    up_to = view.split_seq(KEEP_LAST)
    if up_to is not None and needs_compression(view.since_summary, tokens, allocation):
        summary = await compress_history(
            summariser,
            view.messages,
            timeout_s=kit.summariser_timeout_s,
            counter=counter,
        )
        if summary is not None:
            events.append(HistorySummarised(summary=summary, up_to_seq=up_to))
    if not view.entries and view.summary is None:  # the session's first turn
        title = await make_title(
            summariser,
            turn.text,
            timeout_s=kit.summariser_timeout_s,
        )
        if title is not None:
            await store.sessions.set_title(turn.session_id, title)
    return events
