"""Migrations run once however many workers start at the same moment; the demo's tables
come with the demo only; old databases upgrade without losing rows."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from bosun.migrate import alembic_config, upgrade
from bosun_demo import seed_demo
from bosun_demo import toolset as demo_toolset
from store import Store, metadata
from store._models import JSONData, UTCDateTime, utcnow

DEMO_TABLES = {"class_sessions", "members", "programs", "tasks", "workouts"}


def head(branch: str) -> str:
    """The newest revision of a branch (``core``, ``demo``)."""
    revision = ScriptDirectory.from_config(alembic_config(toolsets=[demo_toolset()])).get_revision(
        f"{branch}@head"
    )
    assert revision is not None
    return revision.revision


def heads() -> list[str]:
    """What alembic_version holds once both branches are applied: one row each."""
    return sorted([head("core"), head("demo")])


async def schema(store: Store) -> tuple[set[str], list[str]]:
    """The database's tables and its alembic_version rows."""
    async with store.db.read() as conn:
        tables = await conn.run_sync(lambda c: set(sa.inspect(c).get_table_names()))
        versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
        return tables, sorted(versions)


@pytest.mark.postgres
async def test_concurrent_upgrades_of_one_database_all_succeed(postgres_url: str) -> None:
    stores = [Store(postgres_url) for _ in range(4)]
    try:
        await asyncio.gather(*(upgrade(store, toolsets=[demo_toolset()]) for store in stores))
        _, versions = await schema(stores[0])
    finally:
        for store in stores:
            await store.close()
    assert versions == heads()  # one row per branch: the core's head and the demo's


_ORGS = sa.table("orgs", sa.column("id"), sa.column("tier"), sa.column("created_at"))
_SESSIONS = sa.table(
    "sessions",
    *(sa.column(c) for c in ("id", "org_id", "user_id", "title", "last_seq")),
    sa.column("created_at"),
    sa.column("updated_at"),
)
_EXECUTIONS = sa.table(  # as revision 0006 has it
    "tool_executions",
    *(sa.column(c) for c in ("tool_use_id", "session_id", "turn_id", "tool", "status")),
    sa.column("idempotency_key"),
    *(sa.column(c, JSONData) for c in ("input", "output", "error", "inverse")),
    sa.column("created_at", UTCDateTime()),
    sa.column("completed_at", UTCDateTime()),
)


async def _rows_at_0006(store: Store) -> str:
    """A session of revision 0006 with a succeeded, undoable write and a pending call."""
    now, session_id = utcnow(), str(uuid.uuid4())
    row = {"session_id": session_id, "output": None, "error": None, "inverse": None}
    row |= {"created_at": now, "completed_at": None}
    async with store.db.write() as conn:
        await conn.execute(sa.insert(_ORGS).values(id="acme", tier="lite", created_at=now))
        await conn.execute(
            sa.insert(_SESSIONS).values(
                id=session_id, org_id="acme", user_id="ada", title=None, last_seq=0,
                created_at=now, updated_at=now,
            )
        )  # fmt: skip
        await conn.execute(
            sa.insert(_EXECUTIONS),
            [
                row | {
                    "tool_use_id": "toolu_create", "turn_id": "turn_1", "tool": "workouts.create",
                    "status": "succeeded", "idempotency_key": "turn_1:toolu_create",
                    "input": {"title": "Legs"}, "output": {"id": "wo_1"}, "completed_at": now,
                    "inverse": {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}},
                },
                row | {
                    "tool_use_id": "toolu_delete", "turn_id": "turn_2", "tool": "workouts.delete",
                    "status": "pending", "idempotency_key": "turn_2:toolu_delete",
                    "input": {"workout_id": "wo_2"},
                },
            ],
        )  # fmt: skip
    return session_id


async def test_0007_keys_tool_executions_by_turn_and_keeps_their_rows(db_url: str) -> None:
    store = Store(db_url)
    try:
        await upgrade(store, "0006")
        session_id = await _rows_at_0006(store)
        await upgrade(store, "0007")
        async with store.db.read() as conn:
            key, indexes = await conn.run_sync(
                lambda c: (
                    sa.inspect(c).get_pk_constraint("tool_executions")["constrained_columns"],
                    {i["name"] for i in sa.inspect(c).get_indexes("tool_executions")},
                )
            )
        await upgrade(store)  # today's code reads its rows at today's schema
        executions = store.tool_executions
        created = await executions.get("toolu_create", turn_id="turn_1")
        target = await executions.undo_target("toolu_create", session_id=session_id)
        approved = await executions.resolve(
            "toolu_delete", turn_id="turn_2", session_id=session_id, status="approved"
        )
        # The same ids again in a later turn: calls of their own, beside the moved rows.
        reused = [
            await executions.start(
                tool_use_id=tool_use_id, session_id=session_id, turn_id="turn_3",
                tool="members.search", input={"query": "sam"},
            )
            for tool_use_id in ("toolu_create", "toolu_delete")
        ]  # fmt: skip
        latest = await executions.latest("toolu_delete", session_id=session_id)
        still = await executions.undo_target("toolu_create", session_id=session_id)
    finally:
        await store.close()

    assert key == ["turn_id", "tool_use_id"]
    assert "ix_tool_executions_session_tool_use" in indexes
    assert "ix_tool_executions_session" not in indexes
    assert created is not None and created.undoable and created.output == {"id": "wo_1"}
    assert (created.session_id, created.idempotency_key) == (session_id, "turn_1:toolu_create")
    assert target == created and approved
    assert reused == [None, None]
    assert latest is not None and (latest.turn_id, latest.status) == ("turn_3", "pending")
    assert still == created  # the newest undoable write with that id


def _differences(connection: Connection) -> set[str]:
    """How the database differs from the models (the core's and the demo's tables):
    ``missing TABLE`` for a table it lacks (or an index of it), else alembic's diff."""
    found = set()
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    for diff in compare_metadata(context, metadata):
        if isinstance(diff, tuple) and diff[0] in ("add_table", "add_index"):
            table = diff[1] if diff[0] == "add_table" else diff[1].table
            found.add(f"missing {table.name}")
        else:
            found.add(repr(diff))
    return found


async def test_the_demo_tables_come_with_the_demo_only(db_url: str) -> None:
    """With the demo off a database gets the core (the audit log among it) and no demo
    table; turning the demo on adds them at the next migration, and off again keeps them."""
    store = Store(db_url)
    try:
        await upgrade(store)
        await upgrade(store)
        off = await schema(store)
        async with store.db.read() as conn:
            missing = await conn.run_sync(_differences)
        await upgrade(store, toolsets=[demo_toolset()])
        on = await schema(store)
        await upgrade(store)
        off_again = await schema(store)
    finally:
        await store.close()

    assert off[0] & DEMO_TABLES == set() and "audit_log" in off[0]
    assert off[1] == [head("core")]
    # The core's tables match their models exactly; only the demo's are missing.
    assert missing == {f"missing {table}" for table in DEMO_TABLES}
    assert on == (off[0] | DEMO_TABLES, heads())
    assert off_again == on


async def test_a_database_from_before_the_demo_branch_keeps_its_demo_rows(db_url: str) -> None:
    """Core revision 0003 created the demo's tables before they had a branch of their own:
    such a database (the tables, with rows, and only the core's head recorded) upgrades with
    the demo off, then on, and keeps every row."""
    store = Store(db_url)
    try:
        await upgrade(
            store, toolsets=[demo_toolset()]
        )  # demo_0001 is the old 0003's DDL for these tables
        async with store.db.write() as conn:
            await conn.execute(text("DELETE FROM alembic_version WHERE version_num LIKE 'demo%'"))
        await seed_demo(store, "acme")
        before = await schema(store)
        await upgrade(store)
        off = await schema(store)
        await upgrade(store, toolsets=[demo_toolset()])
        on = await schema(store)
        async with store.db.read() as conn:
            members = await conn.scalar(text("SELECT count(*) FROM members"))
            missing = await conn.run_sync(_differences)
    finally:
        await store.close()

    assert before[0] >= DEMO_TABLES and before[1] == [head("core")]
    assert off == before
    assert on == (before[0], heads())
    assert members == 8 and missing == set()


_TURNS = sa.table(  # as revision 0021 has it
    "turns",
    *(sa.column(c) for c in ("id", "session_id", "trace_id", "status", "epoch")),
    sa.column("started_at", UTCDateTime()),
)


async def test_0022_leaves_one_running_turn_per_session_and_the_index_holds_it(
    db_url: str,
) -> None:
    """Before 0022 double texts ran at once: all but the newest running turn of a session
    are closed ``cancelled``, then the database refuses a second running turn."""
    store = Store(db_url)
    try:
        await upgrade(store, "0021")
        session_id, now = await _rows_at_0006(store), utcnow()
        async with store.db.write() as conn:
            await conn.execute(
                sa.insert(_TURNS),
                [
                    {"id": f"t-{i}", "session_id": session_id, "trace_id": "tr",
                     "status": "running", "epoch": 0, "started_at": now + timedelta(seconds=i)}
                    for i in range(3)
                ],
            )  # fmt: skip
        await upgrade(store)
        turns = {t.id: t.status for t in await store.sessions.turns(session_id)}
        with pytest.raises(sa.exc.IntegrityError):
            async with store.db.write() as conn:
                await conn.execute(sa.insert(_TURNS).values(
                    id="t-9", session_id=session_id, trace_id="tr", status="running", epoch=0,
                    started_at=now,
                ))  # fmt: skip
        async with store.db.read() as conn:
            drift = await conn.run_sync(_differences)
    finally:
        await store.close()

    assert turns == {"t-0": "cancelled", "t-1": "cancelled", "t-2": "running"}
    assert not {d for d in drift if "turns" in d}  # the models say what 0022 made
