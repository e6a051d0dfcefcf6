"""Retention on real SQLite and real PostgreSQL: whole finished sessions go, and the host
app's old content events but those that route replies to agents; nothing else."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from events import Done, SessionStarted, TextDelta, TurnStatus, UserMessage
from store import ContentEventRecord, Cooldown, PruneReport, Store, UsageRecord
from store._content_events import ContentEventRow, TriggerCooldownRow
from store._models import (
    AuditLogRow,
    EventRow,
    OrgRow,
    SessionRow,
    ToolExecutionRow,
    TurnRow,
    UsageRow,
    utcnow,
)

TABLES = (
    ("events", EventRow),
    ("turns", TurnRow),
    ("tool_executions", ToolExecutionRow),
    ("usage", UsageRow),
)


async def _turn(store: Store, session_id: str, *, status: TurnStatus | None) -> None:
    """One turn with 4 events (2 while only opened), a tool execution and a usage row;
    ``status=None`` leaves it running."""
    turn_id = str(uuid.uuid4())
    await store.log.open_turn(
        session_id,
        [
            SessionStarted(session_id=session_id, turn_id=turn_id),
            UserMessage(message_id="m", text="hi"),
        ],
        turn_id=turn_id,
        trace_id="tr",
    )
    tool_use_id = f"tu_{uuid.uuid4().hex}"
    await store.tool_executions.start(
        tool_use_id=tool_use_id,
        session_id=session_id,
        turn_id=turn_id,
        tool="workouts.create",
        input={"title": "Legs"},
    )
    await store.sessions.record_usage(
        UsageRecord(
            session_id=session_id,
            turn_id=turn_id,
            org_id="acme",
            user_id="ada",
            role="executor",
            model="m",
            input_tokens=10,
        )
    )
    if status is not None:
        await store.log.append(
            session_id,
            [TextDelta(delta="ok"), Done(session_id=session_id, status=status)],
            turn_id=turn_id,
            finish=status,
        )


async def _session(
    store: Store, *, turns: list[TurnStatus | None], last_active: datetime | None = None
) -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title="t")
    for status in turns:
        await _turn(store, session_id, status=status)
    if last_active is not None:
        async with store.db.write() as conn:
            await conn.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(updated_at=last_active)
            )
    return session_id


async def _rows(store: Store, session_id: str) -> dict[str, int]:
    """How many rows of each session table belong to the session."""
    counts: dict[str, int] = {}
    async with store.db.read() as conn:
        counts["sessions"] = int(
            await conn.scalar(select(func.count()).where(SessionRow.id == session_id)) or 0
        )
        for name, table in TABLES:
            counts[name] = int(
                await conn.scalar(
                    select(func.count()).select_from(table).where(table.session_id == session_id)
                )
                or 0
            )
    return counts


@dataclass(frozen=True)
class World:
    cutoff: datetime
    prunable: list[str]  # old and finished
    kept: list[str]  # recent, or with a running or suspended turn
    waiting: list[str]  # the old ones among ``kept``


async def _world(store: Store) -> World:
    now = utcnow()
    cutoff = now - timedelta(days=90)
    old = now - timedelta(days=100)
    prunable = [
        await _session(store, turns=["completed", "failed"], last_active=old),
        await _session(store, turns=["cancelled"], last_active=old),
        await _session(store, turns=[], last_active=old),  # opened, never used
    ]
    waiting = [
        await _session(store, turns=["completed", "suspended"], last_active=old),
        await _session(store, turns=[None], last_active=old),
    ]
    recent = [
        await _session(store, turns=["completed"]),
        await _session(store, turns=["completed"], last_active=cutoff),  # not *older*
    ]
    return World(cutoff, prunable, [*waiting, *recent], waiting)


async def test_a_dry_run_counts_what_would_go_and_deletes_nothing(store: Store) -> None:
    world = await _world(store)
    before = {s: await _rows(store, s) for s in world.prunable + world.kept}
    assert [before[s] for s in world.prunable] == [
        {"sessions": 1, "events": 8, "turns": 2, "tool_executions": 2, "usage": 2},
        {"sessions": 1, "events": 4, "turns": 1, "tool_executions": 1, "usage": 1},
        {"sessions": 1, "events": 0, "turns": 0, "tool_executions": 0, "usage": 0},
    ]

    report = await store.retention.prune(before=world.cutoff, apply=False)

    assert report == PruneReport(
        cutoff=world.cutoff,
        applied=False,
        sessions=3,
        events=12,
        turns=3,
        tool_executions=3,
        usage=3,
        kept_waiting=2,
    )
    assert {s: await _rows(store, s) for s in before} == before


async def test_apply_removes_exactly_the_old_finished_sessions_and_all_their_rows(
    store: Store,
) -> None:
    world = await _world(store)
    kept_rows = {s: await _rows(store, s) for s in world.kept}
    kept_logs = {s: await store.log.read(s) for s in world.kept}
    kept_turns = {s: await store.sessions.turns(s) for s in world.kept}
    dry = await store.retention.prune(before=world.cutoff, apply=False)

    report = await store.retention.prune(before=world.cutoff, apply=True)

    assert report == replace(dry, applied=True)
    gone = {"sessions": 0, "events": 0, "turns": 0, "tool_executions": 0, "usage": 0}
    for session_id in world.prunable:
        assert await _rows(store, session_id) == gone
    for session_id in world.kept:
        assert await _rows(store, session_id) == kept_rows[session_id]
        assert await store.log.read(session_id) == kept_logs[session_id]
        assert await store.sessions.turns(session_id) == kept_turns[session_id]
    again = await store.retention.prune(before=world.cutoff, apply=True)
    assert again == PruneReport(cutoff=world.cutoff, applied=True, kept_waiting=2)


async def test_a_kept_session_goes_on_with_its_own_sequence(store: Store) -> None:
    world = await _world(store)
    suspended = world.waiting[0]
    last_seq = (await store.sessions.get(suspended)).last_seq  # type: ignore[union-attr]
    await store.retention.prune(before=world.cutoff, apply=True)
    [stored] = await store.log.append(suspended, [TextDelta(delta="back")])
    assert stored.seq == last_seq + 1 == 9
    assert [e.seq for e in await store.log.read(suspended)] == list(range(1, 10))


async def test_batches_remove_every_session_in_several_transactions(store: Store) -> None:
    old = utcnow() - timedelta(days=2)
    ids = [await _session(store, turns=["completed"], last_active=old) for _ in range(5)]
    report = await store.retention.prune(
        before=utcnow() - timedelta(days=1), apply=True, batch_size=2
    )
    assert (report.sessions, report.events, report.turns, report.usage) == (5, 20, 5, 5)
    for session_id in ids:
        assert await store.sessions.get(session_id) is None


async def test_audit_rows_and_the_org_outlive_the_pruned_session(store: Store) -> None:
    session_id = await _session(
        store, turns=["completed"], last_active=utcnow() - timedelta(days=9)
    )
    [execution] = await store.tool_executions.list_for_turn(
        (await store.sessions.turns(session_id))[0].id
    )
    async with store.db.write() as conn:
        await conn.execute(
            insert(AuditLogRow).values(
                id="aud_1",
                org_id="acme",
                user_id="ada",
                agent=True,
                action="workouts.create",
                target="wo_1",
                detail={"title": "Legs"},
                tool_use_id=execution.tool_use_id,
                created_at=utcnow(),
            )
        )

    report = await store.retention.prune(before=utcnow() - timedelta(days=1), apply=True)

    assert report.sessions == 1
    assert await store.sessions.get(session_id) is None
    async with store.db.read() as conn:
        audit = (await conn.execute(select(AuditLogRow.id, AuditLogRow.tool_use_id))).all()
        orgs = list(await conn.scalars(select(OrgRow.id)))
    assert [tuple(row) for row in audit] == [("aud_1", execution.tool_use_id)]
    assert orgs == ["acme"]


async def test_a_session_that_came_back_to_life_mid_prune_stays(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that starts after the candidates were read wins: the batch checks again."""
    old = utcnow() - timedelta(days=9)
    revived = await _session(store, turns=["completed"], last_active=old)
    untouched = await _session(store, turns=["completed"], last_active=old)
    write, pending = store.db.write, [revived]

    @asynccontextmanager
    async def revive_first() -> AsyncIterator[AsyncConnection]:
        # Before the first batch's transaction, a new turn starts in ``revived``.
        if pending:
            await _turn(store, pending.pop(), status=None)
        async with write() as conn:
            yield conn

    monkeypatch.setattr(store.db, "write", revive_first)
    report = await store.retention.prune(before=utcnow() - timedelta(days=1), apply=True)

    assert (report.sessions, report.events, report.kept_waiting) == (1, 4, 0)
    assert await store.sessions.get(untouched) is None
    assert await _rows(store, revived) == {
        "sessions": 1,
        "events": 6,
        "turns": 2,
        "tool_executions": 2,
        "usage": 2,
    }


async def _content_event(
    store: Store, event_id: str, *, kind: str, actor: str, received: datetime
) -> None:
    """A content event as the host app reported it, received at ``received``."""
    event = ContentEventRecord(
        org_id="acme", id=event_id, type=kind, resource_type="note", resource_id="n1",
        title=None, actor_type=actor, actor_id="coach" if actor == "agent" else "alice",
        actor_run_id=None, text="hi", mentions=None, reply_to_type=None, reply_to_id=None,
        at=received,
    )  # fmt: skip
    assert await store.content_events.claim(event)
    async with store.db.write() as conn:
        await conn.execute(
            update(ContentEventRow)
            .where(ContentEventRow.id == event_id)
            .values(received_at=received)
        )


async def test_old_content_events_go_but_what_routes_replies_to_agents_stays(
    store: Store,
) -> None:
    """A reply to a note coach created finds coach by coach's ``created`` event, however
    old; the other events received before the cutoff go, in batches, and the cool-downs
    that ended before it."""
    now = utcnow()
    cutoff, old = now - timedelta(days=90), now - timedelta(days=100)
    for n in range(3):
        await _content_event(store, f"old-{n}", kind="commented", actor="user", received=old)
    await _content_event(store, "old-by-coach", kind="created", actor="agent", received=old)
    await _content_event(store, "old-by-alice", kind="created", actor="user", received=old)
    await _content_event(store, "recent", kind="commented", actor="user", received=now)
    for resource in ("n1", "n2"):
        await store.content_events.take_cooldown(
            Cooldown("acme", "coach", "note", resource, "e"), 60
        )
    async with store.db.write() as conn:  # n1's cool-down ended long ago
        await conn.execute(
            update(TriggerCooldownRow)
            .where(TriggerCooldownRow.resource_id == "n1")
            .values(until=old)
        )

    dry = await store.retention.prune(before=cutoff, apply=False)
    report = await store.retention.prune(before=cutoff, apply=True, batch_size=2)

    assert (dry.content_events, dry.applied, report.content_events) == (4, False, 4)
    async with store.db.read() as conn:
        left = set(await conn.scalars(select(ContentEventRow.id)))
    assert left == {"old-by-coach", "recent"}
    async with store.db.read() as conn:
        cooling = set(await conn.scalars(select(TriggerCooldownRow.resource_id)))
    assert cooling == {"n2"}
    assert await store.content_events.creators("acme", "note", "n1") == {"coach"}
