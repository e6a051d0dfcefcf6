"""Double texting: a message sent while a turn runs in its session, over HTTP, on SQLite
and PostgreSQL, on one worker and on two.

The agent's ``double_texting`` decides: ``reject`` (409 ``turn_in_progress``, nothing
runs, nothing counted), ``enqueue`` (the message runs once the running turn ends and its
model sees that turn's answer) or ``interrupt`` (the running turn stops, its answer so
far kept and marked, then the message runs). The first turn's model call is held on an
event, so it is running when the second message arrives; a watcher reads the turns table
throughout, and the database refuses a second running turn in a session outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx_sse import aconnect_sse
from sqlalchemy import func, select

from bosun.settings import Settings
from conftest import DEMO, JWT_SECRET, Server, ServerFactory
from events import SessionStarted, TextDelta, UserMessage
from helpers import Frame, stream_turn, types
from providers import FunctionModel, ModelRequest
from store import Store, TurnInProgressError
from store._models import TurnRow
from turn import TurnModels
from turn._keeper import Keeper

FIRST, SECOND = "Plan my week", "Also add a rest day"
PARTIAL, REST = "Monday: legs. ", "Tuesday: arms."
OWNER = {"role": "owner"}
NOTE = "note-7f3a: the user is on the weekly plan page"


@dataclass
class Held:
    """A model whose answer to FIRST stops after its first words until ``release``; every
    other request is answered at once, saying what it saw."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    answering: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[str] = field(default_factory=list)  # SECOND's requests: their whole text

    def model(self) -> FunctionModel:
        async def reply(request: ModelRequest) -> AsyncIterator[str]:
            text = "\n".join(m.text for m in request.messages)
            if request.messages[-1].text.endswith(FIRST):
                yield PARTIAL
                self.answering.set()
                await self.release.wait()
                yield REST
            else:
                if SECOND in request.messages[-1].text:
                    self.seen.append(text)
                yield "Rest day added on Sunday."

        return FunctionModel(reply)


async def most_running(store: Store) -> int:
    """The most turns running at once in one session, as the table says now."""
    per_session = (
        select(func.count().label("n"))
        .where(TurnRow.status == "running")
        .group_by(TurnRow.session_id)
        .subquery()
    )
    async with store.db.read() as conn:
        return int(await conn.scalar(select(func.coalesce(func.max(per_session.c.n), 0))) or 0)


@contextlib.asynccontextmanager
async def watching(store: Store) -> AsyncIterator[list[int]]:
    """Sample the turns table every few milliseconds while the block runs."""
    samples: list[int] = []

    async def watch() -> None:
        while True:
            samples.append(await most_running(store))
            await asyncio.sleep(0.005)

    task = asyncio.create_task(watch())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def set_strategy(server: Server, strategy: str) -> None:
    body = {"name": "Coach", "double_texting": strategy}
    response = await server.client.put(
        "/v1/agents/default", json=body, headers=server.auth(**OWNER)
    )
    assert response.status_code == 200, response.text


async def open_session(server: Server) -> str:
    frames = await stream_turn(server.client, {"message": "hello"}, server.auth())
    return str(frames[0].data["session_id"])


async def first_turn(server: Server, held: Held, session_id: str) -> asyncio.Task[list[Frame]]:
    """FIRST streaming in the session, its model call held after its first words."""
    body = {"message": FIRST, "session_id": session_id}
    task = asyncio.create_task(stream_turn(server.client, body, server.auth()))
    async with asyncio.timeout(10):
        await held.answering.wait()
    return task


async def statuses(store: Store, session_id: str) -> list[str]:
    return [t.status for t in await store.sessions.turns(session_id)]


async def until(store: Store, session_id: str, wanted: list[str]) -> None:
    """Wait (up to 10 s) until the session's turns have the ``wanted`` statuses."""
    for _ in range(1000):
        if await statuses(store, session_id) == wanted:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{await statuses(store, session_id)} never became {wanted}")


def answer(frames: list[Frame]) -> str:
    return "".join(f.data["delta"] for f in frames if f.event == "text_delta")


@contextlib.asynccontextmanager
async def servers(db_url: str, held: Held, count: int) -> AsyncIterator[list[Server]]:
    """``count`` workers (apps with their own runner and keeper) on one database."""
    settings = Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
        workers={"lease_s": 1.0},  # type: ignore[arg-type]
    )
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(Server(settings, TurnModels(executor=held.model())))
            for _ in range(count)
        ]


@pytest.fixture
def held() -> Iterator[Held]:
    held = Held()
    yield held
    held.release.set()  # a failed test must not leave the first turn hanging


async def test_reject_is_409_naming_the_running_turn_and_nothing_runs_or_counts(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(
        TurnModels(executor=held.model()), requests_per_minute=3
    ) as server:  # hello, FIRST and SECOND again: a counted 409 would make the last one 429
        session_id = await open_session(server)
        async with watching(server.store) as samples:
            first = await first_turn(server, held, session_id)
            running = (await server.store.sessions.running_turns(session_id))[0].id

            second = await server.client.post(
                "/v1/chat", json={"message": SECOND, "session_id": session_id},
                headers=server.auth(),
            )  # fmt: skip
            assert second.status_code == 409, second.text
            assert second.json()["error"]["code"] == "turn_in_progress"
            assert running in second.json()["error"]["message"]
            assert second.headers["X-Turn-Id"] == running
            assert held.seen == []  # no model call for SECOND
            assert await statuses(server.store, session_id) == ["completed", "running"]

            held.release.set()
            frames = await first
            assert answer(frames) == PARTIAL + REST
            again = await server.client.post(
                "/v1/chat", json={"message": SECOND, "session_id": session_id},
                headers=server.auth(),
            )  # fmt: skip
            assert again.status_code == 200, again.text
        assert max(samples) == 1


async def test_an_idempotent_retry_of_the_running_turn_reattaches(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        session_id = await open_session(server)
        body = {"message": FIRST, "session_id": session_id}
        headers = {**server.auth(), "Idempotency-Key": "first-try"}
        first = asyncio.create_task(stream_turn(server.client, body, headers))
        async with asyncio.timeout(10):
            await held.answering.wait()
        retry = asyncio.create_task(stream_turn(server.client, body, headers))
        await asyncio.sleep(0.05)  # the retry is attached before the turn goes on
        held.release.set()
        async with asyncio.timeout(10):
            frames, again = await first, await retry
        assert frames[-1].data["status"] == "completed"
        assert again[-1].data["status"] == "completed"
        assert {f.data.get("turn_id") for f in again if f.event == "session_started"} <= {
            frames[0].data["turn_id"]
        }
        assert await statuses(server.store, session_id) == ["completed", "completed"]


async def test_enqueue_runs_the_second_turn_after_the_first_and_it_sees_the_answer(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        await set_strategy(server, "enqueue")
        session_id = await open_session(server)
        async with watching(server.store) as samples:
            first = await first_turn(server, held, session_id)
            body = {"message": SECOND, "session_id": session_id, "context": {"notes": NOTE}}
            second = asyncio.create_task(stream_turn(server.client, body, server.auth()))
            await until(server.store, session_id, ["completed", "running", "queued"])
            assert held.seen == []  # queued: nothing runs yet
            whole = asyncio.create_task(reattach(server, session_id))  # follows both turns
            await asyncio.sleep(0.05)
            held.release.set()
            async with asyncio.timeout(10):
                one, two, both = await first, await second, await whole
        assert max(samples) == 1
        assert one[-1].data["status"] == "completed"
        assert types(two)[:2] == ["session_started", "user_message"]
        assert two[1].data["text"] == SECOND and two[-1].data["status"] == "completed"
        assert one[-1].id < two[0].id  # the second started after the first's done
        assert len(held.seen) == 1 and PARTIAL + REST in held.seen[0]  # it saw the answer
        assert NOTE in held.seen[0]  # the request's client context waited with it
        assert await statuses(server.store, session_id) == ["completed"] * 3
        assert [f.data["status"] for f in both if f.event == "done"] == ["completed"] * 3


async def reattach(server: Server, session_id: str) -> list[Frame]:
    """The session's stream from its start: live until no turn runs or waits."""
    path = f"/v1/sessions/{session_id}/stream"
    async with aconnect_sse(server.client, "GET", path, headers=server.auth()) as events:
        return [Frame(int(e.id), e.event, json.loads(e.data)) async for e in events.aiter_sse()]


async def test_interrupt_stops_the_first_keeping_its_words_then_runs_the_second(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        await set_strategy(server, "interrupt")
        session_id = await open_session(server)
        async with watching(server.store) as samples:
            first = await first_turn(server, held, session_id)
            reply = await server.client.post(
                "/v1/chat", json={"message": SECOND, "session_id": session_id},
                headers=server.auth(),
            )  # fmt: skip
            async with asyncio.timeout(10):
                one = await first
        assert max(samples) == 1
        assert reply.status_code == 200, reply.text
        assert reply.json()["status"] == "completed"
        assert types(one)[-3:] == ["message_done", "error", "done"]
        assert one[-3].data["stop_reason"] == "interrupted"
        assert one[-2].data["code"] == "interrupted"
        assert one[-1].data["status"] == "cancelled"
        assert answer(one) == PARTIAL  # kept, and the second turn's model saw it
        assert len(held.seen) == 1 and PARTIAL.strip() in held.seen[0]
        assert await statuses(server.store, session_id) == ["completed", "cancelled", "completed"]


@pytest.mark.postgres
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt"])
async def test_two_postgres_workers_hold_one_running_turn_per_session(
    postgres_url: str, held: Held, strategy: str
) -> None:
    """FIRST runs on worker A; SECOND goes to worker B, which never runs it beside A's."""
    async with servers(postgres_url, held, 2) as (a, b):
        await set_strategy(a, strategy)
        session_id = await open_session(a)
        async with watching(a.store) as samples:
            first = await first_turn(a, held, session_id)
            body = {"message": SECOND, "session_id": session_id}
            second = asyncio.create_task(b.client.post("/v1/chat", json=body, headers=b.auth()))
            if strategy == "reject":
                await second  # refused while FIRST runs
                held.release.set()
            elif strategy == "enqueue":
                await asyncio.sleep(0.3)
                assert held.seen == []  # waits for A's turn
                held.release.set()
            async with asyncio.timeout(15):
                one, reply = await first, await second
        assert max(samples) == 1
        turns = await statuses(a.store, session_id)
        match strategy:
            case "reject":
                assert reply.status_code == 409
                assert reply.json()["error"]["code"] == "turn_in_progress"
                assert turns == ["completed", "completed"] and held.seen == []
            case "enqueue":
                assert reply.json()["status"] == "completed"
                assert turns == ["completed"] * 3
                assert PARTIAL + REST in held.seen[0]
            case "interrupt":  # A sees B's stop request when it renews its lease
                assert reply.json()["status"] == "completed"
                assert one[-2].data["code"] == "interrupted"
                assert turns == ["completed", "cancelled", "completed"]
                assert PARTIAL.strip() in held.seen[0]


async def test_the_database_refuses_a_second_running_turn(store: Store) -> None:
    await store.sessions.create(org_id="acme", user_id="u", session_id="s-1", title="t")
    _, first = await _opening(store, "t-1")
    with pytest.raises(TurnInProgressError) as refused:
        await _opening(store, "t-2")
    assert refused.value.turn_id == "t-1" and first == 0
    assert [t.id for t in await store.sessions.turns("s-1")] == ["t-1"]
    assert [e.turn_id for e in await store.log.read("s-1")] == ["t-1"]  # nothing of t-2


async def _opening(store: Store, turn_id: str) -> tuple[Any, int]:
    return await store.log.open_turn(
        "s-1", [SessionStarted(session_id="s-1", turn_id=turn_id)], turn_id=turn_id,
        trace_id="trace",
    )  # fmt: skip


async def test_a_queued_message_whose_starter_died_is_started_by_a_keeper(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        session_id = await open_session(server)
        job = {"org_id": "acme", "user_id": "alice", "role": "member", "model": None}
        await server.store.queue.add(
            session_id, turn_id="queued-1", trace_id="trace", job=job, text=SECOND
        )  # nobody started it: as if its worker died between its queueing and its start
        services = server.app.state.services
        await Keeper(server.store, services.runner, services.models).tick()
        await services.runner.wait("queued-1")
        await until(server.store, session_id, ["completed", "completed"])
        assert len(held.seen) == 1


def ai_sdk(chat: str, text: str, message_id: str) -> dict[str, Any]:
    message = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat, "messages": [message], "trigger": "submit-message"}


def ag_ui(thread: str, text: str, run_id: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "messages": [{"id": run_id, "role": "user",
            "content": text}]}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "payload"),
    [("/v1/ai-sdk/chat", ai_sdk), ("/v1/ag-ui", ag_ui)],
    ids=["ai-sdk", "ag-ui"],
)
async def test_the_chat_protocols_say_turn_in_progress_in_their_own_terms(
    make_server: ServerFactory, held: Held, path: str, payload: Any
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        first = asyncio.create_task(
            server.client.post(path, json=payload("chat-1", FIRST, "m1"), headers=server.auth())
        )
        async with asyncio.timeout(10):
            await held.answering.wait()
        [running] = await server.store.sessions.running_turns()
        second = await server.client.post(
            path, json=payload("chat-1", SECOND, "m2"), headers=server.auth()
        )
        held.release.set()
        async with asyncio.timeout(10):
            assert (await first).status_code == 200
    assert second.status_code == 409
    frames = [f.removeprefix("data: ") for f in second.text.split("\n\n") if f]
    assert second.headers["X-Turn-Id"] == running.id
    if path == "/v1/ag-ui":
        [event] = [json.loads(f) for f in frames]
        assert (event["type"], event["code"]) == ("RUN_ERROR", "turn_in_progress")
    else:
        assert frames[-1] == "[DONE]"
        [part] = [json.loads(f) for f in frames[:-1]]
        assert part["type"] == "error"
        assert part["errorText"].startswith("turn_in_progress: ")
    assert held.seen == []


async def test_an_interrupted_turn_whose_worker_died_is_closed_by_its_claimer(
    make_server: ServerFactory, held: Held
) -> None:
    async with make_server(TurnModels(executor=held.model())) as server:
        store, services = server.store, server.app.state.services
        session_id = await open_session(server)
        job = {"org_id": "acme", "user_id": "alice", "role": "member", "model": None}
        opening = [
            SessionStarted(session_id=session_id, turn_id="dead-1"),
            UserMessage(message_id="m-dead", text=FIRST),
        ]
        await store.log.open_turn(
            session_id, opening, turn_id="dead-1", trace_id="tr", worker_id="gone:1",
            lease_until=datetime.now(UTC) - timedelta(seconds=1), job=job,
        )  # fmt: skip
        await store.log.append(session_id, [TextDelta(delta=PARTIAL)], turn_id="dead-1", epoch=0)
        await store.queue.add(session_id, turn_id="q-1", trace_id="tr", job=job, text=SECOND)
        assert await store.queue.stop("dead-1", "interrupted")

        await Keeper(store, services.runner, services.models).tick()
        await until(store, session_id, ["completed", "cancelled", "completed"])
        dead = await store.log.read(session_id, turn_id="dead-1")

    assert [(e.type, e.data.get("stop_reason") or e.data.get("code")) for e in dead[-3:]] == [
        ("message_done", "interrupted"), ("error", "interrupted"), ("done", None),
    ]  # fmt: skip
    assert PARTIAL.strip() in held.seen[0]  # the next turn saw the words kept
