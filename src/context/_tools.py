"""Fit tool specs into a tools section: full schemas first, ``name: summary`` when over.

Tools arrive as plain ``providers.ToolSpec`` data (context never imports the tool
registry). Specs that fit go to the model whole; the rest are listed by name and summary
with a note naming the drill-down tool that returns a schema, so the model can still
find them (progressive disclosure) without paying for every schema on every call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from context._fit import fit_section
from context._sections import Item, SectionFill
from context._tokens import TokenCounter
from providers import ToolSpec

_SUMMARY_CHARS = 120
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsFit:
    """``specs`` go in the request's tools; ``listing`` (maybe empty) in the system prompt."""

    specs: tuple[ToolSpec, ...]
    listing: str
    fill: SectionFill


def tool_summary(description: str) -> str:
    """The first sentence of a description, at most ``_SUMMARY_CHARS`` characters."""
    first = _SENTENCE_END.split(description.strip(), maxsplit=1)[0].replace("\n", " ")
    return first if len(first) <= _SUMMARY_CHARS else first[: _SUMMARY_CHARS - 1] + "…"


def tool_json(spec: ToolSpec) -> str:
    """A spec as canonical JSON: what its full form costs in the prompt."""
    return json.dumps(
        {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )


def tool_items(specs: Sequence[ToolSpec]) -> list[Item]:
    """Items for a tools section: the full JSON spec, or ``- name: summary``."""
    return [
        Item(full=tool_json(s), short=f"- {s.name}: {tool_summary(s.description)}", key=s.name)
        for s in specs
    ]


def drill_down_note(drill_down: str | None) -> str:
    if drill_down is None:
        return "Tools listed by name only are not callable in this step."
    return (
        f"Tools listed by name only: call `{drill_down}` with a tool's name to get its "
        "full schema before using it."
    )


def fit_tools(
    specs: Sequence[ToolSpec],
    allocation: int,
    *,
    counter: TokenCounter,
    drill_down: str | None = None,
    section: str = "tools",
) -> ToolsFit:
    """Fit ``specs`` (most important first) into ``allocation`` tokens.

    ``drill_down`` names the tool that returns a full schema (one of ``specs``): it is
    moved first and never abbreviated, since a listing is useless if it cannot be called.
    """
    specs = list(specs)
    protected = 0
    if drill_down is not None:
        found = [s for s in specs if s.name == drill_down]
        if not found:
            raise ValueError(f"drill_down tool {drill_down!r} is not among the specs")
        specs = [*found, *(s for s in specs if s.name != drill_down)]
        protected = 1
    fill = fit_section(
        section,
        allocation,
        tool_items(specs),
        counter=counter,
        note=drill_down_note(drill_down),
        verbatim=protected,
        separator="\n",
        omitted="[… {count} more tools not shown]",
    )
    whole = tuple(specs[i] for i, form in zip(fill.kept, fill.forms, strict=True) if form == "full")
    listed = [text for text, form in zip(fill.items, fill.forms, strict=True) if form != "full"]
    listing = ""
    if listed or len(fill.kept) < len(specs):
        # The fill's text, less the full JSON specs (they travel as request tools).
        listing = "\n".join(line for line in fill.text.split("\n") if not line.startswith("{"))
    return ToolsFit(specs=whole, listing=listing, fill=fill)
