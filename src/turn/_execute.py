"""The execution phase of a turn: run a plan's steps with tools, then write the answer.

``tool`` plans stream their executor's answer; ``complex`` plans end with a merge call.
One failure rule (docs/api.md): when the provider failed and no step did its work (a
``tool`` plan's one step, or every step of a ``complex`` one) the turn fails with that
provider error; otherwise the answer stands on the steps that worked, and ``done`` names
the failed ones (``partial``). An answer is never empty: a ``tool`` plan whose step wrote
no text fails with the step's code (``step_overran``, ``step_timed_out``; ``empty_answer``
when it simply said nothing), as does an empty merge; an answer a bound cut short says
which in its ``stop_reason`` (``time_limit``, ``turn_budget``, ``max_model_turns``,
``max_tool_calls``).
A step that needs the user suspends the turn: the suspension is logged (``turn_suspended``,
operator-only), its pending calls are announced (``confirmation_pending`` /
``disambiguation_pending``) and the turn ends ``suspended``; ``stream._resolve`` resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

from context import ClientContext, Item, SourceScope, knowledge_items
from events import FailedStep, TurnStatus
from executors import (
    CutReason,
    Emit,
    ExecutorKit,
    PlanSuspended,
    StepCounter,
    StepEnd,
    StepResult,
    StepShare,
    TurnScope,
    Writer,
    merge,
    pending_events,
    run_plan,
    suspension_event,
)
from planner import Plan
from providers import ModelError, ProviderErrorCode, StopReason
from store import Store
from tools import READ_RESULT, Capabilities, ToolRegistry, ToolRunner
from turn._forced import message_items
from turn._observe import confirmation_pending
from turn._phases import TurnKit
from turn._work import Ask, Crew, Work

CONVERSATION_ROOM = 4_000
"""The least conversation a step that continues it (a ``tool`` plan's, a forced loop) is
given, in tokens: it acts on earlier tool work (ids, results), so it gets more of it than
the answer's writer; compaction keeps a long session well under it."""


@dataclass(frozen=True, slots=True)
class Executed:
    status: TurnStatus
    stop_reason: StopReason | CutReason | None  # None: suspended before any answer
    failed: tuple[FailedStep, ...] = ()  # steps that did not do their work: a partial answer


async def execute_plan(
    store: Store,
    kit: TurnKit,
    work: Work,
    ask: Ask,
    *,
    crew: Crew,
    scope: TurnScope,
    emit: Emit,
    budget: StepShare | None = None,
) -> Executed:
    """Run ``work``'s plan (a ``tool`` or ``complex`` one) and stream its answer to
    ``ask``; with ``work.paused``, go on from its suspended run.

    On suspension the ``turn_suspended`` event (what a resume reads back from the log)
    precedes the pending events, so a client that sees them can already resolve them.
    """
    assert kit.tools is not None, "plans with steps need a tool registry"
    plan = work.plan
    assert plan is not None, "only a plan's steps are executed"
    executors = _executor_kit(store, kit, plan, ask, crew=crew, scope=scope)
    data: list[Item] = []
    if kit.forced and plan.strategy == "tool":  # the goal may have cut the user's words
        data = [*message_items(ask.text)]
    outcome = await run_plan(
        plan, kit=executors, scope=scope, emit=emit, data=data, resume=work.paused, budget=budget,
        concurrency=kit.plan_limits.max_executors,
    )  # fmt: skip
    if isinstance(outcome, PlanSuspended):
        _suspend(plan, outcome, scope, emit)
        return Executed(status="suspended", stop_reason=None)
    failed = failed_steps(outcome.results)
    step_limit(outcome.results)  # past the agent's step limit, the turn fails
    if plan.strategy == "tool" or not any(r.ok for r in outcome.results):
        provider_failure(outcome.results)  # nothing stands without the provider: fail
        step_limit(outcome.results, FORCED_ENDS)  # nor a forced loop that went wrong
    if plan.strategy == "tool":  # the step's executor already streamed the answer
        [result] = outcome.results
        return Executed(status="completed", stop_reason=streamed_answer(result), failed=failed)
    merged = await merge(
        plan, outcome.results, writer=_writer(kit, crew, scope, ask.client), user_text=ask.text,
        view=ask.view, emit=emit, knowledge=ask.knowledge,
    )  # fmt: skip
    if not merged.text.strip():
        raise StepLimitError(EMPTY_ANSWER, "empty_answer")
    return Executed(status="completed", stop_reason=merged.stop_reason, failed=failed)


EMPTY_ANSWER = "The model wrote no answer; retry, or rephrase the request"


def streamed_answer(result: StepResult) -> StopReason | CutReason:
    """The ``stop_reason`` of the answer a ``tool`` plan's step streamed: the bound that
    cut it short, else ``end_turn``. Raise ``StepLimitError`` with the step's code when it
    wrote nothing at all: an empty answer is never a completed turn."""
    if result.said is False:  # None (a step restored from the log) is given the benefit
        if result.error is None:
            raise StepLimitError(EMPTY_ANSWER, "empty_answer")
        message = f"Step {result.step_id} wrote no answer. {result.error.message}"
        raise StepLimitError(message, result.error.code)
    return result.cut or "end_turn"


def _executor_kit(
    store: Store, kit: TurnKit, plan: Plan, ask: Ask, *, crew: Crew, scope: TurnScope
) -> ExecutorKit:
    """What the plan's executors run with. Steps that go on with the conversation (a
    ``tool`` plan's, a forced loop's) see it natively and may read earlier results whole."""
    assert kit.tools is not None, "plans with steps need a tool registry"
    continues = plan.strategy == "tool" or kit.forced
    sections, tools, caps = kit.budgets.executor, kit.tools, kit.capabilities
    if continues:  # it acts on the conversation: at least the answer writer's room for it
        room = max(kit.budgets.merger.tokens("conversation"), CONVERSATION_ROOM)
        sections = sections.with_section("conversation", room)
        tools, caps = with_result_reader(tools, caps)
    counter = kit.counter(crew.executor)
    return ExecutorKit(
        model=crew.executor,
        runner=ToolRunner(tools, store, capabilities=caps),
        registry=caps.usable(tools.for_role(scope.role)),
        counter=counter,
        budget=sections,
        limits=kit.executor_limits,
        identity=kit.identity,
        steps=None if kit.max_steps is None else StepCounter(kit.max_steps),
        loop=kit.loop,
        history=ask.view if continues else None,
        client=ask.client,
        to_user=continues,  # its text is the answer the user reads
        user_data=kit.user_data_for(kit.budgets.executor, source_scope(scope), counter),
        knowledge=tuple(knowledge_items(ask.knowledge)),
    )


def _writer(
    kit: TurnKit, crew: Crew, scope: TurnScope, client: ClientContext | None = None
) -> Writer:
    """Who writes a ``complex`` plan's answer from its steps' results."""
    return Writer(
        model=crew.merger, counter=kit.counter(crew.merger), budget=kit.budgets.merger,
        identity=kit.identity, caller=scope.caller, client=client,
    )  # fmt: skip


def with_result_reader(
    tools: ToolRegistry, caps: Capabilities
) -> tuple[ToolRegistry, Capabilities]:
    """``tools`` and ``caps`` with the built-in ``tool_results.read`` added and allowed (a
    replayed result may be abbreviated; this reads it whole) unless the agent blocks it."""
    if READ_RESULT.name in tools:
        return tools, caps
    if caps.allow is not None:
        caps = replace(caps, allow=caps.allow | {READ_RESULT.name})
    return ToolRegistry([*tools, READ_RESULT]), caps


def source_scope(scope: TurnScope) -> SourceScope:
    """Who the turn's sources fetch for: its org, user and session."""
    ctx = scope.ctx
    return SourceScope(org_id=ctx.org_id, user_id=ctx.user_id, session_id=scope.session_id)


def _suspend(plan: Plan, outcome: PlanSuspended, scope: TurnScope, emit: Emit) -> None:
    """Log what a resume starts from, then announce each call that waits for the user."""
    emit(suspension_event(plan, outcome))
    for waiting in outcome.suspended:
        for event in pending_events(waiting):
            emit(event)
        confirmation_pending(session_id=scope.session_id, turn_id=scope.turn_id, waiting=waiting)


def failed_steps(results: Sequence[StepResult]) -> tuple[FailedStep, ...]:
    """The steps that did not do their work, with why, for ``done``'s ``failed_steps``."""
    return tuple(
        FailedStep(step_id=r.step_id, code=r.error.code, message=r.error.message)
        if r.error is not None
        else FailedStep(step_id=r.step_id, code="step_failed", message=r.summary)
        for r in results
        if not r.ok
    )


class StepLimitError(Exception):
    """The turn's executors used every step their agent allows (``code`` ``max_steps``),
    its forced loop ended wrongly (``max_iterations``, ``no_tool_call``), or its answer is
    empty (the step's code, or ``empty_answer``); ``message`` says what was done by then."""

    def __init__(self, message: str, code: str = "max_steps") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


FORCED_ENDS: frozenset[StepEnd] = frozenset({"max_iterations", "no_tool_call"})
"""How a forced loop fails its turn when nothing else stands (a ``tool`` plan's step)."""


def step_limit(
    results: Sequence[StepResult], ends: frozenset[StepEnd] = frozenset({"max_steps"})
) -> None:
    """Raise ``StepLimitError`` with a partial summary when a step ended one of ``ends``
    way (by default: it hit the agent's step limit)."""
    hit = next((r for r in results if r.ended in ends and r.error is not None), None)
    if hit is None or hit.error is None:
        return
    done = "\n".join(f"- {r.step_id}: {r.summary}" for r in results if r.summary)
    limit = hit.error
    message = f"{limit.message}. Done so far:\n{done}" if done else limit.message
    raise StepLimitError(message, limit.code)


def provider_failure(results: Sequence[StepResult]) -> None:
    """Raise the first provider failure among ``results`` as the turn's ``ModelError``."""
    for result in results:
        error = result.error
        if result.ended == "model_failed" and error is not None:
            code = cast(ProviderErrorCode, error.code)
            message = f"The model provider failed in step {result.step_id}: {error.message}"
            raise ModelError(code, message, retry_after_s=error.retry_after_s)
