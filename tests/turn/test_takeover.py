"""A turn whose worker died is taken over from its log: leases, epochs and the checkpoint.

A "dead worker" is played by writing what a worker would have logged before it died (its
turn row under a lease that has run out, the plan, a started step, a tool call that ran
but whose result never reached the log); another worker's keeper then claims the turn
and runs it to the end. The two-process test with a real ``kill -9`` is in
tests/bosun/test_workers.py.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from events import (
    Event,
    PlanCreated,
    PlanStep,
    SessionStarted,
    StepStarted,
    TextDelta,
    ToolStarted,
    UserMessage,
)
from providers import ScriptedModel, ToolResult
from store import StaleOwnerError, Store
from tools import ToolCallRequest, ToolContext, ToolRunner
from tools.demo import demo_registry, seed_demo
from tools.demo._tables import WorkoutRow
from turn import TurnKit, TurnModels, TurnRunner
from turn._keeper import Keeper
from turn._models import ModelResolver

ORG = "acme"
GOAL = "Create a 30-minute mobility workout"
CREATE = {"title": "Mobility reset", "duration_min": 30}


async def dead_worker_turn(store: Store, *, ran_tool: bool = True) -> tuple[str, str]:
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
        session_id, opening, turn_id=turn_id, trace_id="trace-1", worker_id="dead:1",
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
        session_id="s-1", org_id=ORG, user_id="ada", text="hi",
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
