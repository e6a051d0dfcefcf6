"""The data of section fitting: items offered, the cuts made, and the fitted result.

Plain frozen records, shared by the fitter, the sources, the conversation and the budget
report (which persists ``Cut`` as JSON, so its fields are public API).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "overrun": a section grew past its allocation for one call rather than take away
# capability (a granted tool, a tool name in the planner's catalogue, loaded knowledge).
CutAction = Literal["abbreviated", "truncated", "dropped", "compressed", "overrun"]
ItemForm = Literal["full", "short", "truncated"]
DropFrom = Literal["start", "end"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Item:
    """One piece of a section: its full text, an optional short form, and a key that
    names it in cut details (a tool name, a source name; never user text)."""

    full: str
    short: str | None = None
    key: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cut:
    """What fitting removed from a section, and the section's tokens before and after."""

    section: str
    action: CutAction
    tokens_before: int
    tokens_after: int
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SectionFill:
    """A fitted section: its text, and which items survived in which form.

    ``kept`` holds the indices of the input items still present, in input order;
    ``items`` and ``forms`` run parallel to it.
    """

    name: str
    allocated: int
    used: int
    text: str
    items: tuple[str, ...] = ()
    kept: tuple[int, ...] = ()
    forms: tuple[ItemForm, ...] = ()
    cuts: tuple[Cut, ...] = ()

    @property
    def cut(self) -> bool:
        return bool(self.cuts)
