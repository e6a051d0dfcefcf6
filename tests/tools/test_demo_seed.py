"""Seeding the demo studio: realistic, idempotent, one org's rows only."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime

from sqlalchemy import delete, func, select, update

from bosun_demo import restore_demo, seed_demo, seed_id
from bosun_demo._tables import ClassSessionRow, MemberRow, ProgramRow, TaskRow, WorkoutRow
from store import Store
from store._models import OrgRow

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
TABLES = (MemberRow, ProgramRow, WorkoutRow, ClassSessionRow, TaskRow)


async def _counts(store: Store, org_id: str) -> dict[str, int]:
    async with store.db.read() as conn:
        return {
            table.__tablename__: await conn.scalar(
                select(func.count()).select_from(table).where(table.org_id == org_id)
            )
            or 0
            for table in TABLES
        }


async def test_seed_gives_an_org_a_small_studio_once(store: Store) -> None:
    assert await seed_demo(store, "acme", now=NOW) is True
    assert await seed_demo(store, "acme", now=NOW) is False
    counts = {"members": 8, "programs": 3, "workouts": 5, "class_sessions": 6, "tasks": 4}
    assert await _counts(store, "acme") == counts

    async with store.db.read() as conn:
        members = (
            await conn.execute(
                select(MemberRow.first_name, MemberRow.last_name, MemberRow.email, MemberRow.status)
                .where(MemberRow.org_id == "acme")
                .order_by(MemberRow.last_name)
            )
        ).all()
        classes = (
            await conn.execute(
                select(ClassSessionRow.title, ClassSessionRow.coach, ClassSessionRow.starts_at)
                .where(ClassSessionRow.org_id == "acme")
                .order_by(ClassSessionRow.starts_at)
            )
        ).all()
        tasks = (
            await conn.execute(
                select(TaskRow.title, TaskRow.due_on, TaskRow.done).order_by(TaskRow.title)
            )
        ).all()
        tier = await conn.scalar(select(OrgRow.tier).where(OrgRow.id == "acme"))
    assert [tuple(m) for m in members] == [
        ("Tom", "Becker", "tom.becker@example.com", "cancelled"),
        ("Aisha", "Bello", "aisha.bello@example.com", "active"),
        ("Dani", "Cohen", "dani.cohen@example.com", "active"),
        ("Elena", "García", "elena.garcia@example.com", "active"),
        ("Marcus", "Lee", "marcus.lee@example.com", "paused"),
        ("Priya", "Natarajan", "priya.natarajan@example.com", "active"),
        ("Sam", "Okafor", "sam.okafor@example.com", "active"),
        ("Sam", "Rivera", "sam.rivera@example.com", "active"),
    ]
    assert [m.first_name for m in members].count("Sam") == 2
    assert [tuple(c) for c in classes] == [
        ("Morning HIIT", "Jo Park", datetime(2026, 3, 3, 7, tzinfo=UTC)),
        ("Olympic lifting", "Luis Ortega", datetime(2026, 3, 3, 18, tzinfo=UTC)),
        ("Mobility flow", "Mina Sato", datetime(2026, 3, 4, 12, tzinfo=UTC)),
        ("Strength club", "Luis Ortega", datetime(2026, 3, 5, 18, tzinfo=UTC)),
        ("Morning HIIT", "Jo Park", datetime(2026, 3, 6, 7, tzinfo=UTC)),
        ("Open gym", "Mina Sato", datetime(2026, 3, 8, 10, tzinfo=UTC)),
    ]
    assert [tuple(t) for t in tasks] == [
        ("Call Marcus Lee about pausing his membership", date(2026, 3, 4), False),
        ("Finish the Competition Prep program", date(2026, 3, 7), False),
        ("Order four 16 kg kettlebells", date(2026, 3, 9), False),
        ("Review Sam Okafor's rehab plan with the physio", date(2026, 3, 1), True),
    ]
    assert tier == "lite"  # the org row is created on first sight, as sessions do


async def test_each_org_gets_its_own_rows_and_concurrent_seeds_insert_once(store: Store) -> None:
    results = await asyncio.gather(*(seed_demo(store, org) for org in ["a", "a", "a", "b"]))
    assert sorted(results[:3]) == [False, False, True]
    assert results[3] is True
    expected = {"members": 8, "programs": 3, "workouts": 5, "class_sessions": 6, "tasks": 4}
    assert await _counts(store, "a") == expected
    assert await _counts(store, "b") == expected
    async with store.db.read() as conn:
        # Every workout points at a member and program of its own org.
        crossed = await conn.scalar(
            select(func.count())
            .select_from(WorkoutRow)
            .join(MemberRow, MemberRow.id == WorkoutRow.member_id, isouter=True)
            .join(ProgramRow, ProgramRow.id == WorkoutRow.program_id, isouter=True)
            .where(
                (MemberRow.org_id != WorkoutRow.org_id) | (ProgramRow.org_id != WorkoutRow.org_id)
            )
        )
    assert crossed == 0


async def test_restore_puts_back_only_the_seeded_rows_an_org_lost(store: Store) -> None:
    """What ``serve --dev`` runs at each start: a demo turn deleted the seeded "Engine
    builder" workout and a member; they come back, and what the user changed or added
    stays as it is (restoring twice inserts nothing)."""
    assert await restore_demo(store, "acme", now=NOW) == 26  # an empty org: all of it
    engine, sam = seed_id("acme", "wo", 4), seed_id("acme", "mem", 0)
    async with store.db.write() as conn:
        await conn.execute(delete(WorkoutRow).where(WorkoutRow.id == engine))
        await conn.execute(delete(MemberRow).where(MemberRow.id == sam))
        await conn.execute(
            update(ProgramRow).where(ProgramRow.org_id == "acme").values(description="mine")
        )
    assert await seed_demo(store, "acme", now=NOW) is False  # seeding alone never restores

    assert await restore_demo(store, "acme", now=NOW) == 2
    assert await restore_demo(store, "acme", now=NOW) == 0
    async with store.db.read() as conn:
        title = await conn.scalar(select(WorkoutRow.title).where(WorkoutRow.id == engine))
        kept = set(await conn.scalars(select(ProgramRow.description)))
        sams = await conn.scalar(
            select(func.count()).select_from(WorkoutRow).where(WorkoutRow.member_id == sam)
        )
    assert title == "Engine builder"
    assert kept == {"mine"}
    assert sams == 0  # Sam's workouts lost him when he was deleted: rows left as they are
    assert await _counts(store, "acme") == {
        "members": 8, "programs": 3, "workouts": 5, "class_sessions": 6, "tasks": 4,
    }  # fmt: skip
