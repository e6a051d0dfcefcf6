"""Triage, plans and source selection by a cheap planner model; planner-only dry runs."""

from planner._plan import PLAN_SCHEMA, Plan, PlannedStep, SourcePick, Strategy
from planner._planner import Catalogue, PlanOutcome, fallback_plan, make_plan
from planner._prompt import PLANNER_INSTRUCTIONS
from planner._validate import PlanLimits, clamp_plan, find_cycle, validate_plan

__all__ = [
    "PLANNER_INSTRUCTIONS",
    "PLAN_SCHEMA",
    "Catalogue",
    "Plan",
    "PlanLimits",
    "PlanOutcome",
    "PlannedStep",
    "SourcePick",
    "Strategy",
    "clamp_plan",
    "fallback_plan",
    "find_cycle",
    "make_plan",
    "validate_plan",
]
