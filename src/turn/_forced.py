"""A forced-tools agent's turn: one forced executor loop, as trainer spec §3 runs it.

The planner still runs first (the spec's initializer: it picks the context sources to
load), but for a forced-tools agent its ``simple`` and ``tool`` plans become one ``tool``
step with **every** tool the agent may use and the user's message as its goal: the whole
turn is one loop that talks through the communication tools and ends with ``idle``. A
``complex`` plan stands: each of its steps runs the forced loop (with its own tools and
the communication tools) and the merge writes the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from context import Item
from planner import Plan, PlannedStep
from tools import ToolRegistry

FORCED_STEP = "s1"
GOAL_CHARS = 600  # PlannedStep.goal's bound


def forced_plan(plan: Plan | None, *, text: str, tools: ToolRegistry, max_tool_calls: int) -> Plan:
    """The plan a forced-tools agent's turn runs: ``plan`` if it is ``complex``, else one
    ``tool`` step over all of ``tools`` whose goal is the user's message (``plan``'s
    sources kept)."""
    if plan is not None and plan.strategy == "complex":
        return plan
    goal = text if len(text) <= GOAL_CHARS else text[: GOAL_CHARS - 1] + "…"
    names = [tool.name for tool in tools]
    step = PlannedStep(
        id=FORCED_STEP, goal=goal, tools=names, max_tool_calls=max(max_tool_calls, 1)
    )
    return Plan(
        strategy="tool",
        reasoning="A forced-tools agent handles the whole turn in one tool loop.",
        sources=list(plan.sources) if plan is not None else [],
        steps=[step],
        executors=1,
    )


def message_items(text: str) -> Sequence[Item]:
    """What a forced loop's data starts with: the user's whole message when the goal had
    to cut it. (The conversation so far reaches the loop as native messages.)"""
    if len(text) <= GOAL_CHARS:
        return []
    return [Item(full=f"The user's message in full:\n{text}", key="message")]
