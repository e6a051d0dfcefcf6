"""Workouts: create (undone by delete), patch, and delete (which the user confirms)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select, update

from bosun_demo._common import (
    STAFF,
    WORKOUT_COLUMNS,
    WORKOUT_HINT,
    check_refs,
    new_id,
    not_found,
    workout_of,
)
from bosun_demo._models import Workout, WorkoutCreate, WorkoutDeleted, WorkoutRef, WorkoutUpdate
from bosun_demo._tables import WorkoutRow
from store import utcnow
from tools import Inverse, ToolContext, ToolError, ToolRegistry, record_audit

toolset = ToolRegistry()

WORKOUT_CREATED = "workout.created"
WORKOUT_UPDATED = "workout.updated"
WORKOUT_DELETED = "workout.deleted"

# Columns that cannot hold NULL: an explicit null for them means "leave as is".
_REQUIRED = ("title", "duration_min", "notes")


@toolset.tool(
    name="workouts.create",
    summary="Create a workout, optionally for a member, in a program, at a time.",
    category="write",
    roles=STAFF,
    audit=WORKOUT_CREATED,
    inverse=Inverse("workouts.delete", lambda _args, out: {"workout_id": out.id}),
)
async def create_workout(args: WorkoutCreate, ctx: ToolContext) -> Workout:
    workout = Workout(id=new_id("wo"), **args.model_dump())
    async with ctx.store.db.write() as conn:
        await check_refs(conn, ctx.org_id, member_id=args.member_id, program_id=args.program_id)
        now = utcnow()
        await conn.execute(
            insert(WorkoutRow).values(
                org_id=ctx.org_id, created_at=now, updated_at=now, **workout.model_dump()
            )
        )
        await record_audit(
            conn,
            ctx,
            WORKOUT_CREATED,
            target=f"workout:{workout.id}",
            detail=workout.model_dump(mode="json"),
        )
    return workout


@toolset.tool(
    name="workouts.update",
    summary="Change a workout's title, time, duration, member, program or notes.",
    category="write",
    roles=STAFF,
    audit=WORKOUT_UPDATED,
)
async def update_workout(args: WorkoutUpdate, ctx: ToolContext) -> Workout:
    changes: dict[str, Any] = args.model_dump(exclude_unset=True, exclude={"workout_id"})
    changes = {k: v for k, v in changes.items() if v is not None or k not in _REQUIRED}
    if not changes:
        raise ToolError(
            "nothing_to_update",
            f"No change given for workout {args.workout_id!r}",
            hint="Pass at least one field to change",
        )
    scope = (WorkoutRow.id == args.workout_id, WorkoutRow.org_id == ctx.org_id)
    async with ctx.store.db.write() as conn:
        await check_refs(
            conn,
            ctx.org_id,
            member_id=changes.get("member_id"),
            program_id=changes.get("program_id"),
        )
        row = (
            await conn.execute(
                update(WorkoutRow)
                .where(*scope)
                .values(**changes, updated_at=utcnow())
                .returning(*WORKOUT_COLUMNS)
            )
        ).first()
        if row is None:
            raise not_found("workout", args.workout_id, WORKOUT_HINT)
        workout = workout_of(row)
        await record_audit(
            conn,
            ctx,
            WORKOUT_UPDATED,
            target=f"workout:{workout.id}",
            detail={"changes": args.model_dump(mode="json", include=set(changes))},
        )
    return workout


@toolset.tool(
    name="workouts.delete",
    summary="Delete a workout for good; the user confirms first.",
    category="destructive",
    roles=STAFF,
    audit=WORKOUT_DELETED,
)
async def delete_workout(args: WorkoutRef, ctx: ToolContext) -> WorkoutDeleted:
    async with ctx.store.db.write() as conn:
        row = (
            await conn.execute(
                select(*WORKOUT_COLUMNS).where(
                    WorkoutRow.id == args.workout_id, WorkoutRow.org_id == ctx.org_id
                )
            )
        ).first()
        if row is None:
            raise not_found("workout", args.workout_id, WORKOUT_HINT)
        await conn.execute(delete(WorkoutRow).where(WorkoutRow.id == args.workout_id))
        workout = workout_of(row)
        await record_audit(
            conn,
            ctx,
            WORKOUT_DELETED,
            target=f"workout:{workout.id}",
            detail=workout.model_dump(mode="json"),
        )
    return WorkoutDeleted(id=workout.id, title=workout.title)
