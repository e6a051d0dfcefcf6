"""Planner-only dry runs: triage, plan, source selection, budgets and a cost estimate.

Nothing runs and nothing is written: no tool, no source fetch, no log event. It is what
``POST /v1/plan`` and ``bosun plan`` return, so people can judge triage and plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from context import Budgets, ClientContext, SourceLoad, covers
from planner._estimate import CostEstimate, estimate_execution
from planner._planner import Planning, PlanOutcome, make_plan
from providers import Message, Model


@dataclass(frozen=True, kw_only=True, slots=True)
class DryRun:
    outcome: PlanOutcome
    sources: list[dict[str, Any]]
    budget: dict[str, Any]
    estimate: CostEstimate

    def to_dict(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "plan": outcome.plan.model_dump(),
            "attempts": outcome.attempts,
            "repaired": outcome.repaired,
            "problems": list(outcome.problems),
            "fallback": outcome.fallback,
            "context": {"sources": self.sources},
            "budget": self.budget,
            "estimate": {
                "model_calls": self.estimate.model_calls,
                "input_tokens": self.estimate.input_tokens,
                "output_tokens": self.estimate.output_tokens,
                "cost_usd_micros": self.estimate.cost_usd_micros,
            },
            "usage": {
                "model": outcome.model,
                "input_tokens": outcome.usage.input_tokens,
                "output_tokens": outcome.usage.output_tokens,
                "cache_read_tokens": outcome.usage.cache_read_tokens,
                "cache_write_tokens": outcome.usage.cache_write_tokens,
                "cost_usd_micros": outcome.cost_usd_micros,
                "duration_ms": outcome.duration_ms,
            },
        }


async def dry_run(
    model: Model,
    message: str,
    planning: Planning,
    *,
    budgets: Budgets,
    priced_for: tuple[str, str],
    history: Sequence[Message] = (),
    loaded: Sequence[SourceLoad] = (),
    client: ClientContext | None = None,
) -> DryRun:
    """Plan ``message`` and say what executing the plan would load, allocate and cost
    (with ``budgets`` for the executor and merger calls, priced for their models:
    ``priced_for``, the executor's spec and the merger's); the
    planner sees the request's ``client`` context as a turn's does."""
    described = [load.describe() for load in loaded]
    outcome = await make_plan(
        model, message, planning, history=history, loaded=described, client=client
    )
    plan = outcome.plan
    sources = []
    for pick in plan.sources:
        wanted = SourceLoad(name=pick.name, params=pick.params)
        held = any(covers(load, wanted) for load in loaded)
        sources.append(
            {
                "name": pick.name,
                "why": pick.why,
                "params": pick.params,
                "action": "already_loaded" if held else "load",
            }
        )
    executor, merger = budgets.executor, budgets.merger
    budget = {
        "planner": outcome.budget.to_dict() if outcome.budget else None,
        "executor": {
            "per_call": {s.name: s.tokens for s in executor.sections},
            "steps": {
                step.id: {"max_tool_calls": step.max_tool_calls, "tokens_per_call": executor.total}
                for step in plan.steps
            },
        },
        "merger": {s.name: s.tokens for s in merger.sections},
    }
    estimate = estimate_execution(
        plan,
        executor_model=priced_for[0],
        merger_model=priced_for[1],
        executor_input_tokens=executor.total,
        merger_input_tokens=merger.total,
    )
    return DryRun(outcome=outcome, sources=sources, budget=budget, estimate=estimate)
