"""The audit log repository, on a core-only database (the demo off), SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from conftest import migrate
from store import AuditEntry, Store, utcnow


class Rollback(Exception):
    """Raised inside a write transaction to undo it."""


@pytest.fixture
async def core_store(db_url: str) -> AsyncIterator[Store]:
    await migrate(db_url, demo=False)
    opened = Store(db_url)
    yield opened
    await opened.close()


async def _record(store: Store, org_id: str, action: str, *, tool_use_id: str | None = None) -> str:
    await store.spend.set_tier(org_id, "lite")  # the org row the audit row belongs to
    async with store.db.write() as conn:
        return await store.audit.record(
            conn,
            org_id=org_id,
            user_id="ada",
            action=action,
            target=f"note:{action}",
            detail={"n": 1},
            agent=True,
            tool_use_id=tool_use_id,
        )


async def test_record_appends_in_the_callers_transaction(core_store: Store) -> None:
    start = utcnow()
    kept = await _record(core_store, "acme", "note.added", tool_use_id="toolu_1")
    with pytest.raises(Rollback):
        async with core_store.db.write() as conn:
            await core_store.audit.record(
                conn, org_id="acme", user_id="ada", action="note.lost", target="note:x",
                detail={}, agent=False,
            )  # fmt: skip
            raise Rollback
    entries = await core_store.audit.recent("acme", since=start, until=utcnow(), limit=10)

    assert kept.startswith("aud_")
    assert entries == [
        AuditEntry(
            id=kept, org_id="acme", user_id="ada", agent=True, action="note.added",
            target="note:note.added", detail={"n": 1}, tool_use_id="toolu_1",
            created_at=entries[0].created_at,
        )
    ]  # fmt: skip
    assert start <= entries[0].created_at <= utcnow()


async def test_recent_is_one_orgs_window_newest_first(core_store: Store) -> None:
    start = utcnow()
    for action in ("a.first", "a.second", "a.third"):
        await _record(core_store, "acme", action)
    await _record(core_store, "globex", "g.other")
    until = utcnow()

    def actions(entries: list[AuditEntry]) -> list[str]:
        return [entry.action for entry in entries]

    recent = core_store.audit.recent
    assert actions(await recent("acme", since=start, until=until, limit=10)) == [
        "a.third",
        "a.second",
        "a.first",
    ]
    assert actions(await recent("acme", since=start, until=until, limit=2)) == [
        "a.third",
        "a.second",
    ]
    assert actions(await recent("globex", since=start, until=until, limit=10)) == ["g.other"]
    later = until + timedelta(seconds=1)
    assert await recent("acme", since=later, until=later + timedelta(days=1), limit=10) == []
