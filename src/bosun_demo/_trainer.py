"""The trainer's tools (spec §6.4): generate a workout artifact, then swap, adjust or
remove its exercises (each a new version of the artifact), and log it when done.

The session's *current workout* is its latest ``workout`` artifact that is not logged:
it lives in the store, not in memory, so it survives restarts and other workers. An
exercise is named by its id (``ex_…``) or its order number (``"1"``).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import insert

from bosun_demo._common import ensure_org, new_id
from bosun_demo._tables import WorkoutRow
from bosun_demo._trainer_models import (
    Adjusted,
    AdjustIn,
    Exercise,
    ExerciseSpec,
    Generated,
    GenerateIn,
    Logged,
    LogIn,
    Removed,
    RemoveIn,
    SwapIn,
    Swapped,
    WorkoutPayload,
)
from store import ArtifactRecord, utcnow
from tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    create_artifact,
    record_audit,
    register_artifact_type,
    revise_artifact,
)

WORKOUT = register_artifact_type("workout", WorkoutPayload, schema_version="1")
WORKOUT_LOGGED = "workout.logged"
PROTECTED = frozenset({"id", "type", "exercise_type", "order"})
NOTIFY = "IMPORTANT: You MUST now call message_notify_user with artifact_id={id}"

toolset = ToolRegistry()


def _exercise_id() -> str:
    return f"ex_{uuid.uuid4().hex[:12]}"


def _numbered(exercises: list[Exercise]) -> list[Exercise]:
    return [e.model_copy(update={"order": i}) for i, e in enumerate(exercises, start=1)]


def _summary(payload: WorkoutPayload) -> str:
    names = ", ".join(f"{e.order}. {e.exercise_name}" for e in payload.exercises)
    return f"{payload.title}: {len(payload.exercises)} exercises ({names})"


async def _current(ctx: ToolContext) -> tuple[ArtifactRecord, WorkoutPayload]:
    """The session's current workout, or ``no_active_workout``."""
    record = None
    if ctx.session_id is not None:
        record = await ctx.store.artifacts.latest(ctx.session_id, WORKOUT.name)
    payload = None if record is None else WorkoutPayload.model_validate(record.payload)
    if record is None or payload is None or payload.status == "logged":
        raise ToolError(
            "no_active_workout",
            "This session has no active workout",
            hint="Create one with trainer.generate_workout first",
        )
    return record, payload


def _find(payload: WorkoutPayload, ref: str) -> int:
    """The index of the exercise ``ref`` names (its id, or its order number)."""
    for index, exercise in enumerate(payload.exercises):
        if exercise.id == ref or (ref.strip().isdigit() and exercise.order == int(ref)):
            return index
    known = ", ".join(f"{e.order}={e.id}" for e in payload.exercises)
    raise ToolError(
        "not_found",
        f"No exercise {ref!r} in the current workout",
        hint=f"Use an exercise id or order number: {known}",
    )


async def _save(
    ctx: ToolContext, record: ArtifactRecord, payload: WorkoutPayload
) -> ArtifactRecord:
    return await revise_artifact(
        ctx, record.id, title=payload.title, summary=_summary(payload), payload=payload
    )


def _then(record: ArtifactRecord) -> str:
    return f"{NOTIFY.format(id=record.id)} to show the user the updated workout."


@toolset.tool(
    name="trainer.generate_workout",
    summary="Generate a workout (reps/hold/duration/intervals exercises) as an artifact.",
    category="write",
    confirm="never",
)
async def generate_workout(args: GenerateIn, ctx: ToolContext) -> Generated:
    spec = args.workout
    exercises = [
        Exercise(**e.model_dump(), id=_exercise_id(), order=i)
        for i, e in enumerate(spec.exercises, start=1)
    ]
    payload = WorkoutPayload(title=spec.title, exercises=exercises, notes=spec.notes)
    record = await create_artifact(
        ctx, type=WORKOUT.name, title=spec.title, summary=_summary(payload), payload=payload
    )
    return Generated(
        artifact_id=record.id, version=record.version, exercise_count=len(exercises),
        summary=record.summary, next=f"{NOTIFY.format(id=record.id)} to deliver the workout.",
    )  # fmt: skip


@toolset.tool(
    name="trainer.swap_exercise",
    summary="Replace an exercise of the current workout (by id or order number) with another.",
    category="write",
    confirm="never",
)
async def swap_exercise(args: SwapIn, ctx: ToolContext) -> Swapped:
    record, payload = await _current(ctx)
    index = _find(payload, args.exercise_id)
    old = payload.exercises[index]
    new = Exercise(**args.new_exercise.model_dump(), id=_exercise_id(), order=old.order)
    exercises = [*payload.exercises[:index], new, *payload.exercises[index + 1 :]]
    saved = await _save(ctx, record, payload.model_copy(update={"exercises": exercises}))
    return Swapped(
        artifact_id=saved.id, version=saved.version, next=_then(saved),
        old_exercise=old.exercise_name, new_exercise=new.exercise_name, new_id=new.id,
    )  # fmt: skip


def _adjusted(old: Exercise, adjustments: dict[str, Any]) -> Exercise:
    """``old`` with ``adjustments`` applied and checked like a new exercise."""
    protected = sorted(PROTECTED & adjustments.keys())
    if protected:
        raise ToolError(
            "protected_field",
            f"adjust_exercise cannot change {', '.join(protected)}",
            hint="To change an exercise's type, use trainer.swap_exercise",
        )
    unknown = sorted(adjustments.keys() - ExerciseSpec.model_fields.keys())
    if unknown:
        raise ToolError("invalid_input", f"Exercises have no field {', '.join(unknown)}")
    try:
        return Exercise.model_validate({**old.model_dump(), **adjustments})
    except ValueError as exc:
        raise ToolError(
            "invalid_input", f"The adjusted exercise is not valid: {str(exc)[:300]}"
        ) from None


@toolset.tool(
    name="trainer.adjust_exercise",
    summary="Change fields of an exercise of the current workout (not its id or type).",
    category="write",
    confirm="never",
)
async def adjust_exercise(args: AdjustIn, ctx: ToolContext) -> Adjusted:
    record, payload = await _current(ctx)
    index = _find(payload, args.exercise_id)
    old = payload.exercises[index]
    new = _adjusted(old, args.adjustments)
    exercises = [*payload.exercises[:index], new, *payload.exercises[index + 1 :]]
    saved = await _save(ctx, record, payload.model_copy(update={"exercises": exercises}))
    before = old.model_dump(mode="json")
    return Adjusted(
        artifact_id=saved.id, version=saved.version, next=_then(saved),
        exercise_name=new.exercise_name, adjustments=args.adjustments,
        old_values={k: before.get(k) for k in args.adjustments},
    )  # fmt: skip


@toolset.tool(
    name="trainer.remove_exercise",
    summary="Remove an exercise (by id or order number) from the current workout.",
    category="write",
    confirm="never",
)
async def remove_exercise(args: RemoveIn, ctx: ToolContext) -> Removed:
    record, payload = await _current(ctx)
    index = _find(payload, args.exercise_id)
    if len(payload.exercises) == 1:
        raise ToolError(
            "last_exercise",
            "The workout's only exercise cannot be removed",
            hint="Swap it, or generate a new workout",
        )
    removed = payload.exercises[index]
    exercises = _numbered([*payload.exercises[:index], *payload.exercises[index + 1 :]])
    saved = await _save(ctx, record, payload.model_copy(update={"exercises": exercises}))
    return Removed(
        artifact_id=saved.id, version=saved.version, next=_then(saved),
        removed_exercise=removed.exercise_name, remaining_count=len(exercises),
    )  # fmt: skip


def _log_notes(payload: WorkoutPayload, args: LogIn) -> str:
    lines = []
    for done in args.completed_exercises:
        exercise = payload.exercises[_find(payload, done.exercise_id)]
        sets = "" if done.sets_done is None else f" ({done.sets_done} sets)"
        lines.append(f"{exercise.order}. {exercise.exercise_name}{sets}")
    if args.workout_notes:
        lines.append(args.workout_notes)
    return "\n".join(lines)


@toolset.tool(
    name="trainer.log_workout",
    summary="Log the completed exercises of the current workout to the history; ends it.",
    category="write",
    confirm="never",
    audit=WORKOUT_LOGGED,
)
async def log_workout(args: LogIn, ctx: ToolContext) -> Logged:
    record, payload = await _current(ctx)
    notes = _log_notes(payload, args)
    workout_id = new_id("wo")
    minutes = max(5, 5 * len(args.completed_exercises))
    async with ctx.store.db.write() as conn:
        await ensure_org(conn, ctx.org_id)
        now = utcnow()
        await conn.execute(
            insert(WorkoutRow).values(
                id=workout_id,
                org_id=ctx.org_id,
                title=payload.title[:200],
                scheduled_for=now,
                duration_min=minutes,
                notes=notes,
                created_at=now,
                updated_at=now,
            )
        )
        detail = {"artifact_id": record.id, "logged": len(args.completed_exercises)}
        await record_audit(conn, ctx, WORKOUT_LOGGED, target=f"workout:{workout_id}", detail=detail)
    done = payload.model_copy(update={"status": "logged", "logged_workout_id": workout_id})
    saved = await _save(ctx, record, done)
    return Logged(
        artifact_id=saved.id, version=saved.version, workout_id=workout_id,
        logged_count=len(args.completed_exercises), total_in_workout=len(payload.exercises),
        next="Tell the user it is logged with message_notify_user, then call idle.",
    )  # fmt: skip
