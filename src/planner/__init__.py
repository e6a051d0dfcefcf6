"""Triage, plans and source selection by a cheap planner model; planner-only dry runs."""

from planner._dry_run import DryRun, dry_run
from planner._estimate import CostEstimate, estimate_execution
from planner._plan import PLAN_SCHEMA, Plan, PlannedStep, SourcePick, Strategy
from planner._planner import Catalogue, Planning, PlanOutcome, fallback_plan, make_plan
from planner._prompt import PLANNER_INSTRUCTIONS
from planner._validate import PlanLimits, clamp_plan, find_cycle, validate_plan

__all__ = [
    "PLANNER_INSTRUCTIONS",
    "PLAN_SCHEMA",
    "Catalogue",
    "CostEstimate",
    "DryRun",
    "Plan",
    "PlanLimits",
    "PlanOutcome",
    "PlannedStep",
    "Planning",
    "SourcePick",
    "Strategy",
    "clamp_plan",
    "dry_run",
    "estimate_execution",
    "fallback_plan",
    "find_cycle",
    "make_plan",
    "validate_plan",
]
