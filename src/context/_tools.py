"""Fit tool specs into a tools section: every granted spec whole, the section grown
(and the overrun reported) when they exceed it.

Tools arrive as plain ``providers.ToolSpec`` data (context never imports the tool
registry). A budget may cut data, never capability: a tool listed by name only could not
be called, so the way to fewer tool tokens is granting fewer tools (the planner gives a
step only the tools it needs), not hiding granted ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from context._grow import fit_whole
from context._sections import Item, SectionFill
from context._tokens import TokenCounter
from providers import ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsFit:
    """``specs`` go in the request's tools: all of them, in the order given."""

    specs: tuple[ToolSpec, ...]
    fill: SectionFill


def tool_json(spec: ToolSpec) -> str:
    """A spec as canonical JSON: what its full form costs in the prompt."""
    return json.dumps(
        {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )


def fit_tools(
    specs: Sequence[ToolSpec],
    allocation: int,
    *,
    counter: TokenCounter,
    section: str = "tools",
) -> ToolsFit:
    """Every one of ``specs`` whole: a granted tool is never taken away by a budget.

    When the schemas exceed ``allocation`` the section grows for this call and the fill
    carries an ``overrun`` cut (the budget report shows it); it never lists a tool by
    name only, since the model could not call it.
    """
    specs = list(specs)
    items = [Item(full=tool_json(s), key=s.name) for s in specs]
    why = f"{len(specs)} granted tools are sent whole"
    fill = fit_whole(section, allocation, items, why=why, counter=counter, separator="\n")
    return ToolsFit(specs=tuple(specs), fill=fill)
