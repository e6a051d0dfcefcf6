"""A small, realistic fitness studio for an org, so the demo tools have something to find.

Two members share a first name (Sam Rivera, Sam Okafor) so "book Sam" needs the user
picker. Times are relative to ``now``: the classes are always upcoming. Ids are stable
per org (``seed_id``), so a scripted demo can name a seeded record.
"""

from __future__ import annotations

import hashlib
import unicodedata
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bosun_demo._common import dialect_insert, ensure_org
from bosun_demo._tables import ClassSessionRow, MemberRow, ProgramRow, TaskRow, WorkoutRow
from store import OrgRow, Store, utcnow

# first, last, status, phone, notes
MEMBERS = (
    ("Sam", "Rivera", "active", "+1 555 0101", "Training for a spring half marathon."),
    ("Sam", "Okafor", "active", "+1 555 0102", "Knee rehab: no deep lunges until cleared."),
    ("Dani", "Cohen", "active", None, None),
    ("Priya", "Natarajan", "active", "+1 555 0104", "Prefers early mornings."),
    ("Marcus", "Lee", "paused", None, "Travelling until next month."),
    ("Elena", "García", "active", "+1 555 0106", None),
    ("Tom", "Becker", "cancelled", None, "Moved away."),
    ("Aisha", "Bello", "active", None, "New member: book an intro session."),
)
# name, level, published, description
PROGRAMS = (
    ("Foundations", "beginner", True, "Six weeks of movement basics and barbell technique."),
    ("Strength Cycle", "intermediate", True, "A 12-week linear strength progression."),
    ("Competition Prep", "advanced", False, "Peaking block for the spring throwdown."),
)
# title, member index, program index, days from now (None: unscheduled), hour, minutes
WORKOUTS = (
    ("Lower body strength", 0, 1, 1, 7, 60),
    ("Tempo run + core", 0, None, 3, 7, 50),
    ("Knee-friendly conditioning", 1, 0, 2, 18, 45),
    ("Intro to the barbell", 2, 0, -1, 9, 60),
    ("Engine builder", None, 2, None, 0, 40),
)
# title, coach, days from now, hour, capacity
CLASSES = (
    ("Morning HIIT", "Jo Park", 1, 7, 14),
    ("Olympic lifting", "Luis Ortega", 1, 18, 8),
    ("Mobility flow", "Mina Sato", 2, 12, 16),
    ("Strength club", "Luis Ortega", 3, 18, 10),
    ("Morning HIIT", "Jo Park", 4, 7, 14),
    ("Open gym", "Mina Sato", 6, 10, 20),
)
# title, days until due (None: no date), done, assignee
TASKS = (
    ("Call Marcus Lee about pausing his membership", 2, False, "Jo Park"),
    ("Order four 16 kg kettlebells", 7, False, None),
    ("Finish the Competition Prep program", 5, False, "Luis Ortega"),
    ("Review Sam Okafor's rehab plan with the physio", -1, True, "Mina Sato"),
)


def seed_id(org_id: str, prefix: str, index: int) -> str:
    """The id of an org's ``index``-th seeded row: stable, so demo scripts and docs can name
    seeded records (ids are global keys, so the org is part of it)."""
    digest = hashlib.sha256(f"{org_id}/{prefix}/{index}".encode()).hexdigest()[:12]
    return f"{prefix}_{digest}"


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


def _at(now: datetime, days: int, hour: int) -> datetime:
    return (now + timedelta(days=days)).replace(hour=hour, minute=0, second=0, microsecond=0)


def _rows(org_id: str, now: datetime) -> dict[Any, list[dict[str, Any]]]:
    stamp = {"org_id": org_id, "created_at": now, "updated_at": now}
    members = [
        {
            "id": seed_id(org_id, "mem", i),
            "first_name": first,
            "last_name": last,
            "email": _ascii(f"{first}.{last}@example.com".lower()),
            "phone": phone,
            "status": status,
            "notes": notes,
            **stamp,
        }
        for i, (first, last, status, phone, notes) in enumerate(MEMBERS)
    ]
    programs = [
        {
            "id": seed_id(org_id, "prg", i),
            "name": n,
            "level": lv,
            "published": p,
            "description": d,
            **stamp,
        }
        for i, (n, lv, p, d) in enumerate(PROGRAMS)
    ]
    workouts = [
        {
            "id": seed_id(org_id, "wo", i),
            "title": title,
            "member_id": None if m is None else members[m]["id"],
            "program_id": None if p is None else programs[p]["id"],
            "scheduled_for": None if days is None else _at(now, days, hour),
            "duration_min": minutes,
            "notes": "",
            **stamp,
        }
        for i, (title, m, p, days, hour, minutes) in enumerate(WORKOUTS)
    ]
    classes = [
        {
            "id": seed_id(org_id, "cls", i),
            "title": title,
            "coach": coach,
            "starts_at": _at(now, days, hour),
            "duration_min": 60,
            "capacity": capacity,
            "status": "scheduled",
            **stamp,
        }
        for i, (title, coach, days, hour, capacity) in enumerate(CLASSES)
    ]
    tasks = [
        {
            "id": seed_id(org_id, "task", i),
            "title": title,
            "due_on": None if days is None else (now + timedelta(days=days)).date(),
            "done": done,
            "assignee": assignee,
            **stamp,
        }
        for i, (title, days, done, assignee) in enumerate(TASKS)
    ]
    return {
        MemberRow: members,
        ProgramRow: programs,
        WorkoutRow: workouts,
        ClassSessionRow: classes,
        TaskRow: tasks,
    }


async def _has_data(conn: AsyncConnection, org_id: str) -> bool:
    for table in (MemberRow, ProgramRow):
        if await conn.scalar(select(table.id).where(table.org_id == org_id).limit(1)):
            return True
    return False


async def seed_demo(store: Store, org_id: str, *, now: datetime | None = None) -> bool:
    """Give ``org_id`` the demo studio unless it has members or programs already.

    Returns whether it seeded. Safe to call on every start and from several workers: the
    org row is locked first (PostgreSQL), and SQLite write transactions are serial.
    """
    now = now or utcnow()
    async with store.db.write() as conn:
        await ensure_org(conn, org_id)
        await conn.execute(select(OrgRow.id).where(OrgRow.id == org_id).with_for_update())
        if await _has_data(conn, org_id):
            return False
        for table, rows in _rows(org_id, now).items():
            await conn.execute(insert(table), rows)
    return True


async def restore_demo(store: Store, org_id: str, *, now: datetime | None = None) -> int:
    """Put back the seeded rows ``org_id`` lost (deleted by a demo turn), leaving every
    other row, changed or added, as it is; seed it whole if it has none. How many rows
    it inserted. ``bosun serve --dev`` calls it at each start, so the scripted demos,
    which name seeded records, run again; nothing else does.
    """
    now = now or utcnow()
    inserted = 0
    async with store.db.write() as conn:
        await ensure_org(conn, org_id)
        await conn.execute(select(OrgRow.id).where(OrgRow.id == org_id).with_for_update())
        for table, rows in _rows(org_id, now).items():
            if table is WorkoutRow:  # a restored workout may only name rows that exist
                rows = await _with_existing_refs(conn, org_id, rows)
            have = set(
                await conn.scalars(select(table.id).where(table.id.in_([r["id"] for r in rows])))
            )
            missing = [row for row in rows if row["id"] not in have]
            if missing:  # a member whose email a newer member took stays out
                result = await conn.execute(
                    dialect_insert(conn)(table).values(missing).on_conflict_do_nothing()
                )
                inserted += max(result.rowcount, 0)
    return inserted


async def _with_existing_refs(
    conn: AsyncConnection, org_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    members = set(await conn.scalars(select(MemberRow.id).where(MemberRow.org_id == org_id)))
    programs = set(await conn.scalars(select(ProgramRow.id).where(ProgramRow.org_id == org_id)))
    return [
        {
            **row,
            "member_id": row["member_id"] if row["member_id"] in members else None,
            "program_id": row["program_id"] if row["program_id"] in programs else None,
        }
        for row in rows
    ]
