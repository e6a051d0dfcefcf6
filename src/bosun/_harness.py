"""One turn in this process, on a throwaway database: ``bosun.testing.run_turn``.

It wires what ``bosun chat`` and the HTTP routes wire (a store, a turn runner, the models
by role) around the caller's tools and model doubles, so a library user's async test suite
can run whole turns and assert on their events, with no server and no network.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from bosun.migrate import upgrade
from events import INTERNAL_EVENTS, Event
from providers import Model
from store import Store
from tools import ToolRegistry, UserRole
from turn import TurnKit, TurnOrder, TurnRoleModels, TurnRunner, new_session

LEASE_MARGIN_S = 30.0  # no keeper renews the lease here: it outlives the turn's timeout


async def run_turn(
    message: str,
    *,
    model: Model,
    tools: ToolRegistry | None = None,
    planner: Model | None = None,
    org_id: str = "test-org",
    user_id: str = "test-user",
    role: UserRole = "owner",
    database_url: str | None = None,
    timeout_s: float = 60.0,
) -> list[Event]:
    """Run one turn of a new session and return the events a client would stream, in
    order (the last one is ``Done``).

    ``model`` runs the plan's steps with ``tools`` and writes the answer; ``planner``
    plans (default: ``model`` too, so one script serves every call, in order). Tools see
    a store on a throwaway SQLite file, or on ``database_url`` (migrated first) if given.
    """
    async with _database(database_url) as url:
        store = Store(url)
        runner = TurnRunner(
            store, turn_timeout_s=timeout_s, kit=TurnKit(tools=tools),
            lease_s=timeout_s + LEASE_MARGIN_S,
        )  # fmt: skip
        try:
            await upgrade(store)  # the core: your tools keep no tables of their own here
            session_id = await new_session(
                store, org_id=org_id, user_id=user_id, first_message=message
            )
            models = TurnRoleModels(
                answer=model, planner=planner or model, summariser=None, executor=model
            )
            handle = await runner.start(
                TurnOrder(org_id=org_id, user_id=user_id, role=role),
                session_id=session_id, text=message, models=models, trace_id=uuid.uuid4().hex,
            )  # fmt: skip
            await runner.wait(handle.turn_id)
            logged = await store.log.read(session_id, turn_id=handle.turn_id)
        finally:
            await runner.shutdown(grace_s=0)  # a cancelled caller leaves no turn running
            await store.close()
    return [stored.event for stored in logged if stored.type not in INTERNAL_EVENTS]


@contextlib.asynccontextmanager
async def _database(url: str | None) -> AsyncIterator[str]:
    """``url``, or a throwaway SQLite file's, deleted afterwards."""
    if url is not None:
        yield url
        return
    directory = await asyncio.to_thread(tempfile.mkdtemp, prefix="bosun-turn-")
    try:
        yield f"sqlite+aiosqlite:///{Path(directory) / 'bosun.db'}"
    finally:
        await asyncio.to_thread(shutil.rmtree, directory)
