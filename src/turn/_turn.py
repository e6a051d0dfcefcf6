"""One turn, with no HTTP in sight: read the conversation, call the model, log every event.

The turn runs as its own task and only appends to the log; SSE responses tail the log.
Whatever happens (a model error, a crash, a cancellation) the turn closes with an ``error``
when it failed and always with ``done``, in the same transaction that closes the turn row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import assert_never

import structlog

import telemetry
from context import (
    KEEP_LAST,
    ClientContext,
    History,
    SourceScope,
    TokenCounter,
    caller_block,
    compress_history,
    history,
    make_title,
    needs_compression,
    render_message,
)
from events import (
    ContextBudget,
    Done,
    Error,
    Event,
    FailedStep,
    HistorySummarised,
    MessageDone,
    TextDelta,
    TurnStatus,
    Usage,
)
from executors import CutReason, PlanSuspended, StepShare, TurnScope, Writer, answer
from planner import Plan, PlanOutcome
from providers import Model, ModelError, ScriptExhaustedError, StopReason, in_conversation
from store import Store, StoredEvent
from tools import ToolContext, UserRole
from turn import _observe as observe
from turn._appender import BatchingAppender
from turn._execute import EMPTY_ANSWER, StepLimitError, execute_plan
from turn._forced import forced_plan
from turn._metering import BudgetExceededError, TurnMeter
from turn._phases import TurnKit, knowledge, load_picked_sources, plan_events, plan_turn
from turn._takeover import checkpoint, resets
from turn._tracing import plan_attributes, turn_attributes
from turn._work import Ask, Crew, Direct, Fresh, Resumed, TakenOver, Work, start_of

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
    epoch: int | None = None  # the turn's ownership epoch this worker writes under
    client: ClientContext | None = None  # where the user is, their locale: every role sees it
    agent: str | None = None  # the agent profile's handle (none: the server's own)
    trace_link: str | None = None  # the traceparent of the span that queued it (a run's)


async def run_turn(
    store: Store,
    turn: Turn,
    kit: TurnKit | None = None,
    *,
    on_usage: Callable[[Usage], None] | None = None,
    stopped: Callable[[], bool] | None = None,
) -> TurnStatus:
    """Run ``turn`` to its end and return its final status; never raises but on cancel.
    ``on_usage`` is told the turn's usage (its ``usage`` event) as it ends; ``stopped``
    says whether a cancel is an interrupt (a newer message), which closes it marked so.

    Every event logged while it runs (tools, caps and replay repairs included) carries the
    turn's ``trace_id``, ``org_id``, ``session_id`` and ``turn_id`` (context variables);
    it logs ``turn.started``, then ``turn.completed`` or ``turn.failed`` (``_observe``).
    """
    ids = {"trace_id": turn.trace_id, "org_id": turn.org_id, "session_id": turn.session_id}
    with (
        structlog.contextvars.bound_contextvars(**ids, turn_id=turn.turn_id),
        in_conversation(turn.session_id),  # a scripted model's place: the session's own
        telemetry.root_span(*_root(turn)) as span,  # the trace is the turn's trace_id
    ):
        started = time.perf_counter()
        observe.turn_started(turn, resumed=turn.resume is not None)
        out = BatchingAppender(store.log, turn.session_id, turn.turn_id, turn.epoch)
        kit = kit or TurnKit()
        meter = TurnMeter(
            store, kit.caps, org_id=turn.org_id, user_id=turn.user_id,
            session_id=turn.session_id, turn_id=turn.turn_id,
        )  # fmt: skip
        turn = metered(turn, meter)
        if kit.wall_time_s is not None:  # the agent's own bound on a turn's wall time
            turn = replace(turn, timeout_s=min(turn.timeout_s, kit.wall_time_s))
        closing: list[Event]
        status: TurnStatus
        failed: tuple[FailedStep, ...] = ()

        def ended(status: TurnStatus) -> None:
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            usage = meter.usage_event()
            if on_usage is not None:
                on_usage(usage)
            observe.turn_ended(
                turn, status=status, closing=closing, usage=usage, duration_ms=elapsed_ms
            )
            _traced_end(span, status, closing, usage)

        try:
            closing, status, failed = await _attempt(store, kit, turn, out, meter)
        except asyncio.CancelledError:
            closing = _cancelled(turn, out, interrupted=stopped is not None and stopped())
            await asyncio.shield(_close(out, turn, closing, "cancelled", meter))
            ended("cancelled")
            raise
        except Exception as exc:
            closing, status = [_failure(turn, exc)], "failed"
        await _close(out, turn, closing, status, meter, failed)
        ended(status)
        return status


def _root(turn: Turn) -> tuple[str, str, telemetry.Attributes, tuple[str, ...]]:
    """The turn's span: ``invoke_agent {agent}`` in the trace ``turn.trace_id``, linked to
    what queued it (a background run's trigger)."""
    agent = turn.agent or "bosun"
    attributes = turn_attributes(
        agent, session_id=turn.session_id, turn_id=turn.turn_id, org_id=turn.org_id,
        resumed=turn.resume is not None, takeover=turn.takeover,
    )  # fmt: skip
    links = (turn.trace_link,) if turn.trace_link else ()
    return f"invoke_agent {agent}", turn.trace_id, attributes, links


def _traced_end(
    span: telemetry.SpanLike, status: TurnStatus, closing: Sequence[Event], usage: Usage
) -> None:
    """The turn's end on its span: its status, its cost, the error code it failed with."""
    if not span.is_recording():
        return
    span.set_attributes({
        "bosun.turn.status": status, "bosun.cost_usd_micros": usage.cost_usd_micros,
        "gen_ai.usage.input_tokens": usage.input_tokens + usage.cache_read_tokens
        + usage.cache_write_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    })  # fmt: skip
    error = next((e for e in closing if isinstance(e, Error)), None)
    if status in ("failed", "cancelled"):
        telemetry.fail(span, error.code if error is not None else status)


async def _attempt(
    store: Store, kit: TurnKit, turn: Turn, out: BatchingAppender, meter: TurnMeter
) -> Ending:
    """The turn's work within its time limit; with no model, ``agent_disabled``."""
    if turn.model is None:
        return [_error(turn, "agent_disabled", AGENT_DISABLED)], "failed", ()
    async with asyncio.timeout(turn.timeout_s):
        if turn.takeover:  # before any call: the dead attempt's join the usage
            await meter.adopt()
        await meter.check()
        deadline = asyncio.get_running_loop().time() + turn.timeout_s
        return await _run(_Job(store, kit, turn, turn.model, out, _Budget(meter, deadline)))


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


INTERRUPTED = "interrupted"
"""The ``error`` code and ``message_done.stop_reason`` of a turn a newer message cut short."""


def _cancelled(turn: Turn, out: BatchingAppender, *, interrupted: bool) -> list[Event]:
    """How a cancelled turn closes. Interrupted by a newer message: the answer written so
    far stays, closed with ``message_done`` (``interrupted``) so the next turn's model sees
    it as what was said, and ``error`` ``interrupted``."""
    if not interrupted:
        return [_error(turn, "cancelled", "The turn was cancelled")]
    why = "A newer message interrupted this turn; the answer so far is kept"
    kept = [MessageDone(message_id=turn.message_id, stop_reason=INTERRUPTED)]
    return [*(kept if out.answering else []), _error(turn, INTERRUPTED, why)]


def _error(turn: Turn, code: str, message: str) -> Error:
    return Error(code=code, message=message, trace_id=turn.trace_id)


def _failure(turn: Turn, exc: Exception) -> Error:
    """The ``error`` a turn that raised ``exc`` closes with (a classified code)."""
    log = _log.bind(trace_id=turn.trace_id, session_id=turn.session_id, turn_id=turn.turn_id)
    match exc:
        case BudgetExceededError():
            log.info("turn.budget_exceeded", org_id=turn.org_id)
            return _error(turn, "budget_exceeded", exc.message)
        case StepLimitError():
            log.info(f"turn.{exc.code}", org_id=turn.org_id)
            return _error(turn, exc.code, exc.message)
        case TimeoutError():
            message = f"The model did not finish within the turn limit of {turn.timeout_s:g} s"
            return _error(turn, "provider_timeout", message)
        case ScriptExhaustedError():  # the words are the user's: the event only, no log
            log.warning("turn.script_exhausted", script=exc.script, role=exc.role)
            return _error(turn, exc.code, exc.describe())
        case ModelError():
            log.warning("turn.provider_error", code=exc.code, request_id=exc.request_id)
            suffix = f" (provider request id {exc.request_id})" if exc.request_id else ""
            error = _error(turn, exc.code, exc.message + suffix)
            return replace(error, retry_after_s=exc.retry_after_s)
        case _:
            log.error("turn.crashed", error_type=type(exc).__name__, exc_info=exc)
            message = "The turn failed unexpectedly; quote the trace id when reporting it"
            return _error(turn, "internal", message)


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


@dataclass(frozen=True, slots=True)
class _Job:
    """A running turn and what it runs with: the store, the kit, the model that writes
    its answer, where its events go and what it may still spend."""

    store: Store
    kit: TurnKit
    turn: Turn
    model: Model
    out: BatchingAppender
    budget: _Budget


Ending = tuple[list[Event], TurnStatus, tuple[FailedStep, ...]]
"""The closing events, the status, and the plan's steps that failed."""


async def _run(job: _Job) -> Ending:
    """Start as the turn must (decided once), then run its steps or answer directly."""
    turn, store, out = job.turn, job.store, job.out
    log = await _context_log(store, turn)
    view = history(log, exclude_turn=turn.turn_id)
    start = start_of(
        log, turn_id=turn.turn_id, resume=turn.resume, takeover=turn.takeover,
        planner=turn.planner,
    )  # fmt: skip
    match start:
        case Fresh():
            assert turn.planner is not None
            work = await _plan(job, turn.planner, view, log)
        case Direct():
            work = await _direct(job, log)
        case Resumed(plan=plan, paused=paused):
            work = Work(plan=plan, paused=paused)
        case TakenOver(plan=plan, events=mine):
            work = await _taken_over(job, plan, mine)
        case _:
            assert_never(start)
    ask = Ask(text=turn.text, view=view, knowledge=knowledge(log, work.loaded), client=turn.client)
    runs_steps = work.plan is not None and work.plan.steps and job.kit.tools is not None
    if turn.takeover:  # before any text of its own: the dead attempt's it writes again
        own = [e for e in log if e.turn_id == turn.turn_id]
        for reset in resets(own, turn.message_id, work.plan if runs_steps else None):
            out.add(reset)
    first = isinstance(start, Fresh | Direct)  # no attempt of this turn recorded calls before
    ending = await (_execute(job, work, ask, first=first) if runs_steps else _answer(job, ask))
    if turn.summariser is not None and not isinstance(start, Resumed):  # done the first time
        with telemetry.span("compact") as span:
            upkept = await _upkeep(store, job.kit, turn, turn.summariser, view)
            span.set_attribute("bosun.events", len(upkept))
        for event in upkept:
            out.add(event)
    return ending


async def _context_log(store: Store, turn: Turn) -> list[StoredEvent]:
    """What the turn reads of its session (``EventLog.read_context``: from the compaction
    anchor on, and the knowledge before it); a taken-over turn also reads its own events,
    which its checkpoint and resets are made of, wherever they start."""
    log = await store.log.read_context(turn.session_id)
    if not turn.takeover:
        return log
    have = {e.seq for e in log}
    mine = await store.log.read(turn.session_id, turn_id=turn.turn_id)
    return sorted([*log, *(e for e in mine if e.seq not in have)], key=lambda e: e.seq)


async def _taken_over(job: _Job, plan: Plan, mine: Sequence[StoredEvent]) -> Work:
    """Go on with ``plan`` from the checkpoint in the turn's log (``mine``), logging the
    results owed to calls that were cut off."""
    if not plan.steps or job.kit.tools is None:
        return Work(plan=plan)
    paused, owed = await checkpoint(job.store, plan, mine)
    for event in owed:
        job.out.add(event)
    return Work(plan=plan, paused=paused)


async def _plan(job: _Job, planner: Model, view: History, log: list[StoredEvent]) -> Work:
    """Plan the turn and load the sources the plan picked, logging both."""
    turn, kit = job.turn, job.kit
    scope = SourceScope(org_id=turn.org_id, user_id=turn.user_id, session_id=turn.session_id)
    with telemetry.span("plan") as span:
        outcome = await plan_turn(
            kit, planner, turn.text, role=turn.role, view=view, log=log, scope=scope,
            client=turn.client,
        )  # fmt: skip
        plan = outcome.plan
        span.set_attributes(plan_attributes(plan.strategy, plan.steps, outcome.attempts))
    if kit.forced:  # the planner picked the sources; the turn is one forced loop
        outcome = replace(outcome, plan=_forced_plan(job, outcome.plan))
    for event in plan_events(outcome, _specs(job)):
        job.out.add(event)
    with telemetry.span("load_context", {"bosun.sources": len(outcome.plan.sources)}):
        loaded = await load_picked_sources(
            kit, outcome.plan.sources, scope=scope, log=log, counter=kit.counter(job.model),
            client=turn.client,
        )  # fmt: skip
    for event in loaded:
        job.out.add(event)
    return Work(plan=outcome.plan, loaded=tuple(loaded))


def _specs(job: _Job) -> dict[str, str]:
    """The model spec each role of the turn runs with (``plan_created.models``), so a
    request's model choice is seen, never silently ignored."""
    turn = job.turn
    roles = {"planner": turn.planner, "executor": turn.executor or job.model, "merger": job.model}
    return {role: model.name for role, model in roles.items() if model is not None}


async def _direct(job: _Job, log: list[StoredEvent]) -> Work:
    """No planner: a forced-tools agent's one loop (logged here, as a planned one is, for
    takeovers), else a direct answer; either way with the sources bound to the client
    context's entity loaded first."""
    turn, kit = job.turn, job.kit
    plan = None
    if kit.forced:
        plan = _forced_plan(job, None)
        for event in plan_events(PlanOutcome(plan=plan, attempts=0), _specs(job)):
            job.out.add(event)
    scope = SourceScope(org_id=turn.org_id, user_id=turn.user_id, session_id=turn.session_id)
    loaded = await load_picked_sources(
        kit, (), scope=scope, log=log, counter=kit.counter(job.model), client=turn.client
    )
    for event in loaded:
        job.out.add(event)
    return Work(plan=plan, loaded=tuple(loaded))


def _forced_plan(job: _Job, plan: Plan | None) -> Plan:
    """What a forced-tools agent's turn runs instead of ``plan`` (see ``turn._forced``)."""
    kit, turn = job.kit, job.turn
    assert kit.tools is not None, "a forced-tools agent always has its communication tools"
    tools = kit.capabilities.usable(kit.tools.for_role(turn.role))
    limit = kit.executor_limits.max_tool_calls
    return forced_plan(plan, text=turn.text, tools=tools, max_tool_calls=limit)


async def _execute(job: _Job, work: Work, ask: Ask, *, first: bool) -> Ending:
    """Run the plan's steps with tools; the executors or the merge write the answer.
    ``first``: the turn's first attempt, whose calls need no look at earlier records."""
    turn, kit = job.turn, job.kit
    ctx = ToolContext(
        store=job.store, org_id=turn.org_id, user_id=turn.user_id, role=turn.role,
        calls_run=set() if first else None,
    )  # fmt: skip
    executed = await execute_plan(
        job.store, kit, work, ask,
        crew=Crew(executor=turn.executor or job.model, merger=job.model),
        scope=TurnScope(session_id=turn.session_id, turn_id=turn.turn_id, ctx=ctx),
        emit=job.out.add, budget=job.budget.left(kit.turn_budget),
    )  # fmt: skip
    return _closing(turn, executed.stop_reason), executed.status, executed.failed


async def _answer(job: _Job, ask: Ask) -> Ending:
    """No steps to run: write the answer directly from the conversation and knowledge."""
    kit, out = job.kit, job.out
    caller = caller_block(org_id=job.turn.org_id, user_id=job.turn.user_id, role=job.turn.role)
    writer = Writer(
        model=job.model, counter=kit.counter(job.model), budget=kit.budgets.merger,
        identity=kit.identity, caller=caller, client=job.turn.client,
    )  # fmt: skip
    reply = await answer(
        writer, ask.text, view=ask.view, knowledge=ask.knowledge,
        on_text=lambda text: out.add(TextDelta(delta=text)),
    )  # fmt: skip
    out.add(ContextBudget(role="merger", report=reply.budget.to_dict()))
    if not reply.text.strip():  # an empty answer is never a completed turn
        raise StepLimitError(EMPTY_ANSWER, "empty_answer")
    return _closing(job.turn, reply.stop_reason), "completed", ()


def _closing(turn: Turn, stop_reason: StopReason | CutReason | None) -> list[Event]:
    """``message_done`` for an answer that was written (none for a suspended turn)."""
    if stop_reason is None:
        return []
    return [MessageDone(message_id=turn.message_id, stop_reason=stop_reason)]


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


def _covered(view: History, counter: TokenCounter) -> tuple[int, int]:
    """The messages and tokens the view's summary stands for (none: ``(0, 0)``)."""
    if view.covered is not None:
        return view.covered
    before = sum(counter.count(render_message(m)) for m in view.summarised)
    return len(view.summarised), before


async def _upkeep_calls(
    store: Store, kit: TurnKit, turn: Turn, summariser: Model, view: History
) -> list[Event]:
    events: list[Event] = []
    counter = kit.counter(summariser)
    sizes = [counter.count(render_message(e.message)) for e in view.entries]
    note = view.messages[0] if view.summary is not None else None
    tokens = sum(sizes) + (counter.count(render_message(note)) if note is not None else 0)
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
            count, before = _covered(view, counter)
            folded = sum(e.seq <= up_to for e in view.entries)  # the entries it adds
            events.append(
                HistorySummarised(
                    summary=summary, up_to_seq=up_to,
                    messages=count + folded, tokens=before + sum(sizes[:folded]),
                )
            )  # fmt: skip
    if not view.entries and view.summary is None:  # the session's first turn
        title = await make_title(
            summariser,
            turn.text,
            timeout_s=kit.summariser_timeout_s,
        )
        if title is not None:
            await store.sessions.set_title(turn.session_id, title)
    return events
