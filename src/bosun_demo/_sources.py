"""Context the planner can preload: who is asking, what is coming up, what changed lately.

Plain async fetchers returning JSON-able dicts; the context layer names, budgets and
formats them. Each reads one org only and returns at most ``limit`` rows per list, with
``truncated`` saying whether more existed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select

from bosun_demo._tables import ClassSessionRow, MemberRow, ProgramRow, TaskRow, WorkoutRow
from store import OrgRow, Store, utcnow
from tools import UserRole

MAX_DAYS = 60
MAX_LIMIT = 100


def _check(name: str, value: int, top: int) -> None:
    if not 1 <= value <= top:
        raise ValueError(f"{name} must be between 1 and {top}, not {value!r}")


def _json(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def _dicts(rows: Any, limit: int) -> tuple[list[dict[str, Any]], bool]:
    found = [{k: _json(v) for k, v in row._asdict().items()} for row in rows]
    return found[:limit], len(found) > limit


def _count(query: Select[Any]) -> Any:
    return query.with_only_columns(func.count()).scalar_subquery()


async def profile(
    store: Store, org_id: str, user_id: str, *, role: UserRole | None = None
) -> dict[str, Any]:
    """The caller and their studio at a glance: org tier and how much data it holds."""
    members = select(MemberRow.id).where(MemberRow.org_id == org_id)
    programs = select(ProgramRow.id).where(ProgramRow.org_id == org_id)
    tasks = select(TaskRow.id).where(TaskRow.org_id == org_id, TaskRow.done.is_(False))
    query = select(
        select(OrgRow.tier).where(OrgRow.id == org_id).scalar_subquery().label("tier"),
        _count(members).label("members"),
        _count(members.where(MemberRow.status == "active")).label("active_members"),
        _count(programs).label("programs"),
        _count(programs.where(ProgramRow.published.is_(True))).label("published_programs"),
        _count(tasks).label("open_tasks"),
    )
    async with store.db.read() as conn:
        row = (await conn.execute(query)).one()._asdict()
    return {
        "org": {"id": org_id, "tier": row.pop("tier")},
        "user": {"id": user_id, "role": role},
        "counts": row,
    }


async def member_card(store: Store, org_id: str, member_id: str) -> dict[str, Any]:
    """The member a page shows (the client context's ``member`` entity): who they are and
    their next scheduled workouts. ``member`` is ``None`` when the org has no such one."""
    columns = (MemberRow.id, MemberRow.first_name, MemberRow.last_name, MemberRow.email,
               MemberRow.status, MemberRow.notes)  # fmt: skip
    query = select(*columns).where(MemberRow.org_id == org_id, MemberRow.id == member_id)
    workouts = (
        select(WorkoutRow.id, WorkoutRow.title, WorkoutRow.scheduled_for)
        .where(
            WorkoutRow.org_id == org_id,
            WorkoutRow.member_id == member_id,
            WorkoutRow.scheduled_for >= utcnow(),
        )
        .order_by(WorkoutRow.scheduled_for, WorkoutRow.id)
        .limit(6)
    )
    async with store.db.read() as conn:
        row = (await conn.execute(query.limit(1))).first()
        upcoming, more = _dicts(await conn.execute(workouts), 5) if row else ([], False)
    member = None if row is None else {k: _json(v) for k, v in row._asdict().items()}
    return {"member": member, "upcoming_workouts": upcoming, "truncated": more}


UNITS = {"weight": "kg", "distance": "km"}
"""The studio's units (the demo tables hold no per-member preference): the metric ones."""


async def member_profile(store: Store, org_id: str, user_id: str) -> dict[str, Any]:
    """The member the caller is (the JWT user is the member: matched by id or email) and
    their units: the per-user data an agent's user-data block carries on every call."""
    columns = (MemberRow.id, MemberRow.first_name, MemberRow.last_name, MemberRow.status)
    is_caller = (MemberRow.id == user_id) | (MemberRow.email == user_id)
    query = select(*columns, MemberRow.notes).where(MemberRow.org_id == org_id, is_caller)
    async with store.db.read() as conn:
        row = (await conn.execute(query.limit(1))).first()
    member = None if row is None else {k: _json(v) for k, v in row._asdict().items()}
    return {"member": member, "units": UNITS}


async def schedule(
    store: Store,
    org_id: str,
    days_ahead: int = 7,
    *,
    now: datetime | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """Class sessions and scheduled workouts from now to ``days_ahead`` days out, soonest
    first (cancelled classes included, marked, so the model does not re-book them)."""
    _check("days_ahead", days_ahead, MAX_DAYS)
    _check("limit", limit, MAX_LIMIT)
    start = now or utcnow()
    end = start + timedelta(days=days_ahead)
    classes = (
        select(
            ClassSessionRow.id,
            ClassSessionRow.title,
            ClassSessionRow.coach,
            ClassSessionRow.starts_at,
            ClassSessionRow.duration_min,
            ClassSessionRow.capacity,
            ClassSessionRow.status,
        )
        .where(
            ClassSessionRow.org_id == org_id,
            ClassSessionRow.starts_at >= start,
            ClassSessionRow.starts_at < end,
        )
        .order_by(ClassSessionRow.starts_at, ClassSessionRow.id)
        .limit(limit + 1)
    )
    member_name = MemberRow.first_name + " " + MemberRow.last_name
    workouts = (
        select(
            WorkoutRow.id,
            WorkoutRow.title,
            WorkoutRow.scheduled_for,
            WorkoutRow.duration_min,
            WorkoutRow.member_id,
            member_name.label("member"),
        )
        .outerjoin(MemberRow, MemberRow.id == WorkoutRow.member_id)
        .where(
            WorkoutRow.org_id == org_id,
            WorkoutRow.scheduled_for >= start,
            WorkoutRow.scheduled_for < end,
        )
        .order_by(WorkoutRow.scheduled_for, WorkoutRow.id)
        .limit(limit + 1)
    )
    async with store.db.read() as conn:
        class_rows, more_classes = _dicts(await conn.execute(classes), limit)
        workout_rows, more_workouts = _dicts(await conn.execute(workouts), limit)
    return {
        "from": start.isoformat(),
        "to": end.isoformat(),
        "class_sessions": class_rows,
        "workouts": workout_rows,
        "truncated": more_classes or more_workouts,
    }


async def recent_activity(
    store: Store,
    org_id: str,
    days_back: int = 7,
    *,
    now: datetime | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """What changed in the last ``days_back`` days, newest first: audit entries (agent or
    human) and the workouts and tasks created."""
    _check("days_back", days_back, MAX_DAYS)
    _check("limit", limit, MAX_LIMIT)
    end = now or utcnow()
    since = end - timedelta(days=days_back)
    workouts = (
        select(WorkoutRow.id, WorkoutRow.title, WorkoutRow.member_id, WorkoutRow.created_at)
        .where(WorkoutRow.org_id == org_id, WorkoutRow.created_at.between(since, end))
        .order_by(WorkoutRow.created_at.desc(), WorkoutRow.id)
        .limit(limit + 1)
    )
    tasks = (
        select(TaskRow.id, TaskRow.title, TaskRow.due_on, TaskRow.done, TaskRow.created_at)
        .where(TaskRow.org_id == org_id, TaskRow.created_at.between(since, end))
        .order_by(TaskRow.created_at.desc(), TaskRow.id)
        .limit(limit + 1)
    )
    entries = await store.audit.recent(org_id, since=since, until=end, limit=limit + 1)
    audit_rows = [
        {
            "at": entry.created_at.isoformat(),
            "action": entry.action,
            "target": entry.target,
            "agent": entry.agent,
            "user_id": entry.user_id,
        }
        for entry in entries[:limit]
    ]
    more_audit = len(entries) > limit
    async with store.db.read() as conn:
        workout_rows, more_workouts = _dicts(await conn.execute(workouts), limit)
        task_rows, more_tasks = _dicts(await conn.execute(tasks), limit)
    return {
        "since": since.isoformat(),
        "audit": audit_rows,
        "workouts_created": workout_rows,
        "tasks_created": task_rows,
        "truncated": more_audit or more_workouts or more_tasks,
    }
