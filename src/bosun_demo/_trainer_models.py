"""The trainer's workout (spec §6.4): four exercise types, groups, muscle and goal shares.

One flat exercise model with a per-type check (rather than a union) so that
``adjust_exercise`` can merge a few changed fields into an exercise and validate the
result the same way ``generate_workout`` validated the original.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

ExerciseType = Literal["reps", "hold", "duration", "intervals"]
GroupType = Literal["circuit", "superset", "giant_set", "warmup", "cooldown", "sequence"]
ValidMuscle = Literal[
    "Chest", "Back", "Shoulders", "Biceps", "Triceps", "Abs", "Lower Back", "Quadriceps",
    "Hamstrings", "Glutes", "Calves", "Trapezius", "Abductors", "Adductors", "Forearms", "Neck",
]  # fmt: skip

REQUIRED: dict[str, tuple[str, ...]] = {
    "reps": ("sets", "reps", "rest_sec"),
    "hold": ("sets", "hold_sec", "rest_sec"),
    "duration": ("duration_min",),
    "intervals": ("rounds", "work_sec", "rest_sec"),
}
OPTIONAL: dict[str, tuple[str, ...]] = {
    "reps": ("load_each", "load_unit"),
    "hold": (),
    "duration": ("distance", "distance_unit", "target_pace"),
    "intervals": (),
}
TYPE_FIELDS = frozenset(f for fields in (*REQUIRED.values(), *OPTIONAL.values()) for f in fields)
SHARE_SLACK = 0.1  # shares must sum to 1 within this


class MuscleShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    muscle: ValidMuscle
    share: float = Field(gt=0, le=1)


class GoalShare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=50, description="e.g. strength, endurance")
    share: float = Field(gt=0, le=1)


class ExerciseGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=40, description="e.g. superset-1")
    type: GroupType
    position: int = Field(ge=1, description="Order within the group, 1-indexed.")
    name: str | None = Field(default=None, max_length=100, description="First exercise only.")
    rounds: int | None = Field(default=None, ge=1, le=20, description="First exercise only.")
    rest_between_rounds_sec: int | None = Field(default=None, ge=0, le=600)


def _sums_to_one(shares: list[MuscleShare] | list[GoalShare], what: str) -> None:
    total = sum(s.share for s in shares)
    if abs(total - 1.0) > SHARE_SLACK:
        raise ValueError(f"{what} shares must sum to about 1.0, not {total:.2f}")


def _compact_schema() -> dict[str, Any]:
    """The exercise's schema as the model sees it: pydantic's spelling of this model (every
    optional field an ``anyOf`` with null, each bound repeated) is ~1,300 tokens; this says
    the same per-type rules in ~450, and the server validates the full model anyway."""
    integer, number, text = {"type": "integer"}, {"type": "number"}, {"type": "string"}

    def items(schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "array", "items": schema}

    def share(key: str, value: dict[str, Any]) -> dict[str, Any]:
        return items({"type": "object", "properties": {key: value, "share": number}})

    group = {
        "type": "object",
        "description": "name, rounds, rest_between_rounds_sec: on the group's first exercise",
        "properties": {
            "id": text, "type": {"enum": list(get_args(GroupType))}, "position": integer,
            "name": text, "rounds": integer, "rest_between_rounds_sec": integer,
        },
        "required": ["id", "type", "position"],
    }  # fmt: skip
    return {
        "type": "object",
        "description": (
            "reps: sets, reps[], rest_sec (+ load_each[], load_unit). hold: sets, hold_sec[], "
            "rest_sec. duration: duration_min (+ distance, distance_unit, target_pace). "
            "intervals: rounds, work_sec, rest_sec. Shares each sum to 1."
        ),
        "properties": {
            "exercise_name": text, "exercise_type": {"enum": list(get_args(ExerciseType))},
            "muscles_utilized": share("muscle", {"enum": list(get_args(ValidMuscle))}),
            "goals_addressed": share("goal", text), "reasoning": text,
            "sets": integer, "reps": items(integer), "rest_sec": integer,
            "load_each": items(number), "load_unit": {"enum": ["kg", "lb"]},
            "hold_sec": items(integer), "duration_min": number, "distance": number,
            "distance_unit": {"enum": ["km", "mi", "m"]}, "target_pace": text,
            "rounds": integer, "work_sec": integer, "group": group,
        },
        "required": [
            "exercise_name", "exercise_type", "muscles_utilized", "goals_addressed", "reasoning",
        ],
        "additionalProperties": False,
    }  # fmt: skip


class ExerciseSpec(BaseModel):
    """An exercise as the model writes it: the common fields, the fields of its type."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _compact_schema()

    exercise_name: str = Field(min_length=1, max_length=100)
    exercise_type: ExerciseType
    muscles_utilized: list[MuscleShare] = Field(min_length=1, max_length=8)
    goals_addressed: list[GoalShare] = Field(min_length=1, max_length=6)
    reasoning: str = Field(min_length=1, max_length=500)
    sets: int | None = Field(default=None, ge=1, le=20)
    reps: list[int] | None = Field(default=None, min_length=1, max_length=20)
    rest_sec: int | None = Field(default=None, ge=0, le=600)
    load_each: list[float] | None = Field(default=None, min_length=1, max_length=20)
    load_unit: Literal["kg", "lb"] | None = None
    hold_sec: list[int] | None = Field(default=None, min_length=1, max_length=20)
    duration_min: float | None = Field(default=None, gt=0, le=300)
    distance: float | None = Field(default=None, gt=0)
    distance_unit: Literal["km", "mi", "m"] | None = None
    target_pace: str | None = Field(default=None, max_length=40)
    rounds: int | None = Field(default=None, ge=1, le=50)
    work_sec: int | None = Field(default=None, ge=1, le=600)
    group: ExerciseGroup | None = None

    @model_validator(mode="after")
    def _fits_its_type(self) -> ExerciseSpec:
        kind = self.exercise_type
        missing = [f for f in REQUIRED[kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {kind} exercise needs {', '.join(missing)}")
        allowed = {*REQUIRED[kind], *OPTIONAL[kind]}
        foreign = sorted(f for f in TYPE_FIELDS - allowed if getattr(self, f) is not None)
        if foreign:
            raise ValueError(f"a {kind} exercise has no {', '.join(foreign)}")
        _sums_to_one(self.muscles_utilized, "muscle")
        _sums_to_one(self.goals_addressed, "goal")
        return self


class Exercise(ExerciseSpec):
    """An exercise of a stored workout: with its id and its 1-indexed place."""

    id: str = Field(pattern=r"^ex_[0-9a-f]{8,32}$")
    order: int = Field(ge=1)


class WorkoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=120, description="e.g. Quick chest workout")
    exercises: list[ExerciseSpec] = Field(min_length=1, max_length=30, description="In order.")
    notes: str | None = Field(default=None, max_length=1000)


class WorkoutPayload(BaseModel):
    """The ``workout`` artifact's payload (schema version 1). ``status`` ``logged``: done
    and recorded by ``log_workout``, so it is no longer the session's current workout."""

    title: str
    exercises: list[Exercise] = Field(min_length=1, max_length=30)
    notes: str | None = None
    status: Literal["active", "logged"] = "active"
    logged_workout_id: str | None = None


# tool inputs and outputs


class GenerateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workout: WorkoutSpec


class ExerciseRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exercise_id: str = Field(
        min_length=1, max_length=40, description="The exercise's id (ex_…) or order number ('1')."
    )


class SwapIn(ExerciseRef):
    new_exercise: ExerciseSpec
    reason: str | None = Field(default=None, max_length=300)


class AdjustIn(ExerciseRef):
    adjustments: dict[str, Any] = Field(
        min_length=1, description="Fields to change, e.g. {'sets': 4, 'reps': [8, 8, 8, 8]}."
    )


class RemoveIn(ExerciseRef):
    reason: str | None = Field(default=None, max_length=300)


class CompletedExercise(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exercise_id: str = Field(min_length=1, max_length=40, description="Id or order number.")
    sets_done: int | None = Field(default=None, ge=0, le=50)
    notes: str | None = Field(default=None, max_length=300)


class LogIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    completed_exercises: list[CompletedExercise] = Field(min_length=1, max_length=30)
    workout_notes: str | None = Field(default=None, max_length=1000)


class Revised(BaseModel):
    """Every trainer result: the artifact (and version) it made, and what to do next."""

    success: bool = True
    artifact_id: str
    version: int
    next: str


class Generated(Revised):
    exercise_count: int
    summary: str


class Swapped(Revised):
    old_exercise: str
    new_exercise: str
    new_id: str


class Adjusted(Revised):
    exercise_name: str
    adjustments: dict[str, Any]
    old_values: dict[str, Any]


class Removed(Revised):
    removed_exercise: str
    remaining_count: int


class Logged(Revised):
    logged_count: int
    total_in_workout: int
    workout_id: str
