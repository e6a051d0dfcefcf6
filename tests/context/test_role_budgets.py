"""Per-role budgets: the defaults, and overrides validated the way settings will use them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from context import EXECUTOR_BUDGET, PLANNER_BUDGET, BudgetConfigError, Budgets
from context._budget import SectionBudget


def test_defaults_follow_the_reference_allocations() -> None:
    assert Budgets().as_mapping() == {
        "planner": {
            "system": 3_000,
            "conversation": 2_500,
            "context": 1_000,
            "profile": 300,
            "buffer": 400,
        },
        "executor": {
            "system": 300,
            "task": 200,
            "tools": 3_000,
            "knowledge": 4_000,
            "data": 400,
            "buffer": 200,
        },
        "merger": {
            "system": 400,
            "conversation": 1_000,
            "knowledge": 4_000,
            "results": 2_000,
            "buffer": 600,
        },
        "summariser": {"system": 200, "history": 6_000, "buffer": 300},
    }
    assert PLANNER_BUDGET.total == 7_200
    assert EXECUTOR_BUDGET.total == 8_100
    assert Budgets().merger.total == 8_000
    assert Budgets().summariser.total == 6_500
    assert PLANNER_BUDGET.sections[0] == SectionBudget("system", 3_000)


def test_overrides_change_only_what_they_name() -> None:
    budgets = Budgets.from_mapping({"planner": {"conversation": 3_000}, "executor": {"tools": 0}})
    assert budgets.planner.tokens("conversation") == 3_000
    assert budgets.planner.total == 7_700
    assert budgets.executor.tokens("tools") == 0
    assert budgets.merger == Budgets().merger
    assert budgets.planner.names == PLANNER_BUDGET.names  # order kept
    assert Budgets.from_mapping(budgets.as_mapping()) == budgets
    assert Budgets.from_mapping(None) == Budgets() == Budgets.from_mapping({})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"planer": {"system": 1}}, r"no role 'planer'; the roles are \['planner', 'executor'"),
        ({"planner": {"histroy": 1}}, r"budgets.planner has no section\(s\) \['histroy'\]"),
        ({"executor": {"tools": -1}}, r"budgets.executor.tools must be a whole number.*-1"),
        ({"executor": {"tools": True}}, r"got True"),
        ({"executor": {"tools": "400"}}, r"got '400'"),
    ],
)
def test_bad_overrides_are_refused_clearly(overrides: Any, message: str) -> None:
    with pytest.raises(BudgetConfigError, match=message):
        Budgets.from_mapping(overrides)


def test_unknown_section_lookup_names_the_sections() -> None:
    with pytest.raises(KeyError, match=r"planner budget has no section 'tools'"):
        PLANNER_BUDGET.tokens("tools")


class _Settings(BaseModel):
    """The shape the composition root's settings can use."""

    budgets: dict[str, dict[str, int]] = {}

    @field_validator("budgets")
    @classmethod
    def _valid(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        Budgets.from_mapping(value)
        return value


def test_a_settings_model_turns_bad_budgets_into_a_validation_error() -> None:
    settings = _Settings.model_validate({"budgets": {"planner": {"conversation": 3000}}})
    assert Budgets.from_mapping(settings.budgets).planner.tokens("conversation") == 3_000
    with pytest.raises(ValidationError, match="no section"):
        _Settings.model_validate({"budgets": {"planner": {"nope": 1}}})
