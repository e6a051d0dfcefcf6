"""Run a plan: every step whose dependencies are done starts at once, up to a cap.

A step that fails marks the steps that depend on it (directly or not) as skipped; a step
that suspends stops new starts, lets the running ones finish, and the plan comes back
suspended. ``step_started``/``step_completed`` bracket each executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import assert_never

import telemetry
from context import Item
from events import StepCompleted, StepError, StepStarted
from executors._config import Emit, ExecutorKit, StepShare, TurnScope
from executors._loop import resume_step, run_step
from executors._prompt import dependency_item
from executors._results import StepOutcome, StepResult, Suspended
from planner import Plan, PlannedStep


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanResult:
    """Every step ran or was skipped; ``results`` in plan order."""

    results: tuple[StepResult, ...]

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanSuspended:
    """At least one step waits for the user. ``results`` are the steps that finished (in
    plan order), ``suspended`` those waiting, ``not_started`` the ids of the rest."""

    results: tuple[StepResult, ...]
    suspended: tuple[Suspended, ...]
    not_started: tuple[str, ...]


RunOutcome = PlanResult | PlanSuspended
"""How running a plan ended (the planner's ``PlanOutcome`` is how making one did)."""
MERGE_RESERVE = 0.2
"""The share of a ``complex`` plan's remaining turn budget held back for its merge."""


def executor_id(step_id: str) -> str:
    return f"{step_id}-exec"


def completed_event(result: StepResult) -> StepCompleted:
    """The ``step_completed`` event of a finished (or skipped) step."""
    return StepCompleted(
        step_id=result.step_id,
        executor_id=executor_id(result.step_id),
        ok=result.ok,
        summary=result.summary,
        tool_calls=result.tool_calls,
        tokens=result.tokens,
        duration_ms=result.duration_ms,
        failed_tool_calls=result.failed_tool_calls,
        error=result.error,
    )


async def run_plan(
    plan: Plan,
    *,
    kit: ExecutorKit,
    scope: TurnScope,
    emit: Emit,
    concurrency: int = 3,
    data: Sequence[Item] = (),
    resume: PlanSuspended | None = None,
    budget: StepShare | None = None,
) -> RunOutcome:
    """Run ``plan``'s steps, at most ``min(plan.executors, concurrency)`` at a time.

    A dependent step gets its dependencies' summaries as data, before ``data`` (context
    shared by every step). A ``tool`` plan's single step streams its text as the turn's
    answer (``text_delta`` without ``step_id``); a ``complex`` plan's steps stream with
    their ``step_id`` and ``merge`` writes the answer. A ``simple`` plan has no steps.

    With ``resume`` (the plan's earlier, suspended run, its pending calls now answered)
    the finished steps stand, the suspended ones go on (``resume_step``) and the rest
    start as their dependencies complete; ``results`` then include the earlier ones.

    ``budget`` is what is left of the turn's budget: each step still to run gets an even
    share of it (a ``complex`` plan holds ``MERGE_RESERVE`` back for its merge).
    """
    finished = {r.step_id: r for r in resume.results} if resume else {}
    to_run = [s for s in plan.steps if s.id not in finished]
    keep = MERGE_RESERVE if plan.strategy == "complex" else 0.0
    run = _Run(
        plan, kit=kit, scope=scope, emit=emit, data=data, finished=finished,
        share=(budget or StepShare()).split(len(to_run), keep=keep),
    )  # fmt: skip
    for paused in resume.suspended if resume else ():
        run.resume(paused)
    try:
        await run.drive(cap=max(1, min(plan.executors, concurrency)))
    finally:
        await run.stop()
    return run.outcome()


class _Run:
    """One run of a plan: its finished and suspended steps and the executors running."""

    def __init__(
        self,
        plan: Plan,
        *,
        kit: ExecutorKit,
        scope: TurnScope,
        emit: Emit,
        data: Sequence[Item],
        finished: dict[str, StepResult],
        share: StepShare,
    ) -> None:
        self.plan = plan
        self._kit, self._scope, self._emit, self._data = kit, scope, emit, data
        self._share = share
        self._final_answer = plan.strategy == "tool"
        self._order = {step.id: index for index, step in enumerate(plan.steps)}
        self.finished = finished
        self.suspended: list[Suspended] = []
        self.running: dict[asyncio.Task[StepOutcome], str] = {}

    def start(self, step: PlannedStep) -> None:
        self._emit(StepStarted(step_id=step.id, executor_id=executor_id(step.id)))
        job = run_step(
            step, kit=self._kit, scope=self._scope, emit=self._emit, data=self._items(step),
            final_answer=self._final_answer, share=self._share,
        )  # fmt: skip
        self.running[asyncio.create_task(_traced(step.id, job), name=executor_id(step.id))] = (
            step.id
        )

    def resume(self, paused: Suspended) -> None:
        step = next(s for s in self.plan.steps if s.id == paused.step_id)
        job = resume_step(
            step, paused, kit=self._kit, scope=self._scope, emit=self._emit,
            data=self._items(step), final_answer=self._final_answer, share=self._share,
        )  # fmt: skip
        job = _traced(step.id, job, resumed=True)
        self.running[asyncio.create_task(job, name=executor_id(step.id))] = step.id

    async def drive(self, *, cap: int) -> None:
        """Start what is ready, wait for the first to end, record it; until all ended (or
        one suspended and the rest ran out)."""
        while True:
            if not self.suspended:
                _skip_dependants(self.plan, self.finished, self._emit)
                for step in _ready(self.plan, self.finished, self.running, cap):
                    self.start(step)
            if not self.running:
                return
            done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: self._order[self.running[t]]):
                del self.running[task]
                _record(task.result(), self.finished, self.suspended, self._emit)

    async def stop(self) -> None:
        """Cancel what still runs (the run was cancelled or a step raised)."""
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)

    def outcome(self) -> RunOutcome:
        plan, finished = self.plan, self.finished
        results = tuple(finished[s.id] for s in plan.steps if s.id in finished)
        if not self.suspended:
            return PlanResult(results=results)
        waiting = {s.step_id for s in self.suspended}
        rest = tuple(s.id for s in plan.steps if s.id not in finished and s.id not in waiting)
        return PlanSuspended(results=results, suspended=tuple(self.suspended), not_started=rest)

    def _items(self, step: PlannedStep) -> list[Item]:
        return [*_dependency_data(self.plan, step, self.finished), *self._data]


def _record(
    outcome: StepOutcome, finished: dict[str, StepResult], suspended: list[Suspended], emit: Emit
) -> None:
    match outcome:
        case StepResult():
            finished[outcome.step_id] = outcome
            emit(completed_event(outcome))
        case Suspended():
            suspended.append(outcome)  # not completed: it goes on after the user answers
        case _:
            assert_never(outcome)


def _ready(
    plan: Plan,
    finished: dict[str, StepResult],
    running: dict[asyncio.Task[StepOutcome], str],
    cap: int,
) -> list[PlannedStep]:
    """Steps to start now, in plan order: not started, every dependency done and ok."""
    busy = set(running.values())
    free = cap - len(busy)
    ready = [
        step
        for step in plan.steps
        if step.id not in finished
        and step.id not in busy
        and all(dep in finished and finished[dep].ok for dep in step.depends_on)
    ]
    return ready[: max(free, 0)]


def _skip_dependants(plan: Plan, finished: dict[str, StepResult], emit: Emit) -> None:
    """Skip every step with a failed (or skipped) dependency, transitively, in plan order."""
    changed = True
    while changed:
        changed = False
        for step in plan.steps:
            if step.id in finished:
                continue
            bad = [d for d in step.depends_on if d in finished and not finished[d].ok]
            if not bad:
                continue
            why = _why(bad, finished)
            skipped = StepResult(step_id=step.id, ok=False, summary=why, ended="skipped",
                                 error=StepError(code="step_skipped", message=why))  # fmt: skip
            finished[step.id] = skipped
            emit(completed_event(skipped))
            changed = True


def _why(bad: list[str], finished: dict[str, StepResult]) -> str:
    failed = [d for d in bad if finished[d].ended != "skipped"]
    skipped = [d for d in bad if finished[d].ended == "skipped"]
    reasons = []
    if failed:
        reasons.append(f"{_names(failed)}, which failed")
    if skipped:
        verb = "was" if len(skipped) == 1 else "were"
        reasons.append(f"{_names(skipped)}, which {verb} skipped")
    return "skipped: depends on " + "; and on ".join(reasons)


def _names(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]


def _dependency_data(plan: Plan, step: PlannedStep, finished: dict[str, StepResult]) -> list[Item]:
    goals = {s.id: s.goal for s in plan.steps}
    return [dependency_item(d, goals[d], finished[d].summary) for d in step.depends_on]


async def _traced(
    step_id: str, job: Awaitable[StepOutcome], *, resumed: bool = False
) -> StepOutcome:
    """``job`` in its step's span; a plan's parallel steps are sibling spans."""
    with telemetry.span(f"execute_step {step_id}", {"bosun.step.id": step_id}) as span:
        outcome = await job
        if span.is_recording():
            span.set_attribute("bosun.step.resumed", resumed)
            if isinstance(outcome, Suspended):
                span.set_attribute("bosun.step.status", "suspended")
            else:
                span.set_attributes({
                    "bosun.step.status": "ok" if outcome.ok else "failed",
                    "bosun.step.ended": outcome.ended,
                    "bosun.step.tool_calls": outcome.tool_calls,
                    "bosun.step.failed_tool_calls": outcome.failed_tool_calls,
                })  # fmt: skip
                if not outcome.ok:
                    telemetry.fail(span, str(outcome.ended))
        return outcome
