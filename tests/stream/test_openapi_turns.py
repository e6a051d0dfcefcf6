"""OpenAPI toolsets end to end: the example notes API (examples/notes_api) on 127.0.0.1,
registered over the real app by its document's URL, an agent granted ``notes.*``, chat
turns and background runs with scripted models.

Reads run at once; a create runs and is undone through its declared inverse; a delete
waits for approval and reaches the API once; every request the API receives carries the
end user's identity (signed by Bosun, or the user's own token forwarded) and a forged one
is refused; the API's 404 and the API being down are typed tool errors and the turn goes
on; a background run's calls carry the user who triggered it, or the agent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.fernet import Fernet
from test_mcp_turns import agent, call, completed, status

from conftest import JWT_SECRET, Server, ServerFactory
from fleet import RunRequest
from helpers import Frame, stream_post, stream_turn, types
from openapi_testing import notes_host
from providers import Reply

SEEDED = {"id": "n0", "title": "Groceries", "text": "milk", "author": "seed"}
LOOK, WRITE, DROP = "Look at the notes", "Write a note", "Drop the note"
TOOLS = ["notes.list_notes", "notes.get_note", "notes.create_note", "notes.delete_note"]


@pytest.fixture
def host() -> Iterator[tuple[Any, str]]:
    with notes_host() as (notes, url):
        notes.notes["acme"] = {"n0": dict(SEEDED)}
        yield notes, url


@pytest.fixture(params=["signed", "forward"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def scribe(**script: list[Reply]) -> Any:
    """Scripted models: the planner plans one step by a word of the message (look, write,
    drop, fetch), the executor replies in order for that step."""
    goals = {"look": LOOK, "write": WRITE, "drop": DROP, "fetch": "Fetch a note"}
    return agent(
        {word: (goal, TOOLS) for word, goal in goals.items()},
        {goals[word]: replies for word, replies in script.items()},
    )


async def register(
    server: Server, notes: Any, url: str, mode: str = "signed", timeout_s: float = 5
) -> None:
    """The org's ``notes`` toolset from the API's own document, and the ``scribe`` agent."""
    body = {
        "openapi_url": f"{url}/openapi.json", "base_url": url, "identity": {"mode": mode},
        "timeout_s": timeout_s,
    }  # fmt: skip
    owner = server.auth(user="olga", role="owner")
    saved = await server.client.put("/v1/openapi/toolsets/notes", json=body, headers=owner)
    assert saved.status_code == 200, saved.text
    notes.secret = saved.json()["secret"]
    if mode == "forward":  # the API trusts the tokens its users sign in to Bosun with
        notes.secret, notes.forward_secret = None, JWT_SECRET
    profile = {"handle": "scribe", "name": "Scribe", "tools": ["notes.*"]}
    made = await server.client.post("/v1/agents", json=profile, headers=owner)
    assert made.status_code == 201, made.text


async def chat(server: Server, message: str, session_id: str | None = None) -> list[Frame]:
    body: dict[str, Any] = {"message": message, "agent": "scribe"}
    if session_id:
        body["session_id"] = session_id
    return await stream_turn(server.client, body, server.auth(user="olga", role="owner"))


def secrets_key() -> str:
    return Fernet.generate_key().decode()


def acted_for(notes: Any) -> list[tuple[str, str, str, str]]:
    """(method, path, sub, org) of every request the API accepted."""
    return [(m, p.split("?")[0], c["sub"], c["org"]) for m, p, c in notes.received]


async def test_reads_run_at_once_and_a_create_is_undone_through_its_inverse(
    make_server: ServerFactory, host: tuple[Any, str], mode: str
) -> None:
    notes, url = host
    models = scribe(
        write=[
            call("tu_new", "notes_create_note", body={"title": "Call Sam"}),
            call("tu_list", "notes_list_notes", q="Groc"),
            call("tu_get", "notes_get_note", note_id="n0"),
            Reply(text="Done."),
        ]
    )
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url, mode)
        frames = await chat(server, "write a note to call Sam")
        session = frames[0].data["session_id"]
        undo = await server.client.post(
            f"/v1/sessions/{session}/undo/tu_new", headers=server.auth(user="olga", role="owner")
        )

    assert "confirmation_pending" not in types(frames) and status(frames) == "completed"
    created = completed(frames, "tu_new")["output"]
    assert created["title"] == "Call Sam" and created["author"] == "olga"
    assert completed(frames, "tu_list")["output"] == [SEEDED]
    assert completed(frames, "tu_get")["output"] == SEEDED
    assert undo.status_code == 200, undo.text
    assert undo.json()["ok"] is True and undo.json()["undone"] == "tu_new"
    assert set(notes.notes["acme"]) == {"n0"}  # the created note is gone again
    assert acted_for(notes) == [
        ("POST", "/notes", "olga", "acme"), ("GET", "/notes", "olga", "acme"),
        ("GET", "/notes/n0", "olga", "acme"), ("DELETE", f"/notes/{created['id']}", "olga", "acme"),
    ]  # fmt: skip
    claims = notes.received[0][2]
    if mode == "signed":
        assert (
            claims["aud"] == "notes" and claims["agent"] == "scribe" and claims["role"] == "owner"
        )
        assert claims["turn"] and 0 < claims["exp"] - claims["iat"] <= 60
    else:  # the user's own token, as they sent it to Bosun
        assert "agent" not in claims and claims["role"] == "owner"


async def test_a_delete_waits_for_approval_and_reaches_the_api_once(
    make_server: ServerFactory, host: tuple[Any, str], mode: str
) -> None:
    notes, url = host
    models = scribe(drop=[call("tu_del", "notes_delete_note", note_id="n0"), Reply(text="Gone.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url, mode)
        first = await chat(server, "drop the groceries note")
        session = first[0].data["session_id"]
        before = list(notes.received)
        path = f"/v1/sessions/{session}/confirm/tu_del"
        owner = server.auth(user="olga", role="owner")
        resumed = await stream_post(server.client, path, {"approved": True}, owner)
        again = await server.client.post(path, json={"approved": True}, headers=owner)

    pending = next(f.data for f in first if f.event == "confirmation_pending")
    assert (pending["tool"], pending["input"]) == ("notes.delete_note", {"note_id": "n0"})
    assert status(first) == "suspended" and before == []
    assert completed(resumed, "tu_del")["ok"] is True and status(resumed) == "completed"
    assert again.status_code >= 400
    assert acted_for(notes) == [("DELETE", "/notes/n0", "olga", "acme")]
    assert notes.notes["acme"] == {}


async def test_the_apis_404_and_the_api_down_are_typed_errors_and_turns_go_on(
    make_server: ServerFactory,
) -> None:
    models = scribe(
        fetch=[call("tu_404", "notes_get_note", note_id="nope"), Reply(text="No such note.")],
        look=[call("tu_down", "notes_list_notes"), Reply(text="The notes are unreachable.")],
    )
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        with notes_host() as (notes, url):
            await register(server, notes, url)
            missing = await chat(server, "fetch note nope")
        down = await chat(server, "look at my notes", missing[0].data["session_id"])

    error = completed(missing, "tu_404")["error"]
    assert error["code"] == "api_not_found" and "No note 'nope' here" in error["message"]
    assert status(missing) == "completed"
    assert completed(down, "tu_down")["error"]["code"] == "api_unavailable"
    assert status(down) == "completed"


async def test_a_failing_read_is_tried_again_and_a_slow_api_times_out(
    make_server: ServerFactory, host: tuple[Any, str]
) -> None:
    notes, url = host
    models = scribe(
        look=[call("tu_retried", "notes_list_notes"), Reply(text="Listed.")],
        fetch=[call("tu_slow", "notes_get_note", note_id="n0"), Reply(text="Too slow.")],
    )
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url, timeout_s=0.5)
        notes.failures = 1  # a 503, then the API is fine
        retried = await chat(server, "look at my notes")
        notes.delay_s = 1.0
        slow = await chat(server, "fetch note n0", retried[0].data["session_id"])

    assert completed(retried, "tu_retried")["output"] == [SEEDED]
    assert [m for m, _, _ in notes.received][:2] == ["GET", "GET"]  # once more after the 503
    assert completed(slow, "tu_slow")["error"]["code"] == "api_timeout"
    assert status(slow) == "completed"


async def test_a_forged_or_expired_identity_is_refused_by_the_api(
    make_server: ServerFactory, host: tuple[Any, str]
) -> None:
    notes, url = host
    models = scribe(look=[call("tu_l", "notes_list_notes"), Reply(text="Refused.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url)
        secret = notes.secret
        notes.secret = "not-the-toolsets-secret-" + "x" * 20  # Bosun's tokens look forged
        frames = await chat(server, "look at my notes")
        now = int(time.time())
        claims = {"sub": "olga", "org": "acme", "aud": "notes", "iat": now - 120, "exp": now - 60}
        expired = jwt.encode(claims, secret, algorithm="HS256")
        forged = jwt.encode({**claims, "exp": now + 60}, "guess" * 8, algorithm="HS256")
        valid = jwt.encode({**claims, "exp": now + 60}, secret, algorithm="HS256")
        notes.secret = secret
        answers = [
            (await server.client.get(f"{url}/notes", headers={"Authorization": f"Bearer {t}"}))
            for t in (expired, forged, valid)
        ]

    assert [a.status_code for a in answers] == [401, 401, 200]
    error = completed(frames, "tu_l")["error"]
    assert error["code"] == "api_forbidden" and "Unauthorized" in error["message"]
    assert [r[:2] for r in notes.refused] == [("GET", "/notes")] * 3
    assert [c["sub"] for _, _, c in notes.received] == ["olga"]  # only the valid one
    assert status(frames) == "completed"


async def test_a_background_runs_calls_carry_who_triggered_it(
    make_server: ServerFactory, host: tuple[Any, str]
) -> None:
    notes, url = host
    models = scribe(look=[call("tu_l", "notes_list_notes"), Reply(text="Listed.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url)
        await run_as_ravi(server)
        hook = RunRequest(
            org_id="acme", user_id="webhook:scribe", role="staff", agent="scribe",
            task="look at the notes", trigger="webhook",
        )  # fmt: skip
        run, _ = await server.app.state.services.runs.submit(hook)
        await until_done(server, run.id)

    assert [(c["sub"], c["role"], c["agent"]) for _, _, c in notes.received] == [
        ("ravi", "staff", "scribe"), ("agent:scribe", "staff", "scribe"),
    ]  # fmt: skip


async def test_a_forward_toolset_has_no_token_in_a_background_run(
    make_server: ServerFactory, host: tuple[Any, str]
) -> None:
    notes, url = host
    models = scribe(look=[call("tu_l", "notes_list_notes"), Reply(text="Could not.")])
    async with make_server(models.models(), secrets_key=secrets_key()) as server:
        await register(server, notes, url, "forward")
        run = await run_as_ravi(server)
        events = (await server.client.get(
            f"/v1/sessions/{run['session_id']}/events", headers=server.auth(role="owner")
        )).json()["events"]  # fmt: skip

    [done] = [e["data"] for e in events if e["type"] == "tool_completed"]
    assert done["error"]["code"] == "identity_unavailable"
    assert notes.received == [] and run["status"] == "completed"


async def run_as_ravi(server: Server) -> dict[str, Any]:
    """A background run of ``scribe`` that the staff member ``ravi`` triggers, once done."""
    staff = server.auth(user="ravi", role="staff")
    queued = await server.client.post(
        "/v1/agents/scribe/runs", json={"task": "look at the notes"}, headers=staff
    )
    assert queued.status_code == 202, queued.text
    return await until_done(server, queued.json()["run_id"])


async def until_done(server: Server, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        detail: dict[str, Any] = (
            await server.client.get(f"/v1/runs/{run_id}", headers=server.auth(role="owner"))
        ).json()
        if detail["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return detail
        await asyncio.sleep(0.05)
