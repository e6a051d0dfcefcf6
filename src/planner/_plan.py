"""The Plan: what the planner decides, as validated data (a plan is data, not code)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Strategy = Literal["simple", "tool", "complex"]


class SourcePick(BaseModel):
    """A context source to preload before execution, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="A source name from the catalogue.")
    why: str = Field(default="", max_length=300, description="Why this source is needed.")
    params: dict[str, Any] = Field(
        default_factory=dict, description='Source parameters, e.g. {"days_back": 7}.'
    )


class PlannedStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="Short id, e.g. s1.")
    goal: str = Field(min_length=1, max_length=600, description="What this step must achieve.")
    tools: list[str] = Field(default_factory=list, description="Tool names this step may use.")
    depends_on: list[str] = Field(
        default_factory=list, description="Ids of steps whose results this step needs."
    )
    max_tool_calls: int = Field(default=4, ge=1, description="Tool-call budget of this step.")


class Plan(BaseModel):
    """Triage and plan for one user turn.

    ``simple``: answer directly, no tools, no steps. ``tool``: exactly one step with the
    tools it needs. ``complex``: two or more steps with dependencies; independent steps
    run in parallel and a merge writes the answer.
    """

    model_config = ConfigDict(extra="forbid")

    strategy: Strategy
    reasoning: str = Field(max_length=600, description="One or two sentences: why this strategy.")
    sources: list[SourcePick] = Field(default_factory=list)
    steps: list[PlannedStep] = Field(default_factory=list)
    executors: int = Field(
        default=1, ge=1, description="How many steps may run at once (complex plans)."
    )


PLAN_SCHEMA: dict[str, Any] = Plan.model_json_schema()
