"""Plan validation: the checks a plan must pass before anything runs.

Problems that cannot be fixed safely (unknown tools, a cycle) are reported for the repair
round; numeric bounds (tool-call budgets, executor count) are clamped to the limits.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from planner._plan import Plan


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanLimits:
    max_steps: int = 5
    max_tool_calls_per_step: int = 10
    max_executors: int = 3


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a list of step ids (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in edges.get(node, []):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep in edges and state.get(dep) is None and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if state.get(node) is None and (cycle := visit(node)):
            return cycle
    return None


def validate_plan(
    plan: Plan,
    *,
    tools: Collection[str],
    sources: Collection[str],
    limits: PlanLimits,
) -> list[str]:
    """Problems with ``plan``, each a sentence the planner model can act on; [] if valid."""
    problems: list[str] = []
    count = len(plan.steps)
    if plan.strategy == "simple" and count:
        problems.append("strategy 'simple' takes no steps; use 'tool' or 'complex' for steps")
    if plan.strategy == "tool" and count != 1:
        problems.append(f"strategy 'tool' needs exactly one step, not {count}")
    if plan.strategy == "complex" and not 2 <= count <= limits.max_steps:
        problems.append(f"strategy 'complex' needs 2 to {limits.max_steps} steps, not {count}")
    ids = [step.id for step in plan.steps]
    if len(set(ids)) != len(ids):
        problems.append(f"step ids must be unique: {ids}")
    for step in plan.steps:
        unknown = [t for t in step.tools if t not in tools]
        if unknown:
            problems.append(f"step {step.id!r} uses unknown tools {unknown}")
        missing = [d for d in step.depends_on if d not in ids or d == step.id]
        if missing:
            problems.append(f"step {step.id!r} depends on missing or itself: {missing}")
    cycle = find_cycle({step.id: step.depends_on for step in plan.steps})
    if cycle:
        problems.append(f"dependency cycle: {' -> '.join(cycle)}")
    unknown_sources = [s.name for s in plan.sources if s.name not in sources]
    if unknown_sources:
        problems.append(f"unknown sources {unknown_sources}; choose from {sorted(sources)}")
    return problems


def clamp_plan(plan: Plan, limits: PlanLimits) -> Plan:
    """``plan`` with tool budgets and the executor count brought inside the limits."""
    steps = [
        step.model_copy(
            update={"max_tool_calls": min(step.max_tool_calls, limits.max_tool_calls_per_step)}
        )
        for step in plan.steps
    ]
    executors = min(plan.executors, limits.max_executors, max(len(steps), 1))
    return plan.model_copy(update={"steps": steps, "executors": executors})
