"""The tool_executions repository on real SQLite and real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from store import Store, ToolExecutionRecord, idempotency_key


async def _session(store: Store, org_id: str = "acme") -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=org_id, user_id="ada", session_id=session_id, title=None)
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

    row = await store.tool_executions.get("tu_1", turn_id="turn_1")
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
    # The same tool_use_id in another turn is another call, with its own row.
    assert await store.tool_executions.start(**_start(session_id, turn_id="turn_2")) is None
    other_turn = await store.tool_executions.by_key("turn_2:tu_1")
    assert other_turn is not None and other_turn.turn_id == "turn_2"
    assert await store.tool_executions.get("tu_1", turn_id="turn_1") == row


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
        "tu_1", turn_id="turn_1", status="succeeded", output=output, inverse=inverse
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
    assert await store.tool_executions.get("tu_1", turn_id="turn_1") == done
    # Settled rows stay settled: a late second finish changes nothing.
    assert (
        await store.tool_executions.finish(
            "tu_1", turn_id="turn_1", status="failed", error={"code": "x"}
        )
        is None
    )
    assert await store.tool_executions.get("tu_1", turn_id="turn_1") == done


async def test_a_failed_row_can_be_reopened_but_a_succeeded_one_cannot(store: Store) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id, "tu_fail"))
    await store.tool_executions.start(**_start(session_id, "tu_ok"))
    error = {"code": "tool_timeout", "message": "slow", "hint": None}
    failed = await store.tool_executions.finish(
        "tu_fail", turn_id="turn_1", status="failed", error=error
    )
    assert failed is not None and failed.error == error and failed.output is None
    await store.tool_executions.finish(
        "tu_ok", turn_id="turn_1", status="succeeded", output={"id": 1}
    )

    assert await store.tool_executions.reopen("tu_fail", turn_id="turn_1") is True
    reopened = await store.tool_executions.get("tu_fail", turn_id="turn_1")
    assert reopened is not None
    assert (reopened.status, reopened.error, reopened.completed_at) == ("pending", None, None)
    assert await store.tool_executions.reopen("tu_ok", turn_id="turn_1") is False
    assert await store.tool_executions.reopen("missing", turn_id="turn_1") is False


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
    ran = await store.tool_executions.finish(
        "tu_ran", turn_id="turn_1", status="succeeded", output={"id": 7}
    )
    kept = await store.tool_executions.mark_rejected(**_start(session_id, "tu_ran"), error=error)
    assert kept == ran


async def test_mark_undone_links_a_succeeded_undoable_row_once(store: Store) -> None:
    session_id = await _session(store)
    inverse = {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}}
    for tool_use_id, undo in (("tu_ok", inverse), ("tu_plain", None)):
        await store.tool_executions.start(**_start(session_id, tool_use_id))
        await store.tool_executions.finish(
            tool_use_id, turn_id="turn_1", status="succeeded", inverse=undo
        )
    await store.tool_executions.start(**_start(session_id, "tu_fail"))
    await store.tool_executions.finish(
        "tu_fail", turn_id="turn_1", status="failed", error={"code": "x"}
    )

    assert (
        await store.tool_executions.mark_undone("tu_ok", turn_id="turn_1", undone_by="tu_ok-undo")
        is True
    )
    row = await store.tool_executions.get("tu_ok", turn_id="turn_1")
    assert row is not None
    assert row.inverse == {**inverse, "undone_by": "tu_ok-undo"}
    assert row.undone_by == "tu_ok-undo" and not row.undoable and row.status == "succeeded"

    assert (
        await store.tool_executions.mark_undone("tu_ok", turn_id="turn_1", undone_by="again")
        is False
    )
    assert (
        await store.tool_executions.mark_undone("tu_plain", turn_id="turn_1", undone_by="x")
        is False
    )
    assert (
        await store.tool_executions.mark_undone("tu_fail", turn_id="turn_1", undone_by="x") is False
    )
    assert (
        await store.tool_executions.mark_undone("missing", turn_id="turn_1", undone_by="x") is False
    )
    assert (await store.tool_executions.get("tu_ok", turn_id="turn_1")) == row


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
    assert await store.tool_executions.get("nope", turn_id="turn_1") is None


async def test_resolve_answers_a_pending_row_once_even_when_two_race(store: Store) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id))
    executions = store.tool_executions

    won = await asyncio.gather(
        executions.resolve("tu_1", turn_id="turn_1", session_id=session_id, status="approved"),
        executions.resolve(
            "tu_1",
            turn_id="turn_1",
            session_id=session_id,
            status="rejected_by_user",
            error={"code": "no"},
        ),
    )
    row = await executions.get("tu_1", turn_id="turn_1")

    assert sorted(won) == [False, True]
    assert row is not None and row.status in ("approved", "rejected_by_user")
    # An approved row is settled by the run it allows; nothing answers it again.
    assert not await executions.resolve(
        "tu_1", turn_id="turn_1", session_id=session_id, status="approved"
    )


async def test_resolve_is_scoped_to_the_session_and_finish_settles_an_approval(
    store: Store,
) -> None:
    session_id = await _session(store)
    await store.tool_executions.start(**_start(session_id))
    executions = store.tool_executions

    elsewhere = await executions.resolve(
        "tu_1", turn_id="turn_1", session_id="another", status="approved"
    )
    approved = await executions.resolve(
        "tu_1", turn_id="turn_1", session_id=session_id, status="approved"
    )
    finished = await executions.finish(
        "tu_1", turn_id="turn_1", status="succeeded", output={"id": "wo_1"}
    )

    assert not elsewhere and approved
    assert finished is not None and finished.status == "succeeded"
    assert finished.output == {"id": "wo_1"}


# identity: a tool_use_id names a call only within its turn


async def test_one_tool_use_id_in_two_turns_sessions_and_orgs_is_four_calls(
    store: Store,
) -> None:
    executions = store.tool_executions
    here, there, elsewhere = (
        await _session(store),
        await _session(store),
        await _session(store, "globex"),
    )
    calls = [(here, "turn_1"), (here, "turn_2"), (there, "turn_3"), (elsewhere, "turn_4")]
    inverse = {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}}

    inserted = [
        await executions.start(**_start(session_id, "toolu_1", turn_id=turn_id))
        for session_id, turn_id in calls
    ]
    approved = await executions.resolve(
        "toolu_1", turn_id="turn_2", session_id=here, status="approved"
    )
    finished = [
        await executions.finish("toolu_1", turn_id=turn_id, status="succeeded", inverse=inverse)
        for _, turn_id in calls
    ]
    undone = await executions.mark_undone("toolu_1", turn_id="turn_3", undone_by="toolu_1-undo")
    rows = [await executions.get("toolu_1", turn_id=turn_id) for _, turn_id in calls]

    assert inserted == [None] * 4  # no conflict: each is a row of its own
    assert approved and undone
    assert all(f is not None and f.status == "succeeded" for f in finished)
    assert [(r.session_id, r.turn_id) for r in rows if r] == calls
    assert [r.undone_by for r in rows if r] == [None, None, "toolu_1-undo", None]
    assert [r.idempotency_key for r in rows if r] == [f"{t}:toolu_1" for _, t in calls]
    for _, turn_id in calls:
        assert [r.tool_use_id for r in await executions.list_for_turn(turn_id)] == ["toolu_1"]


async def test_within_a_turn_a_tool_use_id_is_one_call_whatever_the_input(store: Store) -> None:
    session_id = await _session(store)
    executions = store.tool_executions
    assert await executions.start(**_start(session_id)) is None
    done = await executions.finish("tu_1", turn_id="turn_1", status="succeeded", output={"n": 1})

    same = await executions.start(**_start(session_id))  # a retried call: the recorded one
    other = await executions.start(**_start(session_id, input={"title": "Arms"}))
    rejected = await executions.mark_rejected(**_start(session_id), error={"code": "no"})

    # The caller gets the recorded call back (the runner replays it or, for another
    # input, refuses with tool_use_conflict); nothing is added or changed.
    assert same == other == rejected == done
    assert len(await executions.list_for_turn("turn_1")) == 1


async def test_a_session_addresses_its_most_recent_call_and_undoes_newest_first(
    store: Store,
) -> None:
    session_id = await _session(store)
    executions = store.tool_executions
    inverse = {"tool": "workouts.delete", "input": {"workout_id": "wo_1"}}
    for turn_id in ("turn_1", "turn_2", "turn_3"):
        await executions.start(**_start(session_id, turn_id=turn_id))
    for turn_id in ("turn_1", "turn_2"):
        await executions.finish("tu_1", turn_id=turn_id, status="succeeded", inverse=inverse)

    async def target() -> tuple[str | None, str | None]:
        latest = await executions.latest("tu_1", session_id=session_id)
        undo = await executions.undo_target("tu_1", session_id=session_id)
        return latest and latest.turn_id, undo and undo.turn_id

    first = await target()  # turn_3 is pending: not undoable
    await executions.mark_undone("tu_1", turn_id="turn_2", undone_by="tu_1-undo")
    second = await target()
    await executions.mark_undone("tu_1", turn_id="turn_1", undone_by="tu_1-undo")
    third = await target()  # nothing left to undo: the most recent, to be refused

    assert (first, second, third) == (
        ("turn_3", "turn_2"),
        ("turn_3", "turn_1"),
        ("turn_3", "turn_3"),
    )
    assert await executions.latest("tu_1", session_id=await _session(store)) is None
    assert await executions.undo_target("tu_9", session_id=session_id) is None
