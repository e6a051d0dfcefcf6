"""The tool runner on real databases (SQLite and PostgreSQL): gates, recorded executions,
idempotent replays, human decisions (confirm, pick, reject), undo, timeouts and crashes.

The demo toolset gives realistic writes with audit rows; a small ad-hoc registry covers
the edge cases (sync handlers, slow, crashing and refusing tools).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from structlog.testing import capture_logs

from bosun_demo import demo_registry, seed_demo
from bosun_demo._tables import WorkoutRow
from events import UserMessage
from store import Store
from store._models import AuditLogRow
from tools import (
    Capabilities,
    Inverse,
    ToolCallRequest,
    ToolContext,
    ToolDef,
    ToolError,
    ToolFailure,
    ToolOutcome,
    ToolRegistry,
    ToolRunner,
    UserRole,
)
from tools._runner import MAX_RESULT_CHARS

DEMO = demo_registry()
EDGE = ToolRegistry()
RUNS: Counter[str] = Counter()


class Text(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=50)


class Echo(BaseModel):
    text: str
    thread: str
    seen_status: str | None = None


@EDGE.tool(name="edge.echo_sync", summary="Echo, from a sync handler.", category="read")
def echo_sync(args: Text, ctx: ToolContext) -> Echo:
    RUNS["edge.echo_sync"] += 1
    return Echo(text=args.text, thread=threading.current_thread().name)


@EDGE.tool(name="edge.slow", summary="Sleeps far past any timeout.", category="read")
async def slow(args: Text, ctx: ToolContext) -> None:
    await asyncio.sleep(30)


@EDGE.tool(name="edge.crash", summary="Fails with a bug.", category="write")
async def crash(args: Text, ctx: ToolContext) -> None:
    raise ValueError(f"cannot handle {args.text}")


@EDGE.tool(name="edge.own_timeout", summary="Its own call times out.", category="read")
async def own_timeout(args: Text, ctx: ToolContext) -> None:
    raise TimeoutError("the database took too long")


@EDGE.tool(name="edge.refuse", summary="Refuses, as a tool may.", category="write")
async def refuse(args: Text, ctx: ToolContext) -> None:
    raise ToolError("out_of_stock", f"No {args.text!r} left", hint="Pick another item")


@EDGE.tool(
    name="edge.peek",
    summary="A write that reports the status of its own execution row.",
    category="write",
    inverse=Inverse("edge.unpeek", lambda _args, out: {"text": out.text}),
)
async def peek(args: Text, ctx: ToolContext) -> Echo:
    RUNS["edge.peek"] += 1
    assert ctx.tool_use_id is not None
    row = await ctx.store.tool_executions.get(ctx.tool_use_id, turn_id="turn_1")
    status = None if row is None else row.status
    return Echo(text=args.text, thread=threading.current_thread().name, seen_status=status)


@EDGE.tool(name="edge.unpeek", summary="Undoes edge.peek.", category="write")
async def unpeek(args: Text, ctx: ToolContext) -> None:
    RUNS["edge.unpeek"] += 1


@EDGE.tool(name="edge.flaky", summary="Fails the first time only.", category="write")
async def flaky(args: Text, ctx: ToolContext) -> Echo:
    RUNS["edge.flaky"] += 1
    if RUNS["edge.flaky"] == 1:
        raise ToolError("busy", "The studio system is busy", hint="Try again")
    return Echo(text=args.text, thread="main")


@EDGE.tool(name="edge.bad_output", summary="Returns the wrong shape.", category="read")
async def bad_output(args: Text, ctx: ToolContext) -> Echo:
    return {"text": args.text}  # type: ignore[return-value]


@EDGE.tool(
    name="edge.broken_inverse",
    summary="A write whose inverse cannot be built.",
    category="write",
    inverse=Inverse("edge.unpeek", lambda _args, _out: {"text": 1 / 0}),
)
async def broken_inverse(args: Text, ctx: ToolContext) -> Echo:
    return Echo(text=args.text, thread="main")


@dataclass
class Studio:
    """A seeded org with one session, and a runner over the demo tools."""

    store: Store
    session_id: str
    runner: ToolRunner
    ctx: ToolContext

    def call(self, name: str, args: dict[str, Any], tool_use_id: str = "tu_1") -> ToolCallRequest:
        return ToolCallRequest(
            tool_use_id=tool_use_id,
            name=name,
            input=args,
            session_id=self.session_id,
            turn_id="turn_1",
        )

    def edge(self, **options: Any) -> ToolRunner:
        return ToolRunner(EDGE, self.store, **options)

    def as_role(self, role: UserRole, org: str = "acme") -> ToolContext:
        return dataclasses.replace(self.ctx, role=role, org_id=org)


@pytest.fixture
async def acme(store: Store) -> Studio:
    RUNS.clear()
    await seed_demo(store, "acme")
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="owner")
    return Studio(store, session_id, ToolRunner(DEMO, store), ctx)


async def audit(store: Store) -> list[tuple[str, str, str | None]]:
    async with store.db.read() as conn:
        rows = await conn.execute(
            select(AuditLogRow.action, AuditLogRow.target, AuditLogRow.tool_use_id)
            .where(AuditLogRow.org_id == "acme")
            .order_by(AuditLogRow.created_at, AuditLogRow.id)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def workouts_titled(store: Store, title: str) -> int:
    async with store.db.read() as conn:
        count = await conn.scalar(select(func.count()).where(WorkoutRow.title == title))
    return int(count or 0)


def error_of(outcome: ToolDef | ToolOutcome) -> ToolFailure:
    assert isinstance(outcome, ToolOutcome) and outcome.error is not None, outcome
    assert not outcome.ok and outcome.needs is None
    return outcome.error


# the gates


def test_check_admits_a_valid_call_by_registry_or_wire_name(acme: Studio) -> None:
    for name in ("members.search", "members_search"):
        assert acme.runner.check(acme.call(name, {"query": "sam"}), "staff") is DEMO.get(
            "members.search"
        )


def test_check_refuses_unknown_tools_with_the_close_names_the_role_may_use(acme: Studio) -> None:
    unknown = acme.runner.check(acme.call("members.serch", {}), "owner")
    assert unknown == ToolOutcome(
        tool_use_id="tu_1",
        tool="members.serch",
        ok=False,
        error=ToolFailure(
            code="unknown_tool",
            message="No tool named 'members.serch'",
            hint="Did you mean 'members.search' or 'members.get'?",
        ),
    )
    # A member may not use members.*, so those are not suggested to one.
    as_member = error_of(acme.runner.check(acme.call("members_serch", {}), "member"))
    assert (as_member.code, as_member.hint) == (
        "unknown_tool",
        "Call only the tools you were given",
    )


def test_check_refuses_a_role_before_looking_at_the_input(acme: Studio) -> None:
    refused = error_of(acme.runner.check(acme.call("members.search", {"bad": 1}), "member"))
    assert refused == ToolFailure(
        code="forbidden",
        message="The member role may not use members.search (only owner, staff)",
        hint="Tell the user you cannot do this here; do not retry",
    )


def test_check_refuses_invalid_input_listing_fields_without_their_values(acme: Studio) -> None:
    args = {"title": "", "duration_min": 3, "colour": "SECRET-teal"}
    refused = error_of(acme.runner.check(acme.call("workouts.create", args), "staff"))
    assert refused == ToolFailure(
        code="invalid_input",
        message=(
            "Invalid input for workouts.create: title: String should have at least 1 "
            "character; duration_min: Input should be greater than or equal to 5; "
            "colour: Extra inputs are not permitted"
        ),
        hint="Fix these fields and call it again; its schema lists every field",
    )
    one = [{"id": "a", "label": "SECRET-label"}]
    nested = {"prompt": "Which?", "candidates": [*one, {"id": "b", "label": "B", "x": 1}]}
    picker = error_of(acme.runner.check(acme.call("ui.ask_user_to_pick", nested), "member"))
    assert picker.message == (
        "Invalid input for ui.ask_user_to_pick: candidates.1.x: Extra inputs are not permitted"
    )
    alone = {"prompt": "Which?", "candidates": one}
    too_few = error_of(acme.runner.check(acme.call("ui.ask_user_to_pick", alone), "member"))
    assert too_few.message == (
        "Invalid input for ui.ask_user_to_pick: candidates: List should have at least 2 items "
        "after validation, not 1"
    )
    assert "SECRET" not in refused.message + picker.message + too_few.message


def test_capabilities_allow_routers_and_blocked_always_wins() -> None:
    caps = Capabilities(
        allow=frozenset({"members.*", "workouts.create", "tasks.create"}),
        blocked=frozenset({"members.get", "tasks.*"}),
    )
    permitted = {name: caps.permits(name) for name in DEMO.names()}
    assert sorted(name for name, ok in permitted.items() if ok) == [
        "members.search",
        "workouts.create",
    ]
    everything = Capabilities()
    assert all(everything.permits(name) for name in DEMO.names())
    assert not Capabilities(blocked=frozenset({"ui.*"})).permits("ui.ask_user_to_pick")
    with pytest.raises(ValueError, match=r"not \['\*', 'members_search'\]"):
        Capabilities(allow=frozenset({"members_search"}), blocked=frozenset({"*"}))


async def test_calls_of_tools_the_agent_may_not_use_never_run_or_record(acme: Studio) -> None:
    caps = Capabilities(allow=frozenset({"members.*"}), blocked=frozenset({"members.get"}))
    runner = ToolRunner(DEMO, acme.store, capabilities=caps)
    blocked = await runner.run(acme.call("members.get", {"member_id": "mem_x"}), acme.ctx)
    assert error_of(blocked) == ToolFailure(
        code="tool_not_allowed",
        message="members.get is not enabled for this agent",
        hint="Tell the user you cannot do this here; do not retry",
    )
    create = acme.call("workouts.create", {"title": "Blocked"}, "tu_2")
    assert error_of(await runner.run(create, acme.ctx)).code == "tool_not_allowed"
    assert await workouts_titled(acme.store, "Blocked") == 0
    assert await acme.store.tool_executions.list_for_turn("turn_1") == []
    # The unknown-tool hint only names tools this profile allows.
    assert error_of(runner.check(acme.call("members.gett", {}), "staff")).hint == (
        "Did you mean 'members.search'?"
    )
    allowed = await runner.run(acme.call("members.search", {"query": "sam"}, "tu_3"), acme.ctx)
    assert allowed.ok


# running and recording


async def test_a_read_tool_runs_and_records_its_execution(acme: Studio) -> None:
    outcome = await acme.runner.run(acme.call("members_search", {"query": "sam"}), acme.ctx)
    assert outcome.ok and outcome.tool == "members.search" and outcome.error is None
    assert [(m["name"], m["status"]) for m in outcome.output["members"]] == [
        ("Sam Okafor", "active"),
        ("Sam Rivera", "active"),
    ]
    assert outcome.output["more"] is False and not outcome.inverse_available
    assert outcome.duration_ms >= 0 and outcome.needs is None

    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None
    assert (row.status, row.tool, row.session_id, row.turn_id, row.idempotency_key) == (
        "succeeded",
        "members.search",
        acme.session_id,
        "turn_1",
        "turn_1:tu_1",
    )
    assert (row.input, row.output, row.error, row.inverse) == (
        {"query": "sam"},
        outcome.output,
        None,
        None,
    )
    assert row.completed_at is not None and row.completed_at >= row.created_at


async def test_a_write_is_recorded_pending_before_it_runs(acme: Studio) -> None:
    outcome = await acme.edge().run(acme.call("edge.peek", {"text": "hi"}), acme.ctx)
    # The handler saw its own row, pending, under the tool_use_id the runner gave it.
    assert outcome.output == {"text": "hi", "thread": "MainThread", "seen_status": "pending"}
    assert outcome.inverse_available
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and row.status == "succeeded"
    assert row.inverse == {"tool": "edge.unpeek", "input": {"text": "hi"}}


async def test_a_demo_write_records_output_inverse_and_its_audit_row(acme: Studio) -> None:
    args = {"title": "Hill sprints", "duration_min": 30, "notes": "Bring water"}
    outcome = await acme.runner.run(acme.call("workouts.create", args), acme.ctx)
    workout_id = outcome.output["id"]
    assert outcome == ToolOutcome(
        tool_use_id="tu_1",
        tool="workouts.create",
        ok=True,
        output={
            "id": workout_id,
            "title": "Hill sprints",
            "duration_min": 30,
            "scheduled_for": None,
            "member_id": None,
            "program_id": None,
            "notes": "Bring water",
        },
        inverse_available=True,
        duration_ms=outcome.duration_ms,
    )
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None
    assert (row.status, row.input, row.output) == ("succeeded", args, outcome.output)
    assert row.inverse == {"tool": "workouts.delete", "input": {"workout_id": workout_id}}
    assert await audit(acme.store) == [("workout.created", f"workout:{workout_id}", "tu_1")]


async def test_a_repeated_call_returns_the_stored_outcome_without_running(acme: Studio) -> None:
    call = acme.call("workouts.create", {"title": "Once only"})
    first = await acme.runner.run(call, acme.ctx)
    again = await acme.runner.run(call, acme.ctx)
    assert again == dataclasses.replace(first, duration_ms=0)
    assert await workouts_titled(acme.store, "Once only") == 1
    assert len(await audit(acme.store)) == 1

    edge = acme.edge()
    peek = acme.call("edge.peek", {"text": "x"}, "tu_2")
    assert (await edge.run(peek, acme.ctx)).ok
    assert (await edge.run(peek, acme.ctx)).output == {
        "text": "x",
        "thread": "MainThread",
        "seen_status": "pending",
    }
    assert RUNS["edge.peek"] == 1


async def test_another_call_under_a_recorded_tool_use_id_is_refused(acme: Studio) -> None:
    await acme.runner.run(acme.call("workouts.create", {"title": "Original"}), acme.ctx)
    changed = acme.call("workouts.create", {"title": "Changed"})
    renamed = acme.call("tasks.create", {"title": "Original"})
    for call in (changed, renamed):
        assert error_of(await acme.runner.run(call, acme.ctx)) == ToolFailure(
            code="tool_use_conflict",
            message="tool_use_id 'tu_1' is already recorded for a different call in this turn",
            hint="Use a new tool_use_id",
        )
    assert await workouts_titled(acme.store, "Changed") == 0


async def test_a_tool_use_id_reused_by_another_turn_session_or_org_is_another_call(
    acme: Studio,
) -> None:
    store = acme.store
    await seed_demo(store, "globex")
    there = str(uuid.uuid4())
    await store.sessions.create(org_id="globex", user_id="bo", session_id=there, title=None)
    call = acme.call("workouts.create", {"title": "Reused"})
    replays = [
        (call, acme.ctx),
        (dataclasses.replace(call, turn_id="turn_2"), acme.ctx),
        (
            dataclasses.replace(call, turn_id="turn_3", session_id=there),
            acme.as_role("owner", org="globex"),
        ),
    ]
    outcomes = [await acme.runner.run(c, ctx) for c, ctx in replays]
    undos = [await acme.runner.undo("tu_1", ctx, turn_id=c.turn_id) for c, ctx in replays]

    assert [(o.ok, o.error, o.inverse_available) for o in outcomes] == [(True, None, True)] * 3
    assert len({o.output["id"] for o in outcomes}) == 3  # three workouts, one per call
    assert [(u.ok, u.tool_use_id) for u in undos] == [(True, "tu_1-undo")] * 3
    assert await workouts_titled(store, "Reused") == 0


async def test_a_failed_call_runs_again_when_repeated(acme: Studio) -> None:
    edge = acme.edge()
    call = acme.call("edge.flaky", {"text": "retry me"})
    failed = await edge.run(call, acme.ctx)
    assert error_of(failed) == ToolFailure(
        code="busy", message="The studio system is busy", hint="Try again"
    )
    failed_row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert failed_row is not None and failed_row.status == "failed"

    retried = await edge.run(call, acme.ctx)
    assert retried.ok and retried.output == {
        "text": "retry me",
        "thread": "main",
        "seen_status": None,
    }
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and (row.status, row.error) == ("succeeded", None)
    assert RUNS["edge.flaky"] == 2


async def test_sync_handlers_run_in_a_worker_thread(acme: Studio) -> None:
    outcome = await acme.edge().run(acme.call("edge.echo_sync", {"text": "t"}), acme.ctx)
    assert outcome.ok and outcome.output["text"] == "t"
    assert outcome.output["thread"] != threading.main_thread().name
    assert RUNS["edge.echo_sync"] == 1


# failures


async def test_a_slow_tool_times_out_and_is_recorded_failed(acme: Studio) -> None:
    outcome = await acme.edge(timeout_s=0.05).run(acme.call("edge.slow", {"text": "z"}), acme.ctx)
    failure = ToolFailure(
        code="tool_timeout",
        message="edge.slow did not finish within 0.05 s",
        hint="Try once more, perhaps with a narrower input",
    )
    assert error_of(outcome) == failure
    assert outcome.duration_ms < 5_000
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None
    assert (row.status, row.error, row.output) == ("failed", failure.as_dict(), None)


async def test_a_tools_own_timeout_replaces_the_runners(acme: Studio) -> None:
    """An MCP toolset's owner sets its tools' limit: it wins over the runner's, both ways."""
    slow_tool = dataclasses.replace(EDGE.get("edge.slow"), timeout_s=0.05)
    runner = ToolRunner(ToolRegistry([slow_tool]), acme.store, timeout_s=30)
    outcome = await runner.run(acme.call("edge.slow", {"text": "z"}), acme.ctx)
    assert error_of(outcome).message == "edge.slow did not finish within 0.05 s"
    assert outcome.duration_ms < 5_000


async def test_an_unexpected_exception_is_a_generic_failure_that_hides_the_input(
    acme: Studio,
) -> None:
    edge = acme.edge()
    with capture_logs() as logs:
        outcome = await edge.run(acme.call("edge.crash", {"text": "hunter2-secret"}), acme.ctx)
        own = await edge.run(acme.call("edge.own_timeout", {"text": "x"}, "tu_2"), acme.ctx)
    assert error_of(outcome) == ToolFailure(
        code="tool_failed",
        message="edge.crash failed with an unexpected ValueError",
        hint="Tell the user it could not be done; retrying the same call is unlikely to help",
    )
    # A TimeoutError of the handler's own is a crash, not the runner's deadline.
    assert error_of(own).message == "edge.own_timeout failed with an unexpected TimeoutError"
    crashed = [e for e in logs if e["event"] == "tool.crashed"]
    assert [(e["tool"], e["tool_use_id"], e["exc_type"]) for e in crashed] == [
        ("edge.crash", "tu_1", "ValueError"),
        ("edge.own_timeout", "tu_2", "TimeoutError"),
    ]
    assert crashed[0]["where"].startswith("test_tool_runner.py:")
    assert "hunter2" not in json.dumps(logs, default=str) + outcome.as_result_text()
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and row.status == "failed" and "hunter2" not in str(row.error)


async def test_a_tool_error_reaches_the_model_as_code_message_and_hint(acme: Studio) -> None:
    outcome = await acme.edge().run(acme.call("edge.refuse", {"text": "kale"}), acme.ctx)
    failure = ToolFailure(code="out_of_stock", message="No 'kale' left", hint="Pick another item")
    assert error_of(outcome) == failure
    assert outcome.as_result_text() == (
        '{"error":{"code":"out_of_stock","message":"No \'kale\' left","hint":"Pick another item"}}'
    )
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and (row.status, row.error) == ("failed", failure.as_dict())


async def test_bad_output_fails_and_a_broken_inverse_only_loses_the_undo(acme: Studio) -> None:
    edge = acme.edge()
    bad = await edge.run(acme.call("edge.bad_output", {"text": "a"}), acme.ctx)
    assert (
        error_of(bad).message
        == "edge.bad_output returned a result that does not match its declared output"
    )
    kept = await edge.run(acme.call("edge.broken_inverse", {"text": "b"}, "tu_2"), acme.ctx)
    assert kept.ok and not kept.inverse_available
    row = await acme.store.tool_executions.get("tu_2", turn_id="turn_1")
    assert row is not None and (row.status, row.inverse) == ("succeeded", None)


# humans in the loop


async def test_destructive_tools_wait_for_approval_then_run_once(acme: Studio) -> None:
    created = await acme.runner.run(acme.call("workouts.create", {"title": "Doomed"}), acme.ctx)
    delete = acme.call("workouts.delete", {"workout_id": created.output["id"]}, "tu_del")

    waiting = await acme.runner.run(delete, acme.ctx)
    assert waiting == ToolOutcome(
        tool_use_id="tu_del", tool="workouts.delete", ok=False, needs="confirmation"
    )
    assert await workouts_titled(acme.store, "Doomed") == 1
    row = await acme.store.tool_executions.get("tu_del", turn_id="turn_1")
    assert row is not None and (row.status, row.input) == ("pending", delete.input)
    assert await acme.runner.run(delete, acme.ctx) == waiting  # still waiting, nothing ran

    approved = await acme.runner.run(delete, acme.ctx, approved=True)
    assert approved.ok
    assert approved.output == {"id": created.output["id"], "title": "Doomed", "deleted": True}
    assert await workouts_titled(acme.store, "Doomed") == 0
    # A resumed turn replays the result instead of asking (or deleting) again.
    assert await acme.runner.run(delete, acme.ctx) == dataclasses.replace(approved, duration_ms=0)

    bulk = acme.call("programs.publish_bulk", {"program_ids": ["prg_x"]}, "tu_bulk")
    assert (await acme.runner.run(bulk, acme.ctx)).needs == "confirmation"  # confirm="always"


async def test_a_picker_waits_for_the_pick_and_never_runs(acme: Studio) -> None:
    args = {
        "kind": "member",
        "prompt": "Which Sam?",
        "candidates": [
            {"id": "mem_a", "label": "Sam Rivera"},
            {"id": "mem_b", "label": "Sam Okafor"},
        ],
    }
    call = acme.call("ui_ask_user_to_pick", args)
    expected = ToolOutcome(tool_use_id="tu_1", tool="ui.ask_user_to_pick", ok=False, needs="pick")
    assert await acme.runner.run(call, acme.ctx) == expected
    assert await acme.runner.run(call, acme.ctx, approved=True) == expected
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and (row.status, row.tool, row.input) == (
        "pending",
        "ui.ask_user_to_pick",
        args,
    )
    assert expected.as_result_text() == '{"pending":"pick"}'


async def test_a_rejected_call_is_recorded_and_can_never_run(acme: Studio) -> None:
    created = await acme.runner.run(acme.call("workouts.create", {"title": "Kept"}), acme.ctx)
    delete = acme.call("workouts_delete", {"workout_id": created.output["id"]}, "tu_del")
    assert (await acme.runner.run(delete, acme.ctx)).needs == "confirmation"

    rejected = await acme.runner.reject(delete)
    failure = ToolFailure(
        code="rejected_by_user",
        message="The user declined to run workouts.delete; nothing was done",
        hint="Do not retry it; ask the user what they would like instead",
    )
    assert rejected == ToolOutcome(
        tool_use_id="tu_del", tool="workouts.delete", ok=False, error=failure
    )
    row = await acme.store.tool_executions.get("tu_del", turn_id="turn_1")
    assert row is not None and (row.status, row.error) == ("rejected_by_user", failure.as_dict())
    assert row.completed_at is not None

    assert await acme.runner.run(delete, acme.ctx, approved=True) == rejected  # a late approval
    assert await workouts_titled(acme.store, "Kept") == 1
    # A call rejected before it was ever recorded is recorded too; one that ran keeps its result.
    unseen = await acme.runner.reject(acme.call("tasks.delete", {"task_id": "t"}, "tu_new"))
    assert unseen.error == dataclasses.replace(
        failure, message="The user declined to run tasks.delete; nothing was done"
    )
    unseen_row = await acme.store.tool_executions.get("tu_new", turn_id="turn_1")
    assert unseen_row is not None and unseen_row.status == "rejected_by_user"
    assert await acme.runner.reject(acme.call("workouts.create", {"title": "Kept"})) == (
        dataclasses.replace(created, duration_ms=0)
    )


# undo


async def test_undo_runs_the_inverse_and_links_executions_and_audit_rows(acme: Studio) -> None:
    created = await acme.runner.run(
        acme.call("workouts.create", {"title": "Oops"}, "tu_create"), acme.ctx
    )
    workout_id = created.output["id"]

    undone = await acme.runner.undo("tu_create", acme.ctx, turn_id="turn_1")
    assert undone == ToolOutcome(
        tool_use_id="tu_create-undo",
        tool="workouts.delete",
        ok=True,
        output={"id": workout_id, "title": "Oops", "deleted": True},
        duration_ms=undone.duration_ms,
    )
    assert await workouts_titled(acme.store, "Oops") == 0

    original = await acme.store.tool_executions.get("tu_create", turn_id="turn_1")
    inverse_row = await acme.store.tool_executions.get("tu_create-undo", turn_id="turn_1")
    assert original is not None and inverse_row is not None
    assert original.status == "succeeded" and original.undone_by == "tu_create-undo"
    assert original.inverse == {
        "tool": "workouts.delete",
        "input": {"workout_id": workout_id},
        "undone_by": "tu_create-undo",
    }
    assert (inverse_row.status, inverse_row.session_id, inverse_row.turn_id, inverse_row.input) == (
        "succeeded",
        acme.session_id,
        "turn_1",
        {"workout_id": workout_id},
    )
    target = f"workout:{workout_id}"
    assert await audit(acme.store) == [
        ("workout.created", target, "tu_create"),
        ("workout.deleted", target, "tu_create-undo"),
    ]
    # Replaying the original now shows it can no longer be undone.
    replay = await acme.runner.run(
        acme.call("workouts.create", {"title": "Oops"}, "tu_create"), acme.ctx
    )
    assert replay.ok and not replay.inverse_available


async def test_undo_refusals(acme: Studio) -> None:
    runner = acme.runner
    await runner.run(acme.call("workouts.create", {"title": "Twice"}, "tu_ok"), acme.ctx)
    await runner.undo("tu_ok", acme.ctx, turn_id="turn_1")
    bad_member = {"title": "Orphan", "member_id": "mem_nope"}
    assert not (
        await runner.run(acme.call("workouts.create", bad_member, "tu_failed"), acme.ctx)
    ).ok
    created = await runner.run(acme.call("workouts.create", {"title": "Plain"}, "tu_c"), acme.ctx)
    patch = {"workout_id": created.output["id"], "duration_min": 45}
    assert (await runner.run(acme.call("workouts.update", patch, "tu_update"), acme.ctx)).ok

    async def refusal(tool_use_id: str, ctx: ToolContext = acme.ctx) -> tuple[str, str, str]:
        outcome = await runner.undo(tool_use_id, ctx, turn_id="turn_1")
        failure = error_of(outcome)
        assert outcome.tool_use_id == f"{tool_use_id}-undo"
        return outcome.tool, failure.code, failure.message

    assert await refusal("tu_missing") == (
        "",
        "not_found",
        "No tool execution 'tu_missing' in this org",
    )
    assert (await refusal("tu_c", acme.as_role("owner", org="globex")))[1] == "not_found"
    assert await refusal("tu_failed") == (
        "workouts.create",
        "not_undoable",
        "workouts.create call 'tu_failed' is failed: it changed nothing",
    )
    assert await refusal("tu_update") == (
        "workouts.update",
        "no_inverse",
        "workouts.update declares no way to undo it",
    )
    assert await refusal("tu_ok") == (
        "workouts.create",
        "already_undone",
        "workouts.create call 'tu_ok' was undone by 'tu_ok-undo'",
    )
    # The inverse still passes the gates: a member may not delete workouts.
    assert (await refusal("tu_c", acme.as_role("member")))[1] == "forbidden"
    assert await workouts_titled(acme.store, "Plain") == 1


async def test_undo_of_an_edge_write_runs_its_inverse_once(acme: Studio) -> None:
    edge = acme.edge()
    await edge.run(acme.call("edge.peek", {"text": "p"}), acme.ctx)
    assert (await edge.undo("tu_1", acme.ctx, turn_id="turn_1")).ok
    assert error_of(await edge.undo("tu_1", acme.ctx, turn_id="turn_1")).code == "already_undone"
    assert Counter({"edge.peek": 1, "edge.unpeek": 1}) == RUNS


# the result the model sees


def test_result_text_is_compact_json_and_bounded() -> None:
    def outcome(**fields: Any) -> ToolOutcome:
        return ToolOutcome(tool_use_id="tu", tool="x.y", **fields)

    assert outcome(ok=True, output={"id": "wo_1", "note": "été"}).as_result_text() == (
        '{"id":"wo_1","note":"été"}'
    )
    assert outcome(ok=True).as_result_text() == '{"ok":true}'
    failure = ToolFailure(code="not_found", message="No workout 'w'")
    assert outcome(ok=False, error=failure).as_result_text() == (
        '{"error":{"code":"not_found","message":"No workout \'w\'"}}'
    )
    assert outcome(ok=False, needs="confirmation").as_result_text() == '{"pending":"confirmation"}'

    big = outcome(ok=True, output={"rows": ["x" * 100] * 100})
    text = big.as_result_text()
    full = json.dumps(big.output, separators=(",", ":"))
    assert len(text) == MAX_RESULT_CHARS
    assert text.endswith(f"…[truncated: {len(full)} characters in all]")
    assert full.startswith(text[: MAX_RESULT_CHARS - 50])
    assert len(big.as_result_text(limit=200)) == 200


# a turn's first attempt: a read is one commit, recorded after it ran


class CountedWrites:
    """Counts the store's hot writes (``Database.write_soon``, which ``run_write`` queues
    through too) made under it."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = store.db.write_soon

        def counted(fn: Any, **pg: Any) -> Any:
            self.count += 1
            return real(fn, **pg)

        monkeypatch.setattr(store.db, "write_soon", counted)


async def test_a_first_attempt_read_is_one_insert_of_its_finished_row(
    acme: Studio, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = acme.edge()
    first = dataclasses.replace(acme.ctx, calls_run=set())
    writes = CountedWrites(acme.store, monkeypatch)

    outcome = await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), first)

    assert outcome.ok and RUNS["edge.echo_sync"] == 1
    assert writes.count == 1  # no pending row before the read: one commit for the step
    await runner.settled()  # queued, not waited for: the step's next append follows it
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and row.status == "succeeded" and row.input == {"text": "hi"}
    assert row.output == outcome.output and row.completed_at is not None
    assert first.calls_run == {"tu_1"}


async def test_a_first_attempt_read_that_fails_is_recorded_failed(acme: Studio) -> None:
    first, runner = dataclasses.replace(acme.ctx, calls_run=set()), acme.edge()
    outcome = await runner.run(acme.call("edge.own_timeout", {"text": "x"}), first)
    await runner.settled()
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert not outcome.ok and row is not None and row.status == "failed"
    assert row.error == error_of(outcome).as_dict() and row.output is None


async def test_a_reused_id_in_a_first_attempt_is_checked_before_it_runs(acme: Studio) -> None:
    runner, first = acme.edge(), dataclasses.replace(acme.ctx, calls_run=set())
    await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), first)

    again = await runner.run(acme.call("edge.echo_sync", {"text": "other"}), first)

    assert error_of(again).code == "tool_use_conflict"
    assert RUNS["edge.echo_sync"] == 1  # the conflicting call never ran


async def test_writes_and_later_attempts_still_record_their_intent_first(
    acme: Studio, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = acme.edge()
    writes = CountedWrites(acme.store, monkeypatch)
    first = dataclasses.replace(acme.ctx, calls_run=set())
    peeked = await runner.run(acme.call("edge.peek", {"text": "w"}, "tu_w"), first)
    assert peeked.ok and peeked.output["seen_status"] == "pending"  # intent before the write
    assert writes.count == 2
    # A resumed or taken-over attempt (calls_run None) looks first, then replays the read.
    await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), first)
    replay = await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), acme.ctx)
    assert replay.ok and RUNS["edge.echo_sync"] == 1


async def test_a_row_recorded_by_a_concurrent_attempt_stands_and_the_clash_is_logged(
    acme: Studio,
) -> None:
    """A first read's id is new to its turn: a row under it is a takeover's, which fences
    this attempt off the log. The read's row is not waited for, so its clash is logged."""
    executions = acme.store.tool_executions
    await executions.start(
        tool_use_id="tu_1", session_id=acme.session_id, turn_id="turn_1",
        tool="edge.peek", input={"text": "w"},
    )  # fmt: skip
    first, runner = dataclasses.replace(acme.ctx, calls_run=set()), acme.edge()
    with capture_logs() as logs:
        outcome = await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), first)
        await runner.settled()
    assert outcome.ok
    row = await executions.get("tu_1", turn_id="turn_1")
    assert row is not None and row.tool == "edge.peek" and row.status == "pending"
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == ["tool.record_clash"]


async def test_a_read_recorded_without_waiting_still_commits_before_the_next_write(
    acme: Studio,
) -> None:
    """The step's next write (its event) is queued after the row: it never commits first."""
    first, runner = dataclasses.replace(acme.ctx, calls_run=set()), acme.edge()
    await runner.run(acme.call("edge.echo_sync", {"text": "hi"}), first)
    await acme.store.log.append(acme.session_id, [UserMessage(message_id="m", text="next")])
    row = await acme.store.tool_executions.get("tu_1", turn_id="turn_1")
    assert row is not None and row.status == "succeeded"
