"""Bad input gets a clear 4xx with a stable code; the public routes stay public."""

from __future__ import annotations

import time

import jwt
import pytest

from conftest import JWT_SECRET, ServerFactory
from helpers import stream_turn
from providers import ScriptedModel
from turn import TurnModels


def _assert_error(response: object, status: int, code: str) -> dict[str, str]:
    import httpx

    assert isinstance(response, httpx.Response)
    assert response.status_code == status, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert len(error["trace_id"]) == 32
    return error


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-jwt",
        "Bearer "
        + jwt.encode({"sub": "a", "org": "o", "role": "member", "exp": 2**40}, "wrong-secret-" * 4),
        "Bearer "
        + jwt.encode(
            {"sub": "a", "org": "o", "role": "member", "exp": int(time.time()) - 10}, JWT_SECRET
        ),
        "Bearer " + jwt.encode({"sub": "a", "org": "o", "role": "admin", "exp": 2**40}, JWT_SECRET),
        "Bearer " + jwt.encode({"sub": "a", "role": "member", "exp": 2**40}, JWT_SECRET),
        "Bearer " + jwt.encode({"sub": "a", "org": "o", "role": "member"}, JWT_SECRET),
    ],
    ids=[
        "none",
        "empty",
        "no-token",
        "basic",
        "garbage",
        "bad-signature",
        "expired",
        "bad-role",
        "no-org",
        "no-exp",
    ],
)
async def test_every_api_route_needs_a_valid_token(
    make_server: ServerFactory, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with make_server() as server:
        client = server.client
        routes = [
            ("POST", "/v1/chat/stream"),
            ("POST", "/v1/chat"),
            ("GET", "/v1/sessions"),
            ("GET", "/v1/sessions/00000000-0000-0000-0000-000000000000"),
            ("GET", "/v1/sessions/00000000-0000-0000-0000-000000000000/events"),
            ("GET", "/v1/sessions/00000000-0000-0000-0000-000000000000/stream"),
        ]
        for method, path in routes:
            response = await client.request(method, path, json={"message": "hi"}, headers=headers)
            _assert_error(response, 401, "unauthorized")


async def test_health_and_schema_are_public(make_server: ServerFactory) -> None:
    async with make_server() as server:
        health = await server.client.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
        schema = (await server.client.get("/schema/openapi.json")).json()
        assert {"/v1/chat/stream", "/v1/chat", "/v1/sessions", "/healthz"} <= set(schema["paths"])
        assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_sessions_of_another_org_or_user_are_not_found(make_server: ServerFactory) -> None:
    model = ScriptedModel(["hi"] * 3)
    async with make_server(TurnModels(executor=model)) as server:
        client = server.client
        frames = await stream_turn(client, {"message": "mine"}, server.auth(user="alice"))
        session_id = frames[0].data["session_id"]
        paths = [
            f"/v1/sessions/{session_id}",
            f"/v1/sessions/{session_id}/events",
            f"/v1/sessions/{session_id}/stream",
        ]
        intruders = [
            server.auth(user="alice", org="other-org", role="owner"),  # same user id, other org
            server.auth(user="bob"),  # same org, another member
        ]
        for headers in intruders:
            for path in paths:
                _assert_error(await client.get(path, headers=headers), 404, "not_found")
            response = await client.post(
                "/v1/chat/stream", json={"message": "x", "session_id": session_id}, headers=headers
            )
            _assert_error(response, 404, "not_found")
            listed = (await client.get("/v1/sessions", headers=headers)).json()
            assert listed["sessions"] == []
        # Staff of the same org may read it; the owner of the session sees it listed.
        staff = server.auth(user="carol", role="staff")
        assert (await client.get(f"/v1/sessions/{session_id}", headers=staff)).status_code == 200
        mine = (await client.get("/v1/sessions", headers=server.auth(user="alice"))).json()
        assert [s["id"] for s in mine["sessions"]] == [session_id]
        # Nothing was appended by the rejected attempts.
        rows = await server.store.log.read(session_id)
        assert [r.type for r in rows][-1] == "done"
        assert sum(r.type == "user_message" for r in rows) == 1


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"message": "unterminated', "json"),
        (b"[1, 2]", "body"),
        (b"{}", "message"),
        (b'{"message": ""}', "message"),
        (b'{"message": 42}', "message"),
        (b'{"message": "hi", "session_id": "not-a-uuid"}', "session_id"),
        (b'{"message": "hi", "surprise": true}', "surprise"),
    ],
    ids=[
        "malformed",
        "array",
        "missing",
        "empty",
        "not-a-string",
        "bad-session-id",
        "extra-field",
    ],
)
async def test_invalid_bodies_are_400_and_start_nothing(
    make_server: ServerFactory, body: bytes, fragment: str
) -> None:
    async with make_server() as server:
        headers = {**server.auth(), "Content-Type": "application/json"}
        for path in ("/v1/chat/stream", "/v1/chat"):
            response = await server.client.post(path, content=body, headers=headers)
            error = _assert_error(response, 400, "invalid_request")
            assert fragment.lower() in error["message"].lower()
        listed = (await server.client.get("/v1/sessions", headers=server.auth())).json()
        assert listed["sessions"] == []


async def test_unknown_session_is_404(make_server: ServerFactory) -> None:
    async with make_server() as server:
        body = {"message": "hi", "session_id": "00000000-0000-0000-0000-000000000000"}
        response = await server.client.post("/v1/chat/stream", json=body, headers=server.auth())
        _assert_error(response, 404, "not_found")


async def test_oversized_bodies_are_413(make_server: ServerFactory) -> None:
    async with make_server(max_body_bytes=1024) as server:
        body = {"message": "x" * 2048}
        response = await server.client.post("/v1/chat/stream", json=body, headers=server.auth())
        _assert_error(response, 413, "payload_too_large")
        listed = (await server.client.get("/v1/sessions", headers=server.auth())).json()
        assert listed["sessions"] == []


async def test_bad_last_event_id_is_400(make_server: ServerFactory) -> None:
    model = ScriptedModel(["hi"])
    async with make_server(TurnModels(executor=model)) as server:
        frames = await stream_turn(server.client, {"message": "x"}, server.auth())
        session_id = frames[0].data["session_id"]
        response = await server.client.get(
            f"/v1/sessions/{session_id}/stream",
            headers={**server.auth(), "Last-Event-ID": "abc"},
        )
        _assert_error(response, 400, "invalid_request")
