"""Suspended work ends: a question unanswered for ``pending_ttl_s`` expires, and a new
message supersedes it, on one worker or several, across restarts.

The turn ends ``done {"status": "expired" | "superseded"}``, its pending calls are settled
the same way, a late answer is 409 (``tool_expired`` / ``tool_superseded``) and nothing
the user did not approve runs; ``bosun prune`` may then delete the session.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from bosun.settings import Settings
from bosun_demo import demo_registry, seed_demo, seed_id
from bosun_demo._tables import WorkoutRow
from conftest import DEMO, JWT_SECRET, Server
from helpers import Frame, stream_post, stream_turn, types
from providers import ScriptedModel
from store import Store
from turn import TurnKit, TurnModels, TurnOrder, TurnRunner
from turn._keeper import Keeper
from turn._models import ModelResolver

ORG = "acme"
ENGINE = seed_id(ORG, "wo", 4)
GOAL = "Delete the Engine builder workout"
PLANNER = "You are the planner"


def script() -> list[dict[str, Any]]:
    """A turn that asks to confirm a delete, then a small-talk turn; repeated."""
    plan = {
        "strategy": "tool",
        "reasoning": "one destructive change",
        "steps": [{"id": "s1", "goal": GOAL, "tools": ["workouts.delete"]}],
    }
    call = {"id": "t_del", "name": "workouts_delete", "input": {"workout_id": ENGINE}}
    simple = {"strategy": "simple", "reasoning": "small talk"}
    return [  # "Never mind" first: its requests also hold the earlier message, GOAL
        {"match": "Never mind", "text": json.dumps(simple)},
        {"match": "Never mind", "text": "Fine, nothing was deleted."},
        {"match": PLANNER, "text": json.dumps(plan)},
        {"match": GOAL, "tool_calls": [call]},
        {"match": GOAL, "text": "Deleted the Engine builder workout."},  # after approval
    ]


def server(db_url: str, *, ttl_s: float, lease_s: float = 1.0) -> Server:
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,
        limits={"requests_per_minute": 0, "tokens_per_minute": 0, "pending_ttl_s": ttl_s},  # type: ignore[arg-type]
        workers={"lease_s": lease_s},  # type: ignore[arg-type]
    )
    model = ScriptedModel(script(), repeat=True)
    return Server(settings, TurnModels(executor=model, planner=model))


async def ask(srv: Server) -> tuple[str, list[Frame]]:
    await seed_demo(srv.store, ORG)
    frames = await stream_turn(srv.client, {"message": GOAL}, srv.auth(role="owner"))
    assert frames[-1].data["status"] == "suspended", types(frames)
    return frames[0].data["session_id"], frames


async def confirm(srv: Server, session_id: str) -> Any:
    return await srv.client.post(
        f"/v1/sessions/{session_id}/confirm/t_del",
        json={"approved": True},
        headers=srv.auth(role="owner"),
    )


async def ended_as(store: Store, session_id: str, status: str, timeout_s: float = 8.0) -> None:
    """Wait until the session's first turn has ended ``status`` (the keeper works alone)."""
    with store.log.notifier.listen(session_id) as logged:
        async with asyncio.timeout(timeout_s):
            while (await store.sessions.turns(session_id))[0].status != status:
                await logged.wait()  # the keeper's close appends ``done``
                logged.clear()


async def call_status(store: Store, session_id: str) -> str:
    row = await store.tool_executions.latest("t_del", session_id=session_id)
    assert row is not None
    return row.status


async def engine_exists(store: Store) -> bool:
    async with store.db.read() as conn:
        found = await conn.scalar(select(WorkoutRow.id).where(WorkoutRow.id == ENGINE))
    return found is not None


async def test_an_unanswered_confirmation_expires(db_url: str) -> None:
    async with server(db_url, ttl_s=1.0) as srv:
        session_id, _ = await ask(srv)
        await ended_as(srv.store, session_id, "expired")
        late = await confirm(srv, session_id)
        log = await srv.store.log.read(session_id)
        status = await call_status(srv.store, session_id)
        still_there = await engine_exists(srv.store)
        later = datetime.now(UTC) + timedelta(seconds=1)
        pruned = await srv.store.retention.prune(before=later, apply=True)
        gone = await srv.store.sessions.get(session_id) is None

    assert log[-1].type == "done" and log[-1].data["status"] == "expired"
    assert status == "expired" and still_there
    assert late.status_code == 409 and late.json()["error"]["code"] == "tool_expired"
    assert (pruned.sessions, pruned.kept_waiting, gone) == (1, 0, True)  # no longer waiting


async def test_a_new_message_supersedes_the_suspended_turn(db_url: str) -> None:
    async with server(db_url, ttl_s=3600) as srv:
        session_id, first = await ask(srv)
        body = {"message": "Never mind, thanks", "session_id": session_id}
        second = await stream_turn(srv.client, body, srv.auth(role="owner"))
        late = await confirm(srv, session_id)
        log = await srv.store.log.read(session_id)
        status = await call_status(srv.store, session_id)
        turns = await srv.store.sessions.turns(session_id)
        still_there = await engine_exists(srv.store)

    old_turn = first[0].data["turn_id"]
    closing = next(e for e in log if e.turn_id == old_turn and e.seq > first[-1].id)
    opening = next(e for e in log if e.type == "user_message" and e.seq > first[-1].id)
    assert closing.type == "done" and closing.data["status"] == "superseded"
    assert closing.seq < opening.seq  # closed before the new turn's first event
    assert [t.status for t in turns] == ["superseded", "completed"]
    assert second[-1].data["status"] == "completed" and status == "superseded" and still_there
    assert late.status_code == 409 and late.json()["error"]["code"] == "tool_superseded"


async def test_expiry_and_supersession_survive_a_restart(db_url: str) -> None:
    # Suspended under processes that stop (a long lease: their keepers never look again).
    async with server(db_url, ttl_s=1.0, lease_s=600) as srv:
        expiring, _ = await ask(srv)
    await asyncio.sleep(1.1)
    async with server(db_url, ttl_s=1.0) as srv:  # a new process: its keeper expires it
        await ended_as(srv.store, expiring, "expired")
        late = await confirm(srv, expiring)
    async with server(db_url, ttl_s=3600, lease_s=600) as srv:
        superseded, _ = await ask(srv)
    async with server(db_url, ttl_s=3600) as srv:  # and another supersedes what was left
        body = {"message": "Never mind", "session_id": superseded}
        frames = await stream_turn(srv.client, body, srv.auth(role="owner"))
        turns = await srv.store.sessions.turns(superseded)
    assert late.json()["error"]["code"] == "tool_expired"
    assert frames[-1].data["status"] == "completed"
    assert [t.status for t in turns] == ["superseded", "completed"]


async def test_one_worker_of_several_expires_a_turn(store: Store) -> None:
    """Two keepers over one database race to expire the same turn: exactly one does."""
    await seed_demo(store, ORG)
    model = ScriptedModel(script())
    kit = TurnKit(tools=demo_registry())
    keepers = []
    for name in ("w1", "w2"):
        runner = TurnRunner(store, turn_timeout_s=30, kit=kit, worker_id=name, lease_s=30)
        resolver = ModelResolver(TurnModels(executor=model, planner=model), store.org_keys)
        keepers.append(Keeper(store, runner, resolver, pending_ttl_s=0.2))
    runner = keepers[0]._runner
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=SESSION, title=None)
    models = await keepers[0]._models.resolve(org_id=ORG, requested=None)
    handle = await runner.start(
        TurnOrder(org_id=ORG, user_id="ada", role="owner"),
        session_id=SESSION, text=GOAL,
        models=models, trace_id="t1",
    )  # fmt: skip
    await runner.wait(handle.turn_id)
    await asyncio.sleep(0.3)

    first, second = await asyncio.gather(keepers[0].expire(), keepers[1].expire())

    assert sorted(first + second) == [handle.turn_id]
    log = await store.log.read(SESSION, turn_id=handle.turn_id)
    assert [e.data["status"] for e in log if e.type == "done"] == ["suspended", "expired"]


SESSION = "00000000-0000-4000-8000-00000000e4e4"


async def test_a_suspended_answer_is_reachable_until_it_expires(db_url: str) -> None:
    """Before the deadline the confirmation still resumes the turn (nothing expired early)."""
    async with server(db_url, ttl_s=3600) as srv:
        session_id, _ = await ask(srv)
        frames = await stream_post(
            srv.client,
            f"/v1/sessions/{session_id}/confirm/t_del",
            {"approved": True},
            srv.auth(role="owner"),
        )
        gone = not await engine_exists(srv.store)
    assert frames[-1].data["status"] == "completed" and gone
