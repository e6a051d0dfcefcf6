"""Sections that grow rather than take away capability.

A budget may cut data, never capability: a tool a step is granted is sent whole, the
planner sees every tool's name, and knowledge loaded for the turn reaches the calls that
need it. When what must be sent exceeds the section, the section grows for that call and
the fill carries an ``overrun`` cut, so the budget report says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from context._fit import OMITTED_MARKER, fit_section
from context._sections import Cut, Item, SectionFill
from context._tokens import TokenCounter


def fit_growing(
    name: str,
    allocation: int,
    items: Sequence[Item],
    *,
    floor: str,
    why: str,
    counter: TokenCounter,
    note: str = "",
    separator: str = "\n\n",
    omitted: str = OMITTED_MARKER,
) -> SectionFill:
    """Fit ``items`` into ``allocation``, or into what ``floor`` (the section's least
    acceptable text, rendered) takes when that is more. The fill keeps ``allocated`` at the
    configured allocation; a growth adds an ``overrun`` cut, first, saying ``why``."""
    needed = counter.count(floor) if floor else 0
    if needed <= allocation:
        return fit_section(
            name, allocation, items, counter=counter, note=note, separator=separator,
            omitted=omitted,
        )  # fmt: skip
    fill = fit_section(
        name, needed, items, counter=counter, note=note, separator=separator, omitted=omitted
    )
    grown = Cut(
        section=name,
        action="overrun",
        tokens_before=allocation,
        tokens_after=fill.used,
        detail=f"section grew from {allocation:,} to {fill.used:,} tokens: {why}",
    )
    return replace(fill, allocated=allocation, cuts=(grown, *fill.cuts))


def fit_whole(
    name: str, allocation: int, items: Sequence[Item], *, why: str, counter: TokenCounter,
    separator: str = "\n\n",
) -> SectionFill:  # fmt: skip
    """Every item of ``items`` in full: the section grows past ``allocation`` if needed."""
    floor = separator.join(item.full for item in items)
    whole = [Item(full=item.full, key=item.key) for item in items]
    return fit_growing(
        name, allocation, whole, floor=floor, why=why, counter=counter, separator=separator
    )
