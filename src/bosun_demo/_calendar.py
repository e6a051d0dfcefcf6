"""Class sessions and tasks: schedule/cancel a class; list/create/complete/delete tasks.

Completing a done task or cancelling a cancelled class succeeds without a change (and
without an audit row), so a retried call is harmless.
"""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update

from bosun_demo._common import SESSION_HINT, STAFF, TASK_HINT, new_id, not_found
from bosun_demo._models import (
    ClassSession,
    SessionCancel,
    SessionSchedule,
    Task,
    TaskCreate,
    TaskDeleted,
    TaskList,
    TaskRef,
    Tasks,
)
from bosun_demo._tables import ClassSessionRow, TaskRow
from store import utcnow
from tools import Inverse, ToolContext, ToolError, ToolRegistry, record_audit

toolset = ToolRegistry()

SESSION_SCHEDULED = "class_session.scheduled"
SESSION_CANCELLED = "class_session.cancelled"
TASK_CREATED = "task.created"
TASK_COMPLETED = "task.completed"
TASK_DELETED = "task.deleted"

_SESSION_COLUMNS = (
    ClassSessionRow.id,
    ClassSessionRow.title,
    ClassSessionRow.coach,
    ClassSessionRow.starts_at,
    ClassSessionRow.duration_min,
    ClassSessionRow.capacity,
    ClassSessionRow.status,
)
_TASK_COLUMNS = (TaskRow.id, TaskRow.title, TaskRow.due_on, TaskRow.done, TaskRow.assignee)


@toolset.tool(
    name="class_sessions.schedule",
    summary="Put a new group class on the timetable (title, coach, start, length, capacity).",
    category="write",
    roles=STAFF,
    audit=SESSION_SCHEDULED,
    inverse=Inverse("class_sessions.cancel", lambda _args, out: {"session_id": out.id}),
)
async def schedule_session(args: SessionSchedule, ctx: ToolContext) -> ClassSession:
    now = utcnow()
    if args.starts_at <= now:
        raise ToolError(
            "invalid_time",
            f"starts_at {args.starts_at.isoformat()!r} is in the past (now {now.isoformat()})",
            hint="Use a future time with a UTC offset",
        )
    session = ClassSession(id=new_id("cls"), status="scheduled", **args.model_dump())
    async with ctx.store.db.write() as conn:
        await conn.execute(
            insert(ClassSessionRow).values(
                org_id=ctx.org_id, created_at=now, updated_at=now, **session.model_dump()
            )
        )
        await record_audit(
            conn,
            ctx,
            SESSION_SCHEDULED,
            target=f"class_session:{session.id}",
            detail=session.model_dump(mode="json"),
        )
    return session


@toolset.tool(
    name="class_sessions.cancel",
    summary="Cancel a scheduled class; the user confirms first.",
    category="destructive",
    roles=STAFF,
    audit=SESSION_CANCELLED,
)
async def cancel_session(args: SessionCancel, ctx: ToolContext) -> ClassSession:
    scope = (ClassSessionRow.id == args.session_id, ClassSessionRow.org_id == ctx.org_id)
    async with ctx.store.db.write() as conn:
        row = (await conn.execute(select(*_SESSION_COLUMNS).where(*scope))).first()
        if row is None:
            raise not_found("class session", args.session_id, SESSION_HINT)
        if row.status == "cancelled":
            return ClassSession.model_validate(row, from_attributes=True)
        row = (
            await conn.execute(
                update(ClassSessionRow)
                .where(*scope)
                .values(status="cancelled", updated_at=utcnow())
                .returning(*_SESSION_COLUMNS)
            )
        ).one()
        await record_audit(
            conn,
            ctx,
            SESSION_CANCELLED,
            target=f"class_session:{args.session_id}",
            detail={"title": row.title, "reason": args.reason},
        )
    return ClassSession.model_validate(row, from_attributes=True)


@toolset.tool(
    name="tasks.create",
    summary="Add a to-do for the studio team, with an optional due date and assignee.",
    category="write",
    roles=STAFF,
    audit=TASK_CREATED,
    inverse=Inverse("tasks.delete", lambda _args, out: {"task_id": out.id}),
)
async def create_task(args: TaskCreate, ctx: ToolContext) -> Task:
    task = Task(id=new_id("task"), done=False, **args.model_dump())
    now = utcnow()
    async with ctx.store.db.write() as conn:
        await conn.execute(
            insert(TaskRow).values(
                org_id=ctx.org_id, created_at=now, updated_at=now, **task.model_dump()
            )
        )
        await record_audit(
            conn, ctx, TASK_CREATED, target=f"task:{task.id}", detail=task.model_dump(mode="json")
        )
    return task


@toolset.tool(
    name="tasks.list",
    summary="List the team's open tasks (or completed ones), soonest due first.",
    category="read",
    confirm="never",
    roles=STAFF,
)
async def list_tasks(args: TaskList, ctx: ToolContext) -> Tasks:
    query = (
        select(*_TASK_COLUMNS)
        .where(TaskRow.org_id == ctx.org_id, TaskRow.done == args.done)
        .order_by(TaskRow.due_on.asc().nulls_last(), TaskRow.created_at, TaskRow.id)
        .limit(args.limit + 1)
    )
    rows = await ctx.store.db.run_read(lambda conn: conn.execute(query).all())
    tasks = [Task.model_validate(row, from_attributes=True) for row in rows[: args.limit]]
    return Tasks(tasks=tasks, more=len(rows) > args.limit)


@toolset.tool(
    name="tasks.complete",
    summary="Mark a task done.",
    category="write",
    roles=STAFF,
    audit=TASK_COMPLETED,
)
async def complete_task(args: TaskRef, ctx: ToolContext) -> Task:
    scope = (TaskRow.id == args.task_id, TaskRow.org_id == ctx.org_id)
    async with ctx.store.db.write() as conn:
        row = (await conn.execute(select(*_TASK_COLUMNS).where(*scope))).first()
        if row is None:
            raise not_found("task", args.task_id, TASK_HINT)
        if not row.done:
            await conn.execute(update(TaskRow).where(*scope).values(done=True, updated_at=utcnow()))
            await record_audit(
                conn, ctx, TASK_COMPLETED, target=f"task:{row.id}", detail={"title": row.title}
            )
    return Task.model_validate({**row._asdict(), "done": True})


@toolset.tool(
    name="tasks.delete",
    summary="Delete a task for good; the user confirms first.",
    category="destructive",
    roles=STAFF,
    audit=TASK_DELETED,
)
async def delete_task(args: TaskRef, ctx: ToolContext) -> TaskDeleted:
    async with ctx.store.db.write() as conn:
        row = (
            await conn.execute(
                delete(TaskRow)
                .where(TaskRow.id == args.task_id, TaskRow.org_id == ctx.org_id)
                .returning(TaskRow.id, TaskRow.title)
            )
        ).first()
        if row is None:
            raise not_found("task", args.task_id, TASK_HINT)
        await record_audit(
            conn, ctx, TASK_DELETED, target=f"task:{row.id}", detail={"title": row.title}
        )
    return TaskDeleted(id=row.id, title=row.title)
