"""The budget report of one model call: allocated vs used tokens per section, and the cuts.

The turn persists it as an event and the budget report endpoint reads it back, so it
carries numbers and item keys only, never prompt text (which the log already holds once).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from context._budget import RoleBudget
from context._sections import Cut, SectionFill


@dataclass(frozen=True, kw_only=True, slots=True)
class SectionUsage:
    name: str
    allocated: int
    used: int


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetReport:
    """Per-section allocation and use for one call of ``role`` (and plan step, if any)."""

    role: str
    sections: tuple[SectionUsage, ...]
    total_allocated: int
    total_used: int
    cuts: tuple[Cut, ...] = ()
    step_id: str | None = None

    @classmethod
    def build(
        cls, budget: RoleBudget, fills: Iterable[SectionFill], *, step_id: str | None = None
    ) -> BudgetReport:
        """The report for ``fills`` against ``budget``; sections with no fill used nothing.

        A fill whose name is not a section of the role is a caller bug and raises.
        """
        by_name = {fill.name: fill for fill in fills}
        unknown = sorted(set(by_name) - set(budget.names))
        if unknown:
            raise ValueError(
                f"fills {unknown} are not sections of the {budget.role} budget {budget.names}"
            )
        sections = tuple(
            SectionUsage(
                name=s.name,
                allocated=s.tokens,
                used=by_name[s.name].used if s.name in by_name else 0,
            )
            for s in budget.sections
        )
        return cls(
            role=budget.role,
            sections=sections,
            total_allocated=budget.total,
            total_used=sum(s.used for s in sections),
            cuts=tuple(cut for s in budget.sections if s.name in by_name
                       for cut in by_name[s.name].cuts),
            step_id=step_id,
        )  # fmt: skip

    @property
    def within_budget(self) -> bool:
        return all(s.used <= s.allocated for s in self.sections)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the shape of the persisted event's payload): what
        ``asdict`` gives, written out (every model call's report goes through here, and
        ``asdict``'s generic deep copy cost more than the rest of the event)."""
        return {
            "role": self.role,
            "sections": tuple(
                {"name": s.name, "allocated": s.allocated, "used": s.used} for s in self.sections
            ),
            "total_allocated": self.total_allocated,
            "total_used": self.total_used,
            "cuts": tuple(
                {
                    "section": c.section,
                    "action": c.action,
                    "tokens_before": c.tokens_before,
                    "tokens_after": c.tokens_after,
                    "detail": c.detail,
                }
                for c in self.cuts
            ),
            "step_id": self.step_id,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetReport:
        """Read a persisted report back, validated (a ``pydantic.ValidationError`` if not)."""
        return _ADAPTER.validate_python(dict(data))


_ADAPTER: TypeAdapter[BudgetReport] = TypeAdapter(BudgetReport)
