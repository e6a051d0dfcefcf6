"""One turn, with no HTTP in sight: read the conversation, call the model, log every event.

The turn runs as its own task and only appends to the log; SSE responses tail the log.
Whatever happens (a model error, a crash, a cancellation) the turn closes with an ``error``
when it failed and always with ``done``, in the same transaction that closes the turn row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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
from executors import PlanSuspended, TurnScope
from planner import Plan
from providers import Model, ModelError, TokenUsage, cost_usd_micros
from store import EventLog, Store, UsageRecord
from store.events import (
    ContextBudget,
    ContextLoaded,
    Done,
    Error,
    Event,
    HistorySummarised,
    MessageDone,
    TextDelta,
    TurnStatus,
    Usage,
)
from stream._answer import answer
from stream._auth import Role
from stream._execute import execute_plan
from stream._phases import TurnKit, knowledge, load_picked_sources, plan_events, plan_turn
from tools import ToolContext

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
    role: Role
    message_id: str
    text: str
    model: Model | None  # writes the answer
    planner: Model | None = None
    summariser: Model | None = None
    executor: Model | None = None  # runs plan steps with tools
    timeout_s: float = 300.0
    resume: tuple[Plan, PlanSuspended] | None = None  # go on from a suspension, no planning


class BatchingAppender:
    """Appends a turn's events in order, grouping those that arrive during a write.

    With a fast model many deltas share one transaction (group commit); with a slow one
    each is committed as soon as it arrives. ``close`` writes the closing events and the
    turn's final status after everything queued before them.
    """

    def __init__(self, log: EventLog, session_id: str, turn_id: str) -> None:
        self._log = log
        self._session_id = session_id
        self._turn_id = turn_id
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
            await self._log.append(self._session_id, batch, turn_id=self._turn_id)

    async def close(self, events: list[Event], status: TurnStatus) -> None:
        if self._writer is not None:
            await asyncio.shield(self._writer)
        batch, self._pending = [*self._pending, *events], []
        await self._log.append(self._session_id, batch, turn_id=self._turn_id, finish=status)


async def run_turn(store: Store, turn: Turn, kit: TurnKit | None = None) -> TurnStatus:
    """Run ``turn`` to its end and return its final status; never raises but on cancel."""
    log = _log.bind(trace_id=turn.trace_id, session_id=turn.session_id, turn_id=turn.turn_id)
    out = BatchingAppender(store.log, turn.session_id, turn.turn_id)
    closing: list[Event]
    status: TurnStatus
    try:
        if turn.model is None:
            closing, status = [_error(turn, "agent_disabled", AGENT_DISABLED)], "failed"
        else:
            async with asyncio.timeout(turn.timeout_s):
                closing, status = await _run(store, kit or TurnKit(), turn, turn.model, out)
    except TimeoutError:
        message = f"The model did not finish within the turn limit of {turn.timeout_s:g} s"
        closing, status = [_error(turn, "provider_timeout", message)], "failed"
    except ModelError as exc:
        log.warning("turn.provider_error", code=exc.code, request_id=exc.request_id)
        suffix = f" (provider request id {exc.request_id})" if exc.request_id else ""
        closing, status = [_error(turn, exc.code, exc.message + suffix)], "failed"
    except asyncio.CancelledError:
        closing = [_error(turn, "cancelled", "The turn was cancelled")]
        await asyncio.shield(_close(out, turn, closing, "cancelled"))
        raise
    except Exception as exc:
        log.error("turn.failed", error_type=type(exc).__name__, exc_info=exc)
        message = "The turn failed unexpectedly; quote the trace id when reporting it"
        closing, status = [_error(turn, "internal", message)], "failed"
    await _close(out, turn, closing, status)
    log.info("turn.finished", status=status)
    return status


async def _close(
    out: BatchingAppender, turn: Turn, closing: list[Event], status: TurnStatus
) -> None:
    await out.close([*closing, Done(session_id=turn.session_id, status=status)], status)


def _error(turn: Turn, code: str, message: str) -> Error:
    return Error(code=code, message=message, trace_id=turn.trace_id)


async def _run(
    store: Store, kit: TurnKit, turn: Turn, model: Model, out: BatchingAppender
) -> tuple[list[Event], TurnStatus]:
    """Plan, load sources, execute or answer; return the closing events and status."""
    log = await store.log.read(turn.session_id)
    view = history(log, exclude_turn=turn.turn_id)
    spent: dict[str, tuple[TokenUsage, int]] = {}
    loaded: list[ContextLoaded] = []
    plan: Plan | None = None
    paused: PlanSuspended | None = None
    if turn.resume is not None:  # this turn's plan and loads are in the log already
        plan, paused = turn.resume
    elif turn.planner is not None:
        outcome = await plan_turn(kit, turn.planner, turn.text, role=turn.role, view=view, log=log)
        for event in plan_events(outcome):
            out.add(event)
        await _spend(store, turn, spent, "planner", outcome.model, outcome.usage)
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
        )
        for role, used_model, usage in executed.spent:
            await _spend(store, turn, spent, role, used_model, usage)
        status, stop_reason = executed.status, executed.stop_reason
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
        completion = reply.completion
        await _spend(store, turn, spent, "merger", completion.model, completion.usage)
        status, stop_reason = "completed", completion.stop_reason
    if turn.summariser is not None and turn.resume is None:  # the first part did upkeep
        for event in await _upkeep(store, kit, turn, turn.summariser, view, spent):
            out.add(event)
    done = (
        []
        if stop_reason is None
        else [MessageDone(message_id=turn.message_id, stop_reason=stop_reason)]
    )
    return [*done, _usage_event(spent)], status


async def _upkeep(
    store: Store,
    kit: TurnKit,
    turn: Turn,
    summariser: Model,
    view: History,
    spent: dict[str, tuple[TokenUsage, int]],
) -> list[Event]:
    """Best-effort, after the answer: compress a long history, title a new session."""
    calls: list[tuple[str, TokenUsage]] = []
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
            on_usage=lambda model, usage: calls.append((model, usage)),
        )
        if summary is not None:
            events.append(HistorySummarised(summary=summary, up_to_seq=up_to))
    if not view.entries and view.summary is None:  # the session's first turn
        title = await make_title(
            summariser,
            turn.text,
            timeout_s=kit.summariser_timeout_s,
            on_usage=lambda model, usage: calls.append((model, usage)),
        )
        if title is not None:
            await store.sessions.set_title(turn.session_id, title)
    for model, usage in calls:
        await _spend(store, turn, spent, "summariser", model, usage)
    return events


async def _spend(
    store: Store,
    turn: Turn,
    spent: dict[str, tuple[TokenUsage, int]],
    role: str,
    model: str,
    usage: TokenUsage,
) -> None:
    """Record one role's usage and its cost (the provider's figures are the truth)."""
    cost = cost_usd_micros(model, usage)
    before, before_cost = spent.get(role, (TokenUsage(), 0))
    spent[role] = (before + usage, before_cost + cost)
    await store.sessions.record_usage(
        UsageRecord(
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            org_id=turn.org_id,
            user_id=turn.user_id,
            role=role,
            model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost_usd_micros=cost,
        )
    )


def _usage_event(by_role: Mapping[str, tuple[TokenUsage, int]]) -> Usage:
    """The turn's totals and per-role breakdown; cost in micro-dollars."""
    total = sum((usage for usage, _ in by_role.values()), TokenUsage())
    return Usage(
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cache_read_tokens=total.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens,
        cost_usd_micros=sum(cost for _, cost in by_role.values()),
        by_role={
            role: {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens,
                "cost_usd_micros": cost,
            }
            for role, (u, cost) in by_role.items()
        },
    )
