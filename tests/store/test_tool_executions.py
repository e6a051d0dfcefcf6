"""The tool_executions repository on real SQLite and real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from store import Store, ToolExecutionRecord, idempotency_key


async def _session(store: Store) -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    return session_id


def _start(session_id: str, tool_use_id: str = "tu_1", **overrides: Any) -> dict[str, Any]:
    return {
        "tool_use_id": tool_use_id,
        "session_id": session_id,
        "turn_id": "turn_1",
        "tool": "workouts.create",
        "input": {"title": "Legs", "tags": ["a", "b"], "when": None},
        **overrides,
    }


async def test_start_records_a_pending_row_once_under_its_key(store: Store) -> None:
    session_id = await _session(store)
    assert await store.tool_executions.start(**_start(session_id)) is None

    row = await store.tool_executions.get("tu_1")
    assert row is not None
    assert (row.tool_use_id, row.session_id, row.turn_id, row.tool, row.status) == (
        "tu_1",
        session_id,
        "turn_1",
        "workouts.create",
        "pending",
    )
    assert row.idempotency_key == "turn_1:tu_1" == idempotency_key("turn_1", "tu_1")
    assert row.input == {"title": "Legs", "tags": ["a", "b"], "when": None}
    assert (row.output, row.error, row.inverse, row.completed_at) == (None, None, None, None)
    assert row.created_at.tzinfo is not None
    assert await store.tool_executions.by_key("turn_1:tu_1") == row

    again = await store.tool_executions.start(**_start(session_id, input={"title": "Other"}))
    assert again == row  # the existing row, unchanged
    # The same tool_use_id under another key (another turn) meets the same row.
    other_turn = await store.tool_executions.start(**_start(session_id, turn_id="turn_2"))
    assert other_turn == row
    assert await store.tool_executions.by_key("turn_2:tu_1") is None


async def test_concurrent_starts_insert_exactly_one_row(store: Store) -> None:
    session_id = await _session(store)
    results = await asyncio.gather(
        *(store.tool_executions.start(**_start(session_id)) for _ in range(10))
    )
    assert sum(r is None for r in results) == 1
    assert {r.tool_use_id for r in results if r is not None} == {"tu_1"}
    assert len(await store.tool_executions.list_for_turn("turn_1")) == 1


async def test_finish_settles_a_pending_row_once(store: Store) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id))
    inverse = {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}}
    output = {"id": "wo_1", "title": "Legs", "scheduled_for": "2026-06-01T09:00:00Z"}

    done = await store.tool_executions.finish(
        "tu_1", status="succeeded", output=output, inverse=inverse
    )
    assert done is not None
    assert (done.status, done.output, done.error, done.inverse) == (
        "succeeded",
        output,
        None,
        inverse,
    )
    assert done.completed_at is not None and done.completed_at >= done.created_at
    assert done.undoable and done.undone_by is None
    assert await store.tool_executions.get("tu_1") == done
    # Settled rows stay settled: a late second finish changes nothing.
    assert await store.tool_executions.finish("tu_1", status="failed", error={"code": "x"}) is None
    assert await store.tool_executions.get("tu_1") == done


async def test_a_failed_row_can_be_reopened_but_a_succeeded_one_cannot(store: Store) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id, "tu_fail"))
    await store.tool_executions.start(**_start(session_id, "tu_ok"))
    error = {"code": "tool_timeout", "message": "slow", "hint": None}
    failed = await store.tool_executions.finish("tu_fail", status="failed", error=error)
    assert failed is not None and failed.error == error and failed.output is None
    await store.tool_executions.finish("tu_ok", status="succeeded", output={"id": 1})

    assert await store.tool_executions.reopen("tu_fail") is True
    reopened = await store.tool_executions.get("tu_fail")
    assert reopened is not None
    assert (reopened.status, reopened.error, reopened.completed_at) == ("pending", None, None)
    assert await store.tool_executions.reopen("tu_ok") is False
    assert await store.tool_executions.reopen("missing") is False


async def test_mark_rejected_records_new_and_pending_calls_but_not_finished_ones(
    store: Store,
) -> None:
    session_id = await _session(store)
    error = {"code": "rejected_by_user", "message": "no", "hint": None}

    fresh = await store.tool_executions.mark_rejected(**_start(session_id, "tu_new"), error=error)
    assert (fresh.status, fresh.error, fresh.idempotency_key) == (
        "rejected_by_user",
        error,
        "turn_1:tu_new",
    )
    assert fresh.completed_at is not None

    await store.tool_executions.start(**_start(session_id, "tu_pending"))
    pending = await store.tool_executions.mark_rejected(
        **_start(session_id, "tu_pending"), error=error
    )
    assert pending.status == "rejected_by_user"

    await store.tool_executions.start(**_start(session_id, "tu_ran"))
    ran = await store.tool_executions.finish("tu_ran", status="succeeded", output={"id": 7})
    kept = await store.tool_executions.mark_rejected(**_start(session_id, "tu_ran"), error=error)
    assert kept == ran


async def test_mark_undone_links_a_succeeded_undoable_row_once(store: Store) -> None:
    session_id = await _session(store)
    inverse = {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}}
    for tool_use_id, undo in (("tu_ok", inverse), ("tu_plain", None)):
        await store.tool_executions.start(**_start(session_id, tool_use_id))
        await store.tool_executions.finish(tool_use_id, status="succeeded", inverse=undo)
    await store.tool_executions.start(**_start(session_id, "tu_fail"))
    await store.tool_executions.finish("tu_fail", status="failed", error={"code": "x"})

    assert await store.tool_executions.mark_undone("tu_ok", undone_by="tu_ok-undo") is True
    row = await store.tool_executions.get("tu_ok")
    assert row is not None
    assert row.inverse == {**inverse, "undone_by": "tu_ok-undo"}
    assert row.undone_by == "tu_ok-undo" and not row.undoable and row.status == "succeeded"

    assert await store.tool_executions.mark_undone("tu_ok", undone_by="again") is False
    assert await store.tool_executions.mark_undone("tu_plain", undone_by="x") is False
    assert await store.tool_executions.mark_undone("tu_fail", undone_by="x") is False
    assert await store.tool_executions.mark_undone("missing", undone_by="x") is False
    assert (await store.tool_executions.get("tu_ok")) == row


async def test_list_for_turn_returns_the_turns_rows_in_order(store: Store) -> None:
    session_id = await _session(store)
    for tool_use_id in ("tu_b", "tu_a", "tu_c"):
        await store.tool_executions.start(**_start(session_id, tool_use_id))
    await store.tool_executions.start(**_start(session_id, "tu_x", turn_id="turn_2"))

    rows = await store.tool_executions.list_for_turn("turn_1")
    assert [r.tool_use_id for r in rows] == ["tu_b", "tu_a", "tu_c"]
    assert all(isinstance(r, ToolExecutionRecord) and r.turn_id == "turn_1" for r in rows)
    assert [r.tool_use_id for r in await store.tool_executions.list_for_turn("turn_2")] == ["tu_x"]
    assert await store.tool_executions.list_for_turn("nope") == []
    assert await store.tool_executions.get("nope") is None


async def test_resolve_answers_a_pending_row_once_even_when_two_race(store: Store) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id))
    executions = store.tool_executions

    won = await asyncio.gather(
        executions.resolve("tu_1", session_id=session_id, status="approved"),
        executions.resolve(
            "tu_1", session_id=session_id, status="rejected_by_user", error={"code": "no"}
        ),
    )
    row = await executions.get("tu_1")

    assert sorted(won) == [False, True]
    assert row is not None and row.status in ("approved", "rejected_by_user")
    # An approved row is settled by the run it allows; nothing answers it again.
    assert not await executions.resolve("tu_1", session_id=session_id, status="approved")


async def test_resolve_is_scoped_to_the_session_and_finish_settles_an_approval(
    store: Store,
) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id))
    executions = store.tool_executions

    elsewhere = await executions.resolve("tu_1", session_id="another", status="approved")
    approved = await executions.resolve("tu_1", session_id=session_id, status="approved")
    finished = await executions.finish("tu_1", status="succeeded", output={"id": "wo_1"})

    assert not elsewhere and approved
    assert finished is not None and finished.status == "succeeded"
    assert finished.output == {"id": "wo_1"}
