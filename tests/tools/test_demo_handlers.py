"""The demo tools' handlers against a real database (SQLite and PostgreSQL).

Handlers are called directly, as a runner would after validating the input: these tests
check what they read and write, the audit rows, and that one org never sees another's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from bosun_demo import demo_registry, seed_demo
from bosun_demo._tables import ProgramRow, WorkoutRow
from store import Store
from store._models import AuditLogRow, utcnow
from tools import ToolContext, ToolError

REGISTRY = demo_registry()


async def call(name: str, args: dict[str, Any], ctx: ToolContext) -> Any:
    tool = REGISTRY.get(name)
    assert tool.handler is not None
    return await tool.handler(tool.input_model.model_validate(args), ctx)


async def call_json(name: str, args: dict[str, Any], ctx: ToolContext) -> Any:
    out: BaseModel = await call(name, args, ctx)
    return out.model_dump(mode="json")


def ctx_for(store: Store, org: str = "acme", *, tool_use_id: str = "tu_1") -> ToolContext:
    return ToolContext(
        store=store, org_id=org, user_id="ada", role="owner", tool_use_id=tool_use_id
    )


@pytest.fixture
async def acme(store: Store) -> ToolContext:
    await seed_demo(store, "acme")
    return ctx_for(store)


async def audit_rows(store: Store, org: str = "acme") -> list[tuple[Any, ...]]:
    async with store.db.read() as conn:
        rows = await conn.execute(
            select(
                AuditLogRow.user_id,
                AuditLogRow.agent,
                AuditLogRow.action,
                AuditLogRow.target,
                AuditLogRow.tool_use_id,
            )
            .where(AuditLogRow.org_id == org)
            .order_by(AuditLogRow.created_at, AuditLogRow.id)
        )
        return [tuple(r) for r in rows]


async def member_id(ctx: ToolContext, query: str) -> str:
    found = await call("members.search", {"query": query}, ctx)
    assert len(found.members) == 1, found
    return str(found.members[0].id)


async def test_search_finds_both_sams_and_narrows_by_more_words(acme: ToolContext) -> None:
    found = await call_json("members.search", {"query": "sam"}, acme)
    assert [{k: v for k, v in m.items() if k != "id"} for m in found["members"]] == [
        {"name": "Sam Okafor", "email": "sam.okafor@example.com", "status": "active"},
        {"name": "Sam Rivera", "email": "sam.rivera@example.com", "status": "active"},
    ]
    assert found["more"] is False
    assert all(m["id"].startswith("mem_") for m in found["members"])

    async def names(args: dict[str, Any]) -> tuple[list[str], bool]:
        out = await call("members.search", args, acme)
        return [m.name for m in out.members], out.more

    assert await names({"query": "SAM  rivera"}) == (["Sam Rivera"], False)
    assert await names({"query": "garcia"}) == (["Elena García"], False)  # via the email
    assert await names({"query": "e", "limit": 2}) == (["Tom Becker", "Aisha Bello"], True)
    assert await names({"query": "a", "status": "paused"}) == (["Marcus Lee"], False)
    assert await names({"query": "100%_"}) == ([], False)  # LIKE wildcards are literal


async def test_get_member_with_latest_workouts(acme: ToolContext) -> None:
    sam = await member_id(acme, "sam rivera")
    detail = await call_json("members.get", {"member_id": sam}, acme)
    workouts = detail.pop("workouts")
    assert detail.pop("member_since")
    assert detail == {
        "id": sam,
        "first_name": "Sam",
        "last_name": "Rivera",
        "email": "sam.rivera@example.com",
        "phone": "+1 555 0101",
        "status": "active",
        "notes": "Training for a spring half marathon.",
    }
    assert [(w["title"], w["duration_min"], w["member_id"]) for w in workouts] == [
        ("Tempo run + core", 50, sam),
        ("Lower body strength", 60, sam),
    ]
    with pytest.raises(ToolError) as missing:
        await call("members.get", {"member_id": "mem_nope"}, acme)
    assert missing.value.as_dict() == {
        "code": "not_found",
        "message": "No member 'mem_nope' in this org",
        "hint": "Find the member's id with members.search",
    }


async def test_list_programs_and_bulk_publish(acme: ToolContext) -> None:
    listed = await call_json("programs.list", {}, acme)
    summary = [(p["name"], p["level"], p["published"]) for p in listed["programs"]]
    assert summary == [
        ("Competition Prep", "advanced", False),
        ("Foundations", "beginner", True),
        ("Strength Cycle", "intermediate", True),
    ]
    unpublished = await call("programs.list", {"published": False}, acme)
    assert [p.name for p in unpublished.programs] == ["Competition Prep"]
    ids = {p["name"]: p["id"] for p in listed["programs"]}

    both = [ids["Competition Prep"], ids["Foundations"]]
    out = await call("programs.publish_bulk", {"program_ids": both}, acme)
    assert [(p.name, p.published) for p in out.programs] == [
        ("Competition Prep", True),
        ("Foundations", True),
    ]
    assert out.changed == [ids["Competition Prep"]]
    with pytest.raises(ToolError, match=r"No program with id 'prg_x' in this org; nothing changed"):
        await call("programs.publish_bulk", {"program_ids": ["prg_x", ids["Foundations"]]}, acme)
    again = await call("programs.publish_bulk", {"program_ids": both}, acme)
    assert again.changed == []  # already published: nothing to do, nothing audited
    assert await audit_rows(acme.store) == [
        ("ada", True, "programs.published", "programs:1", "tu_1")
    ]


async def test_create_workout_then_its_inverse_deletes_it(acme: ToolContext) -> None:
    sam = await member_id(acme, "sam okafor")
    when = (utcnow() + timedelta(days=5)).replace(microsecond=0)
    args = {"title": "Rehab circuit", "member_id": sam, "scheduled_for": when.isoformat()}
    created = await call("workouts.create", args, acme)
    assert created.model_dump() == {
        "id": created.id,
        "title": "Rehab circuit",
        "duration_min": 60,
        "scheduled_for": when,
        "member_id": sam,
        "program_id": None,
        "notes": "",
    }
    detail = await call("members.get", {"member_id": sam}, acme)
    assert [w.title for w in detail.workouts] == ["Rehab circuit", "Knee-friendly conditioning"]

    tool = REGISTRY.get("workouts.create")
    assert tool.inverse is not None
    undo_input = tool.inverse.build(tool.input_model.model_validate(args), created)
    assert undo_input == {"workout_id": created.id}
    deleted = await call(tool.inverse.tool, undo_input, ctx_for(acme.store, tool_use_id="tu_2"))
    assert deleted.model_dump() == {"id": created.id, "title": "Rehab circuit", "deleted": True}
    async with acme.store.db.read() as conn:
        assert await conn.scalar(select(WorkoutRow.id).where(WorkoutRow.id == created.id)) is None
    target = f"workout:{created.id}"
    assert await audit_rows(acme.store) == [
        ("ada", True, "workout.created", target, "tu_1"),
        ("ada", True, "workout.deleted", target, "tu_2"),
    ]
    with pytest.raises(ToolError, match=r"No workout '.*' in this org"):
        await call("workouts.delete", undo_input, acme)


async def test_update_workout_patches_only_given_fields(acme: ToolContext) -> None:
    created = await call(
        "workouts.create",
        {"title": "Engine", "scheduled_for": "2030-01-02T07:00:00Z", "notes": "Bring a rope"},
        acme,
    )
    patch = {"workout_id": created.id, "title": None, "duration_min": 45, "scheduled_for": None}
    updated = await call_json("workouts.update", patch, acme)
    assert updated == {
        "id": created.id,
        "title": "Engine",  # null for a required field leaves it alone
        "duration_min": 45,
        "scheduled_for": None,  # null for a nullable field clears it
        "member_id": None,
        "program_id": None,
        "notes": "Bring a rope",
    }
    with pytest.raises(ToolError) as empty:
        await call("workouts.update", {"workout_id": created.id, "title": None}, acme)
    assert empty.value.code == "nothing_to_update"
    with pytest.raises(ToolError, match=r"No program 'prg_other' in this org"):
        await call("workouts.update", {"workout_id": created.id, "program_id": "prg_other"}, acme)
    async with acme.store.db.read() as conn:
        detail = await conn.scalar(
            select(AuditLogRow.detail).where(AuditLogRow.action == "workout.updated")
        )
    assert detail == {"changes": {"duration_min": 45, "scheduled_for": None}}


async def test_schedule_class_and_cancel_it_through_the_inverse(acme: ToolContext) -> None:
    starts = (utcnow() + timedelta(days=1)).replace(microsecond=0)
    args = {"title": "Kettlebell basics", "coach": "Jo Park", "starts_at": starts.isoformat()}
    session = await call_json("class_sessions.schedule", args, acme)
    assert session == {
        "id": session["id"],
        "title": "Kettlebell basics",
        "coach": "Jo Park",
        "starts_at": starts.isoformat().replace("+00:00", "Z"),
        "duration_min": 60,
        "capacity": 12,
        "status": "scheduled",
    }
    tool = REGISTRY.get("class_sessions.schedule")
    assert tool.inverse is not None and tool.output_model is not None
    output = tool.output_model.model_validate(session)
    undo_input = tool.inverse.build(tool.input_model.model_validate(args), output)
    assert undo_input == {"session_id": session["id"]}
    cancelled = await call(tool.inverse.tool, undo_input, acme)
    assert cancelled.status == "cancelled"
    again = await call("class_sessions.cancel", undo_input, acme)  # a retry changes nothing
    assert again == cancelled
    assert [row[2] for row in await audit_rows(acme.store)] == [
        "class_session.scheduled",
        "class_session.cancelled",
    ]
    past = {**args, "starts_at": "2020-01-01T10:00:00+00:00"}
    with pytest.raises(ToolError) as too_late:
        await call("class_sessions.schedule", past, acme)
    assert (too_late.value.code, too_late.value.hint) == (
        "invalid_time",
        "Use a future time with a UTC offset",
    )


async def test_tasks_create_list_complete_delete(acme: ToolContext) -> None:
    task = await call_json("tasks.create", {"title": "Fix the rower", "due_on": "2030-01-01"}, acme)
    assert task == {
        "id": task["id"],
        "title": "Fix the rower",
        "due_on": "2030-01-01",
        "done": False,
        "assignee": None,
    }
    open_tasks = await call("tasks.list", {}, acme)
    assert [t.title for t in open_tasks.tasks] == [
        "Call Marcus Lee about pausing his membership",
        "Finish the Competition Prep program",
        "Order four 16 kg kettlebells",
        "Fix the rower",
    ]
    done = await call("tasks.complete", {"task_id": task["id"]}, acme)
    assert (done.id, done.done) == (task["id"], True)
    await call("tasks.complete", {"task_id": task["id"]}, acme)  # idempotent
    finished = await call("tasks.list", {"done": True}, acme)
    assert [t.title for t in finished.tasks] == [
        "Review Sam Okafor's rehab plan with the physio",
        "Fix the rower",
    ]
    removed = await call_json("tasks.delete", {"task_id": task["id"]}, acme)
    assert removed == {"id": task["id"], "title": "Fix the rower", "deleted": True}
    target = f"task:{task['id']}"
    assert await audit_rows(acme.store) == [
        ("ada", True, "task.created", target, "tu_1"),
        ("ada", True, "task.completed", target, "tu_1"),
        ("ada", True, "task.deleted", target, "tu_1"),
    ]


async def test_one_org_never_sees_or_touches_anothers_rows(acme: ToolContext) -> None:
    other = ctx_for(acme.store, "globex")
    sam = await member_id(acme, "sam rivera")
    workout = await call("workouts.create", {"title": "Acme only"}, acme)
    task = await call("tasks.create", {"title": "Acme only"}, acme)
    async with acme.store.db.read() as conn:
        program = await conn.scalar(select(ProgramRow.id).where(ProgramRow.org_id == "acme"))

    assert (await call("members.search", {"query": "sam"}, other)).members == []
    assert (await call("programs.list", {}, other)).programs == []
    assert (await call("tasks.list", {}, other)).tasks == []
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("members.get", {"member_id": sam}),
        ("workouts.create", {"title": "x", "member_id": sam}),
        ("workouts.create", {"title": "x", "program_id": program}),
        ("workouts.update", {"workout_id": workout.id, "title": "hijacked"}),
        ("workouts.delete", {"workout_id": workout.id}),
        ("tasks.complete", {"task_id": task.id}),
        ("tasks.delete", {"task_id": task.id}),
        ("programs.publish_bulk", {"program_ids": [program]}),
    ]
    codes = []
    for name, args in attempts:
        with pytest.raises(ToolError) as refused:
            await call(name, args, other)
        codes.append(refused.value.code)
    assert codes == ["not_found"] * len(attempts)
    async with acme.store.db.read() as conn:
        title = await conn.scalar(select(WorkoutRow.title).where(WorkoutRow.id == workout.id))
    assert title == "Acme only"
    assert await audit_rows(acme.store, "globex") == []
