"""Small helpers shared by the demo tools, seeder and sources."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from bosun_demo._models import Workout
from bosun_demo._tables import MemberRow, ProgramRow, WorkoutRow
from store import OrgRow, utcnow
from tools import ToolError, UserRole

# Staff run the studio; a member (a client of the studio) may only read the catalogue.
STAFF: frozenset[UserRole] = frozenset({"owner", "staff"})

MEMBER_HINT = "Find the member's id with members.search"
PROGRAM_HINT = "Find the program's id with programs.list"
WORKOUT_HINT = "Workout ids appear in members.get and in the schedule"
SESSION_HINT = "Class session ids appear in the schedule"
TASK_HINT = "Find the task's id with tasks.list"

WORKOUT_COLUMNS = (
    WorkoutRow.id,
    WorkoutRow.title,
    WorkoutRow.duration_min,
    WorkoutRow.scheduled_for,
    WorkoutRow.member_id,
    WorkoutRow.program_id,
    WorkoutRow.notes,
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def workout_of(row: object) -> Workout:
    return Workout.model_validate(row, from_attributes=True)


def dialect_insert(conn: AsyncConnection) -> Callable[[Any], Any]:
    """The insert of ``conn``'s dialect, which has ``on_conflict_do_nothing``."""
    return pg_insert if conn.dialect.name == "postgresql" else sqlite_insert


async def ensure_org(conn: AsyncConnection, org_id: str) -> None:
    """Create the org row on first sight (orgs come from tokens), as sessions do."""
    await conn.execute(
        dialect_insert(conn)(OrgRow)
        .values(id=org_id, tier="lite", created_at=utcnow())
        .on_conflict_do_nothing(index_elements=["id"])
    )


async def check_refs(
    conn: AsyncConnection, org_id: str, *, member_id: str | None, program_id: str | None
) -> None:
    """Refuse references to rows that do not exist in this org (or exist in another)."""
    refs = (
        (MemberRow, member_id, "member", MEMBER_HINT),
        (ProgramRow, program_id, "program", PROGRAM_HINT),
    )
    for table, ref, kind, hint in refs:
        if ref is None:
            continue
        found = await conn.scalar(select(table.id).where(table.id == ref, table.org_id == org_id))
        if found is None:
            raise not_found(kind, ref, hint)


def not_found(kind: str, ref: str, hint: str) -> ToolError:
    return ToolError("not_found", f"No {kind} {ref!r} in this org", hint=hint)
