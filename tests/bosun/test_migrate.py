"""Migrations run once however many workers start at the same moment."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import text

from bosun.migrate import upgrade
from store import Store
from store._models import JSONData, UTCDateTime, utcnow


@pytest.mark.postgres
async def test_concurrent_upgrades_of_one_database_all_succeed(postgres_url: str) -> None:
    stores = [Store(postgres_url) for _ in range(4)]
    try:
        await asyncio.gather(*(upgrade(store) for store in stores))
        async with stores[0].db.read() as conn:
            versions = list(
                (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
            )
    finally:
        for store in stores:
            await store.close()
    assert len(versions) == 1 and versions[0] >= "0006"


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
