"""A turn whose worker died is taken over from its log: leases, epochs and the checkpoint.

A "dead worker" is played by writing what a worker would have logged before it died (its
turn row under a lease that has run out, the plan, a started step, a tool call that ran
but whose result never reached the log); another worker's keeper then claims the turn
and runs it to the end. The two-process test with a real ``kill -9`` is in
tests/bosun/test_workers.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from bosun_demo import demo_registry, seed_demo
from bosun_demo._tables import WorkoutRow
from context import answer_text, conversation
from events import (
    Event,
    PlanCreated,
    PlanStep,
    SessionStarted,
    StepStarted,
    TextDelta,
    ToolCompleted,
    ToolStarted,
    UserMessage,
)
from providers import Message, ScriptedModel, ToolResult
from store import StaleOwnerError, Store, StoredEvent, UsageRecord
from telemetry_testing import tracing
from tools import ToolCallRequest, ToolContext, ToolRunner
from turn import TurnKit, TurnModels, TurnOrder, TurnRunner
from turn._keeper import Keeper
from turn._models import ModelResolver
from turn._takeover import logged_plan, resets
from turn._workers import new_worker_id, worker_gone

ORG = "acme"
GOAL = "Create a 30-minute mobility workout"
CREATE = {"title": "Mobility reset", "duration_min": 30}


async def dead_worker_turn(
    store: Store, *, ran_tool: bool = True, trace_id: str = "trace-1"
) -> tuple[str, str]:
    """Log what a worker logged before it died mid-step: the tool ran, its result was
    never logged, and the worker's lease ran out."""
    await seed_demo(store, ORG)
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    opening: list[Event] = [
        SessionStarted(session_id=session_id, turn_id=turn_id),
        UserMessage(message_id="msg_1", text="a mobility workout please"),
    ]
    await store.log.open_turn(
        session_id, opening, turn_id=turn_id, trace_id=trace_id, worker_id="dead:1",
        lease_until=datetime.now(UTC) - timedelta(seconds=1),
        job={"org_id": ORG, "user_id": "ada", "role": "owner", "model": None},
    )  # fmt: skip
    step = PlanStep(id="s1", goal=GOAL, tools=["workouts.create"], max_tool_calls=2)
    progress: list[Event] = [
        PlanCreated(strategy="tool", reasoning="one write", steps=[step]),
        StepStarted(step_id="s1", executor_id="s1-exec"),
        TextDelta(delta="Creating it now."),
        ToolStarted(tool_use_id="toolu_1", tool="workouts.create", input=CREATE, step_id="s1"),
    ]
    await store.log.append(session_id, progress, turn_id=turn_id, epoch=0)
    if ran_tool:  # the dead worker ran the write; its tool_completed never reached the log
        runner = ToolRunner(demo_registry(), store)
        ctx = ToolContext(store=store, org_id=ORG, user_id="ada", role="owner")
        call = ToolCallRequest(tool_use_id="toolu_1", name="workouts.create", input=CREATE,
                               session_id=session_id, turn_id=turn_id, step_id="s1")  # fmt: skip
        assert (await runner.run(call, ctx)).ok
    return session_id, turn_id


def worker(store: Store, model: ScriptedModel, name: str, lease_s: float = 30.0) -> Keeper:
    kit = TurnKit(tools=demo_registry())
    runner = TurnRunner(store, turn_timeout_s=30, kit=kit, worker_id=name, lease_s=lease_s)
    return Keeper(store, runner, ModelResolver(TurnModels(executor=model), store.org_keys))


async def mobility_workouts(store: Store) -> int:
    async with store.db.read() as conn:
        query = select(func.count()).where(WorkoutRow.title == "Mobility reset")
        return int(await conn.scalar(query) or 0)


async def test_a_dead_workers_turn_is_taken_over_and_no_write_runs_twice(store: Store) -> None:
    session_id, turn_id = await dead_worker_turn(store)
    model = ScriptedModel([{"match": GOAL, "text": "Created 'Mobility reset' (30 min)."}])
    keeper = worker(store, model, "live:2")

    taken = await keeper.tick()
    await keeper._runner.wait(turn_id)
    again = await keeper.tick()

    log = await store.log.read(session_id, turn_id=turn_id)
    kinds = [e.type for e in log]
    completed = next(e.data for e in log if e.type == "tool_completed")
    turns = await store.sessions.turns(session_id)
    assert taken == [turn_id] and again == []
    # The cut-off call gets its recorded result; nothing ran twice.
    assert completed["tool_use_id"] == "toolu_1" and completed["ok"] is True
    assert await mobility_workouts(store) == 1
    # The model went on from the rebuilt transcript: its call, then the recorded result.
    request = model.calls[0]
    [result] = [p for p in request.messages[-1].parts if isinstance(p, ToolResult)]
    assert result.tool_use_id == "toolu_1" and "Mobility reset" in result.content
    assert kinds.count("step_started") == 1 and kinds[-4:] == [
        "step_completed", "message_done", "usage", "done",
    ]  # fmt: skip
    assert log[-1].data["status"] == "completed" and turns[-1].status == "completed"
    seqs = [e.seq for e in await store.log.read(session_id)]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate


async def test_a_call_cut_off_before_it_ran_is_reported_interrupted(store: Store) -> None:
    session_id, turn_id = await dead_worker_turn(store, ran_tool=False)
    model = ScriptedModel([{"match": GOAL, "text": "It did not go through; shall I retry?"}])
    keeper = worker(store, model, "live:2")

    await keeper.tick()
    await keeper._runner.wait(turn_id)

    log = await store.log.read(session_id, turn_id=turn_id)
    completed = next(e.data for e in log if e.type == "tool_completed")
    assert completed["ok"] is False and completed["error"]["code"] == "interrupted"
    assert await mobility_workouts(store) == 0
    assert "interrupted" in model.calls[0].messages[-1].parts[0].content  # type: ignore[union-attr]


async def test_the_old_owners_late_writes_are_refused(store: Store) -> None:
    session_id, turn_id = await dead_worker_turn(store)
    model = ScriptedModel([{"match": GOAL, "text": "Done."}])
    keeper = worker(store, model, "live:2")
    await keeper.tick()
    await keeper._runner.wait(turn_id)
    before = len(await store.log.read(session_id))

    with pytest.raises(StaleOwnerError):  # the dead worker wakes up and writes
        await store.log.append(session_id, [TextDelta(delta="late")], turn_id=turn_id, epoch=0)

    assert len(await store.log.read(session_id)) == before


async def test_a_live_worker_keeps_its_lease_and_loses_a_taken_turn(store: Store) -> None:
    gate = asyncio.Event()

    async def slow(_request: object) -> str:
        await gate.wait()
        return "Finally."

    from providers import FunctionModel

    model = FunctionModel(slow)
    await store.sessions.create(org_id=ORG, user_id="ada", session_id="s-1", title=None)
    a = worker(store, ScriptedModel([]), "a:1", lease_s=30)
    b = worker(store, ScriptedModel([{"text": "Taken over."}]), "b:1", lease_s=30)
    resolver_models = TurnModels(executor=model)
    handle = await a._runner.start(
        TurnOrder(org_id=ORG, user_id="ada"),
        session_id="s-1", text="hi",
        models=await ModelResolver(resolver_models, store.org_keys).resolve(
            org_id=ORG, requested=None),
        trace_id="t",
    )  # fmt: skip
    await asyncio.sleep(0.05)

    held_before = await store.leases.holder(handle.turn_id)
    await a.tick()  # renews
    held_after = await store.leases.holder(handle.turn_id)
    assert await b.tick() == []  # a live lease is not taken

    # A's lease runs out (say it stalled): B takes the turn; A stops its own copy.
    async with store.db.write() as conn:
        from sqlalchemy import update

        from store._models import TurnRow

        await conn.execute(
            update(TurnRow).where(TurnRow.id == handle.turn_id)
            .values(lease_until=datetime.now(UTC) - timedelta(seconds=1))
        )  # fmt: skip
    assert await b.tick() == [handle.turn_id]
    await a.tick()
    gate.set()
    await a._runner.wait(handle.turn_id)
    await b._runner.wait(handle.turn_id)

    log = await store.log.read("s-1", turn_id=handle.turn_id)
    answer = "".join(e.data["delta"] for e in log if e.type == "text_delta")
    assert held_before[0] == held_after[0] == "a:1"
    assert held_before[1] is not None and held_after[1] is not None
    assert held_after[1] >= held_before[1]
    assert answer == "Taken over." and [e.type for e in log].count("done") == 1
    assert (await store.leases.holder(handle.turn_id))[0] is None  # finished: no lease


async def cut_off_answer(store: Store, progress: list[Event], *, worker: str = "dead:1") -> str:
    """A turn whose worker logged ``progress`` (its plan, part of its answer) and died:
    its lease has run out and its planner call has a usage row but no ``usage`` event."""
    await seed_demo(store, ORG)
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    opening: list[Event] = [
        SessionStarted(session_id=session_id, turn_id=turn_id),
        UserMessage(message_id="msg_1", text="count to five"),
    ]
    await store.log.open_turn(
        session_id, opening, turn_id=turn_id, trace_id="trace-1", worker_id=worker,
        lease_until=datetime.now(UTC) - timedelta(seconds=1),
        job={"org_id": ORG, "user_id": "ada", "role": "owner", "model": None},
    )  # fmt: skip
    if progress:
        await store.log.append(session_id, progress, turn_id=turn_id, epoch=0)
    await store.sessions.record_usage(
        UsageRecord(session_id=session_id, turn_id=turn_id, org_id=ORG, user_id="ada",
                    role="planner", model="scripted", input_tokens=1000, output_tokens=50)
    )  # fmt: skip
    return session_id


async def test_an_answer_cut_off_mid_stream_is_reset_and_told_once(store: Store) -> None:
    simple = PlanCreated(strategy="simple", reasoning="talk")
    words = [TextDelta(delta=w) for w in ("one ", "two ", "three ")]
    session_id = await cut_off_answer(store, [simple, *words])
    answer = {"text": "one two three four five", "usage": {"input_tokens": 200}}
    keeper = worker(store, ScriptedModel([answer]), "live:2")

    [turn_id] = await keeper.tick()
    await keeper._runner.wait(turn_id)

    log = await store.log.read(session_id)
    first = next(e.seq for e in log if e.type == "text_delta")
    [reset] = [e for e in log if e.type == "message_reset"]
    again = [e.seq for e in log if e.type == "text_delta" and e.seq > reset.seq]
    usage = next(e.data for e in log if e.type == "usage")
    assert reset.data == {"message_id": "msg_1", "reason": "takeover", "from_seq": first,
                          "type": "message_reset"}  # fmt: skip
    assert again and reset.seq < again[0]  # logged before the new attempt's first delta
    assert answer_text(log) == "one two three four five"  # what POST /v1/chat answers
    assert conversation(log)[-1] == Message.assistant("one two three four five")
    # The dead attempt's planner call is in the turn's usage, beside the new answer's.
    assert usage["by_role"]["planner"]["input_tokens"] == 1000
    assert usage["input_tokens"] == 1200 and len(usage["calls"]) == 2


async def test_a_turn_cut_off_while_planning_counts_each_call_once(store: Store) -> None:
    session_id = await cut_off_answer(store, [])  # its planner call ran; no plan was logged
    model = ScriptedModel([
        {"match": "You are the planner", "text": '{"strategy": "simple", "reasoning": "talk"}',
         "usage": {"input_tokens": 10}},
        {"text": "one two", "usage": {"input_tokens": 200}},
    ])  # fmt: skip
    runner = TurnRunner(store, turn_timeout_s=30, kit=TurnKit(), worker_id="live:2")
    models = TurnModels(executor=model, planner=model)
    keeper = Keeper(store, runner, ModelResolver(models, store.org_keys))

    [turn_id] = await keeper.tick()
    await runner.wait(turn_id)

    log = await store.log.read(session_id)
    usage = next(e.data for e in log if e.type == "usage")
    assert [c["input_tokens"] for c in usage["calls"]] == [1000, 10, 200]
    assert usage["by_role"]["planner"]["input_tokens"] == 1010
    assert not any(e.type == "message_reset" for e in log)  # nothing was streamed


async def test_a_step_keeps_its_text_before_its_calls_and_resets_what_followed(
    store: Store,
) -> None:
    session_id, turn_id = await dead_worker_turn(store)
    done = ToolCompleted(tool_use_id="toolu_1", ok=True, output={"id": "wo_1"})
    after = [done, TextDelta(delta="Created 'Mobility"), TextDelta(delta=" reset' for")]
    await store.log.append(session_id, after, turn_id=turn_id, epoch=0)
    model = ScriptedModel([{"match": GOAL, "text": "Created 'Mobility reset' (30 min)."}])
    keeper = worker(store, model, "live:2")

    await keeper.tick()
    await keeper._runner.wait(turn_id)

    log = await store.log.read(session_id, turn_id=turn_id)
    cut = next(e.seq for e in log if e.data.get("delta") == "Created 'Mobility")
    [reset] = [e.data for e in log if e.type == "message_reset"]
    assert reset["from_seq"] == cut and "step_id" not in reset  # a tool plan's step: the answer
    assert answer_text(log) == "Creating it now.Created 'Mobility reset' (30 min)."
    # The model was shown its call and the logged result, not the abandoned text.
    said = [m for m in model.calls[0].messages if m.role == "assistant"]
    assert [m.text for m in said] == ["Creating it now."]


def _logged(*events: tuple[str, dict[str, object]]) -> list[StoredEvent]:
    now = datetime.now(UTC)
    return [
        StoredEvent(session_id="s", seq=seq, type=kind, data={**data, "type": kind},
                    turn_id="t", created_at=now)
        for seq, (kind, data) in enumerate(events, start=1)
    ]  # fmt: skip


STEP_DONE = {"executor_id": "e1", "ok": True, "summary": "", "tool_calls": 0, "tokens": 0,
             "duration_ms": 1}  # fmt: skip


def test_what_a_takeover_resets_in_a_complex_plan_and_a_forced_loop() -> None:
    steps = [{"id": "s1", "goal": "a"}, {"id": "s2", "goal": "b"}]
    complex_log = _logged(
        ("plan_created", {"strategy": "complex", "reasoning": "two", "steps": steps}),
        ("step_started", {"step_id": "s1", "executor_id": "e1"}),
        ("step_started", {"step_id": "s2", "executor_id": "e2"}),
        ("text_delta", {"delta": "s1 says", "step_id": "s1"}),  # 4
        ("step_completed", {"step_id": "s1", **STEP_DONE}),
        ("text_delta", {"delta": "s2 says", "step_id": "s2"}),  # 6: s2 was still running
    )
    plan = logged_plan(complex_log)
    assert plan is not None
    assert [(r.from_seq, r.step_id) for r in resets(complex_log, "m", plan)] == [(6, "s2")]
    merging = [*complex_log, *_logged(*[("text_delta", {"delta": "merged"})] * 7)[6:]]
    assert [(r.from_seq, r.step_id) for r in resets(merging, "m", plan)] == [(6, "s2"), (7, None)]

    forced = _logged(
        ("plan_created", {"strategy": "tool", "reasoning": "loop",
                          "steps": [{"id": "s1", "goal": "a", "tools": ["message.notify_user"]}]}),
        ("step_started", {"step_id": "s1", "executor_id": "e1"}),
        ("tool_started", {"tool_use_id": "c1", "tool": "message.notify_user",
                          "input": {"message": "Hi there"}, "step_id": "s1"}),
        ("tool_completed", {"tool_use_id": "c1", "ok": True, "output": {}}),
        ("agent_message", {"text": "Hi there", "tool_use_id": "c1", "step_id": "s1",
                           "in_answer": True}),
        ("text_delta", {"delta": "Hi there"}),  # 6: told, a call's effect: it stands
        ("text_delta", {"delta": "Now I"}),  # 7: the model's next words, cut off
    )  # fmt: skip
    plan = logged_plan(forced)
    assert plan is not None
    assert [r.from_seq for r in resets(forced, "m", plan)] == [7]
    assert [r.from_seq for r in resets(forced[:6], "m", plan)] == []


async def test_a_takeover_fences_that_turn_only(store: Store) -> None:
    for session_id, turn_id, lease_s in (("s-1", "t-1", -1), ("s-2", "t-2", 60)):
        # t-1's lease has run out; one turn runs per session, so t-2 runs in another
        await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
        await store.log.open_turn(
            session_id, [UserMessage(message_id=f"m-{turn_id}", text="hi")], turn_id=turn_id,
            trace_id="tr", worker_id="a:1",
            lease_until=datetime.now(UTC) + timedelta(seconds=lease_s),
        )  # fmt: skip

    [claim] = await store.leases.claim_expired("b:1", 30)

    assert (claim.turn_id, claim.epoch) == ("t-1", 1)
    # A still runs t-2: its writes go on under its epoch.
    await store.log.append("s-2", [TextDelta(delta="still mine")], turn_id="t-2", epoch=0)
    with pytest.raises(StaleOwnerError):  # t-1's late write is refused
        await store.log.append("s-1", [TextDelta(delta="late")], turn_id="t-1", epoch=0)
    await store.log.append("s-1", [TextDelta(delta="new owner")], turn_id="t-1", epoch=1)


async def test_a_turn_whose_process_is_gone_is_taken_over_at_once_on_sqlite(
    store: Store,
) -> None:
    dead = f"{socket.gethostname()}:{ended_pid()}:abc123"
    await store.sessions.create(org_id=ORG, user_id="ada", session_id="s-1", title=None)
    await store.log.open_turn(
        "s-1", [UserMessage(message_id="m-1", text="hi")], turn_id="t-1", trace_id="tr",
        worker_id=dead, lease_until=datetime.now(UTC) + timedelta(seconds=60),
        job={"org_id": ORG, "user_id": "ada", "role": "owner", "model": None},
    )  # fmt: skip
    keeper = worker(store, ScriptedModel([{"text": "Back."}]), new_worker_id())

    taken = await keeper.tick()
    await keeper._runner.wait("t-1")

    if store.dialect == "sqlite":  # the database is on this host: the pid tells
        assert taken == ["t-1"]
        assert (await store.sessions.turns("s-1"))[0].status == "completed"
    else:  # a worker elsewhere may only be slow: its lease decides
        assert taken == []


def ended_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


def test_worker_gone_is_sure_or_says_no() -> None:
    host = socket.gethostname()
    pid = ended_pid()
    assert worker_gone(f"{host}:{pid}:abc123")
    assert worker_gone(f"{host}:{os.getpid()}:abc123")  # a predecessor with this pid
    assert not worker_gone(new_worker_id())  # this process's own
    assert not worker_gone(f"{host}:{os.getppid()}:abc123")  # alive
    assert not worker_gone(f"elsewhere:{pid}:abc123")  # another host: unknown
    assert not worker_gone("dead:1")


async def test_a_takeover_goes_on_in_the_dead_workers_trace(store: Store) -> None:
    trace_id = uuid.uuid4().hex  # the dead worker's turn was started in this trace
    _, turn_id = await dead_worker_turn(store, trace_id=trace_id)
    model = ScriptedModel([{"match": GOAL, "text": "Created 'Mobility reset' (30 min)."}])
    keeper = worker(store, model, "live:2")
    with tracing() as spans:
        await keeper.tick()
        await keeper._runner.wait(turn_id)

    [root] = [s for s in spans.all() if s.name.startswith("invoke_agent")]
    assert f"{root.context.trace_id:032x}" == trace_id and root.parent is None
    assert dict(root.attributes or {})["bosun.turn.takeover"] is True
    assert dict(root.attributes or {})["bosun.turn.status"] == "completed"
    assert {f"{s.context.trace_id:032x}" for s in spans.all()} == {trace_id}
