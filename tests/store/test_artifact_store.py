"""Artifacts on real SQLite and PostgreSQL: versions, per-session scoping, retention."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from store import ARTIFACT_ID_PATTERN, Store, utcnow
from store._models import SessionRow


async def _session(store: Store, *, org: str = "acme", user: str = "alice") -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=org, user_id=user, session_id=session_id, title="t")
    return session_id


def _fields(title: str = "Chest day", n: int = 1) -> dict[str, Any]:
    return {
        "turn_id": str(uuid.uuid4()),
        "tool_use_id": f"toolu_{n}",
        "title": title,
        "summary": f"{n} exercises",
        "payload": {"exercises": [{"name": f"Push-up {i}"} for i in range(n)]},
    }


async def test_create_revise_get_and_list_versions(store: Store) -> None:
    session_id = await _session(store)
    first = await store.artifacts.create(
        session_id, type="workout", schema_version="1", **_fields(n=2)
    )
    assert re.fullmatch(ARTIFACT_ID_PATTERN, first.id)
    assert first.version == 1
    second = await store.artifacts.revise(session_id, first.id, **_fields("Chest v2", n=1))
    assert second is not None
    assert (second.id, second.version, second.type, second.schema_version) == (
        first.id, 2, "workout", "1",
    )  # fmt: skip

    latest = await store.artifacts.get(session_id, first.id)
    assert latest is not None
    assert (latest.version, latest.title, len(latest.payload["exercises"])) == (2, "Chest v2", 1)
    old = await store.artifacts.get(session_id, first.id, version=1)
    assert old is not None
    assert (old.title, len(old.payload["exercises"])) == ("Chest day", 2)  # unchanged
    assert await store.artifacts.get(session_id, first.id, version=3) is None

    other = await store.artifacts.create(
        session_id, type="exercise_list", schema_version="1", **_fields("List")
    )
    listed = await store.artifacts.list(session_id)
    assert [(a.id, a.version) for a in listed] == [(first.id, 2), (other.id, 1)]
    assert [a.id for a in await store.artifacts.list(session_id, type="workout")] == [first.id]
    newest = await store.artifacts.latest(session_id, "workout")
    assert newest is not None and newest.version == 2


async def test_artifacts_are_scoped_to_their_session(store: Store) -> None:
    mine, theirs = await _session(store), await _session(store, org="other", user="eve")
    made = await store.artifacts.create(mine, type="workout", schema_version="1", **_fields())
    assert await store.artifacts.get(theirs, made.id) is None
    assert await store.artifacts.get(theirs, made.id, version=1) is None
    assert await store.artifacts.revise(theirs, made.id, **_fields()) is None
    assert await store.artifacts.list(theirs) == []
    assert await store.artifacts.latest(theirs, "workout") is None


async def test_racing_revisions_get_distinct_versions(store: Store) -> None:
    session_id = await _session(store)
    made = await store.artifacts.create(session_id, type="workout", schema_version="1", **_fields())
    revised = await asyncio.gather(
        *(store.artifacts.revise(session_id, made.id, **_fields(n=i)) for i in range(5))
    )
    assert sorted(r.version for r in revised if r is not None) == [2, 3, 4, 5, 6]


async def test_prune_removes_a_sessions_artifacts(store: Store) -> None:
    session_id = await _session(store)
    await store.artifacts.create(session_id, type="workout", schema_version="1", **_fields())
    async with store.db.write() as conn:
        stale = utcnow() - timedelta(days=100)
        await conn.execute(
            update(SessionRow).where(SessionRow.id == session_id).values(updated_at=stale)
        )
    cutoff = utcnow() - timedelta(days=30)
    assert (await store.retention.prune(before=cutoff, apply=False)).artifacts == 1
    report = await store.retention.prune(before=cutoff, apply=True)
    assert (report.sessions, report.artifacts) == (1, 1)
    assert await store.artifacts.list(session_id) == []
