"""Token budgets per model role: named sections with fixed allocations.

The defaults follow the reference systems (a ~5,000-token planner prompt, a ~1,500-token
executor prompt before its tools and knowledge, which are sent whole and grow their
sections when needed); ``Budgets.from_mapping`` applies per-section overrides from
settings and rejects names it does not know, so a typo in a config file fails at start-up
instead of silently keeping a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import get_args

from events import ModelRole

ROLES: tuple[ModelRole, ...] = get_args(ModelRole)
BUFFER = "buffer"  # headroom for estimation error: allocated, never filled


class BudgetConfigError(ValueError):
    """A budget override names an unknown role or section, or a bad token count.

    A ``ValueError``, so a pydantic validator that calls ``Budgets.from_mapping`` turns
    it into an ordinary settings validation error.
    """


@dataclass(frozen=True, slots=True)
class SectionBudget:
    """One section of a role's prompt and the tokens it may use."""

    name: str
    tokens: int


@dataclass(frozen=True, slots=True)
class RoleBudget:
    """The sections of one role's prompt, in prompt order."""

    role: ModelRole
    sections: tuple[SectionBudget, ...]

    @property
    def total(self) -> int:
        return sum(section.tokens for section in self.sections)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(section.name for section in self.sections)

    def tokens(self, section: str) -> int:
        """The allocation of ``section``; a ``KeyError`` names the role's sections."""
        for candidate in self.sections:
            if candidate.name == section:
                return candidate.tokens
        raise KeyError(f"{self.role} budget has no section {section!r}; it has {self.names}")

    def with_tokens(self, overrides: Mapping[str, int]) -> RoleBudget:
        """A copy with some sections re-allocated; unknown names raise BudgetConfigError."""
        unknown = sorted(set(overrides) - set(self.names))
        if unknown:
            raise BudgetConfigError(
                f"budgets.{self.role} has no section(s) {unknown}; "
                f"its sections are {list(self.names)}"
            )
        for name, tokens in overrides.items():
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise BudgetConfigError(
                    f"budgets.{self.role}.{name} must be a whole number of tokens >= 0, "
                    f"got {tokens!r}"
                )
        return replace(
            self,
            sections=tuple(
                SectionBudget(s.name, overrides.get(s.name, s.tokens)) for s in self.sections
            ),
        )

    def with_section(self, name: str, tokens: int) -> RoleBudget:
        """A copy with section ``name`` allocated ``tokens``, added before ``buffer`` when
        the role lacks it. For code that fills the section (an agent's user-data block
        in the executor's prompt), never for configuration, which only re-allocates."""
        if name in self.names:
            return self.with_tokens({name: tokens})
        sections = list(self.sections)
        at = self.names.index(BUFFER) if BUFFER in self.names else len(sections)
        sections.insert(at, SectionBudget(name, tokens))
        return replace(self, sections=tuple(sections))


def _role(role: ModelRole, **sections: int) -> RoleBudget:
    return RoleBudget(role, tuple(SectionBudget(name, tokens) for name, tokens in sections.items()))


# The planner's system section holds its rules (~450 tokens) and the whole catalogue, one
# line per tool (~25 tokens with the demo's summaries), so 3,000 tokens hold a 60- to
# 90-tool catalogue with summaries; past that tools are listed by name, never dropped
# (the section grows, reporting the overrun, if even the names do not fit).
PLANNER_BUDGET = _role(
    "planner", system=3_000, conversation=2_500, context=1_000, profile=300, buffer=400
)
# The executor's tools are sent whole (a granted tool is never taken away): 3,000 tokens
# hold the trainer agent's nine tools; more grow the section and report the overrun. The
# knowledge section holds the turn's loaded sources whole, likewise.
EXECUTOR_BUDGET = _role(
    "executor", system=300, task=200, tools=3_000, knowledge=4_000, data=400, buffer=200
)
# The merger sees step results, the turn's knowledge and enough recent conversation to
# answer in context.
MERGER_BUDGET = _role(
    "merger", system=400, conversation=1_000, knowledge=4_000, results=2_000, buffer=600
)
# The summariser reads the older history once, to replace it with a short summary.
SUMMARISER_BUDGET = _role("summariser", system=200, history=6_000, buffer=300)


@dataclass(frozen=True, slots=True)
class Budgets:
    """The budget of every role; build it once at start-up from settings."""

    planner: RoleBudget = PLANNER_BUDGET
    executor: RoleBudget = EXECUTOR_BUDGET
    merger: RoleBudget = MERGER_BUDGET
    summariser: RoleBudget = SUMMARISER_BUDGET

    @classmethod
    def from_mapping(cls, overrides: Mapping[str, Mapping[str, int]] | None = None) -> Budgets:
        """Defaults with per-role, per-section overrides, e.g. ``{"planner": {"conversation":
        3000}}`` (the shape of a ``dict[str, dict[str, int]]`` settings field)."""
        budgets = cls()
        for role, sections in (overrides or {}).items():
            if role not in ROLES:
                raise BudgetConfigError(
                    f"budgets has no role {role!r}; the roles are {list(ROLES)}"
                )
            budgets = replace(budgets, **{role: budgets.for_role(role).with_tokens(sections)})
        return budgets

    def for_role(self, role: ModelRole) -> RoleBudget:
        budget: RoleBudget = getattr(self, role)
        return budget

    def as_mapping(self) -> dict[str, dict[str, int]]:
        """Every role's allocations, in the shape ``from_mapping`` accepts."""
        return {role: {s.name: s.tokens for s in self.for_role(role).sections} for role in ROLES}
