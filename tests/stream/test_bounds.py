"""Bounded input: oversized, overdeep, out-of-range or blank input is a 400 before any work,
and the served OpenAPI states each bound. Over HTTP on SQLite and PostgreSQL (where a NUL
in text, or an integer past 64 bits, used to reach the database and come back a 500)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from conftest import Server, ServerFactory
from helpers import stream_turn
from providers import ScriptedModel
from stream._bounds import BLANKS, MAX_SEQ, MESSAGE_PATTERN, MessageText, nests_deeper_than
from turn import TurnModels

UNKNOWN = "00000000-0000-0000-0000-000000000000"
MESSAGE = TypeAdapter(MessageText)


def _error(response: httpx.Response, status: int = 400, code: str = "invalid_request") -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    message: str = error["message"]
    return message


async def _nothing_started(server: Server, model: ScriptedModel) -> None:
    listed = (await server.client.get("/v1/sessions", headers=server.auth())).json()
    assert listed["sessions"] == []
    assert model.calls == []


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "body",
    [
        _deep(5_000),
        b'{"message": "hi", "context": {"a": ' + _deep(32) + b"}}",
        b'{"message": "\xed\xa0\x80"}',
    ],
    ids=["5000-deep-array", "deep-context", "not-utf8"],
)
async def test_overdeep_or_undecodable_bodies_are_400(
    make_server: ServerFactory, body: bytes
) -> None:
    model = ScriptedModel(["never"])
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        headers = {**server.auth(), "Content-Type": "application/json"}
        for path in ("/v1/chat/stream", "/v1/chat", "/v1/plan"):
            message = _error(await server.client.post(path, content=body, headers=headers))
            assert "levels deep" in message or "not UTF-8" in message
        await _nothing_started(server, model)


async def test_a_body_at_the_depth_limit_is_decoded(make_server: ServerFactory) -> None:
    model = ScriptedModel(["fine"])
    async with make_server(TurnModels(executor=model)) as server:
        # A chat's context has a fixed shape now: the AI SDK body takes any extra field.
        extra = b'{"a": ' + _deep(30) + b', "s": "' + b"[" * 100 + b'"}'  # strings do not count
        message = b'{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}'
        body = (
            b'{"id": "c1", "trigger": "submit-message", "messages": [' + message + b'], "extra": '
            + extra + b"}"
        )  # fmt: skip
        response = await server.client.post(
            "/v1/ai-sdk/chat", content=body,
            headers={**server.auth(), "Content-Type": "application/json"},
        )  # fmt: skip
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"message": "   "}, "only whitespace"),
        ({"message": "\t\n\u00a0\u3000\ufeff"}, "only whitespace"),
        ({"message": "a\u0000b"}, "NUL"),
        ({"message": "x" * 1_001}, "the limit is 1000"),
        ({"message": "hi", "model": "m" * 201}, "model"),
        ({"message": "hi", "context": {str(i): i for i in range(65)}}, "context"),
    ],
    ids=["spaces", "unicode-blanks", "nul", "too-long", "long-model", "wide-context"],
)
async def test_bad_messages_are_400_and_start_nothing(
    make_server: ServerFactory, body: dict[str, Any], fragment: str
) -> None:
    model = ScriptedModel(["never"])
    async with make_server(
        TurnModels(planner=model, executor=model), max_message_chars=1_000
    ) as server:
        routes = ["/v1/chat/stream", "/v1/chat"]
        if set(body) == {"message"}:
            routes.append("/v1/plan")
        for path in routes:
            response = await server.client.post(path, json=body, headers=server.auth())
            assert fragment in _error(response)
        await _nothing_started(server, model)


async def test_integer_parameters_are_bounded(make_server: ServerFactory) -> None:
    model = ScriptedModel(["hi"])
    async with make_server(TurnModels(executor=model)) as server:
        frames = await stream_turn(server.client, {"message": "x"}, server.auth())
        session = frames[0].data["session_id"]
        events = f"/v1/sessions/{session}/events"
        refused = [
            f"{events}?after={2**70}",
            f"{events}?after={MAX_SEQ + 1}",
            f"{events}?after=-1",
            f"{events}?limit=0",
            f"{events}?limit=10001",
            f"{events}?limit={2**70}",
            "/v1/sessions?limit=0",
            "/v1/sessions?limit=501",
            f"/v1/sessions/{session}/stream?after={2**70}",
        ]
        for url in refused:
            message = _error(await server.client.get(url, headers=server.auth()))
            assert "Expected `int`" in message, url
        last = await server.client.get(f"{events}?after={MAX_SEQ}", headers=server.auth())
        assert last.status_code == 200 and last.json()["events"] == []
        whole = await server.client.get(f"{events}?after=0&limit=10000", headers=server.auth())
        assert [e["seq"] for e in whole.json()["events"]] == [f.id for f in frames]
        for last_event_id in (str(2**70), str(MAX_SEQ + 1), "-1", "²"):
            response = await server.client.get(
                f"/v1/sessions/{session}/stream",
                headers={**server.auth(), "Last-Event-ID": last_event_id.encode()},
            )
            assert "Last-Event-ID" in _error(response)


async def test_ids_in_paths_are_checked_before_any_lookup(make_server: ServerFactory) -> None:
    async with make_server(TurnModels(executor=ScriptedModel(["hi"]))) as server:
        frames = await stream_turn(server.client, {"message": "x"}, server.auth())
        session = frames[0].data["session_id"]
        bad_sessions = ["nope", "a%00b", f"{session}%0A", UNKNOWN + "0"]
        for bad in bad_sessions:
            for method, path in [
                ("GET", f"/v1/sessions/{bad}"),
                ("GET", f"/v1/sessions/{bad}/events"),
                ("GET", f"/v1/sessions/{bad}/budget"),
                ("POST", f"/v1/sessions/{bad}/cancel"),
                ("POST", f"/v1/sessions/{bad}/undo/toolu_1"),
            ]:
                response = await server.client.request(method, path, headers=server.auth())
                assert "session_id must be a session id" in _error(response), path
        for bad in ["x%00", "a b", "t" * 65, "é"]:
            for action, body in [("confirm", {"approved": True}), ("pick", {"id": "c1"})]:
                path = f"/v1/sessions/{session}/{action}/{bad}"
                response = await server.client.post(path, json=body, headers=server.auth())
                assert "tool_use_id must be a tool use id" in _error(response), path
            undo = f"/v1/sessions/{session}/undo/{bad}"
            response = await server.client.post(undo, headers=server.auth())
            assert "tool_use_id" in _error(response)
        # Well-formed ids that name nothing are still 404s.
        missing = await server.client.get(f"/v1/sessions/{UNKNOWN}", headers=server.auth())
        _error(missing, 404, "not_found")


async def test_the_session_cursor_is_a_date_time_with_an_offset(
    make_server: ServerFactory,
) -> None:
    async with make_server(TurnModels(executor=ScriptedModel(["hi"]))) as server:
        await stream_turn(server.client, {"message": "x"}, server.auth())

        async def page(before: str) -> httpx.Response:
            return await server.client.get(
                "/v1/sessions", params={"before": before}, headers=server.auth()
            )

        assert "UTC offset" in _error(await page("2020-01-01T00:00:00"))
        assert "date-time" in _error(await page("0.5"))
        assert "length <= 64" in _error(await page("x" * 65))
        assert len((await page("9999-12-31T23:59:59-23:59")).json()["sessions"]) == 1
        assert (await page("0001-01-01T00:00:00+23:59")).json()["sessions"] == []


async def test_the_openapi_states_the_bounds(make_server: ServerFactory) -> None:
    async with make_server(max_message_chars=1_000) as server:
        schema = (await server.client.get("/schema/openapi.json")).json()
    components = schema["components"]["schemas"]
    for name in ("ChatRequest", "PlanRequest", "ConfirmIn", "PickIn", "OrgKeyIn"):
        assert components[name]["additionalProperties"] is False, name
    message = components["ChatRequest"]["properties"]["message"]
    assert (message["minLength"], message["maxLength"]) == (1, 1_000)
    assert message["pattern"] == MESSAGE_PATTERN
    assert components["ChatRequest"]["properties"]["model"]["enum"] == [None]
    events = schema["paths"]["/v1/sessions/{session_id}/events"]["get"]
    params = {p["name"]: p["schema"] for p in events["parameters"]}
    assert (params["after"]["minimum"], params["after"]["maximum"]) == (0, MAX_SEQ)
    assert (params["limit"]["minimum"], params["limit"]["maximum"]) == (1, 10_000)
    assert params["session_id"]["pattern"].startswith("^[0-9a-fA-F]{8}-")
    confirm = schema["paths"]["/v1/sessions/{session_id}/confirm/{tool_use_id}"]["post"]
    ids = {p["name"]: p["schema"]["pattern"] for p in confirm["parameters"]}
    assert ids["tool_use_id"] == "^[!-~]{1,64}$"
    error = {"$ref": "#/components/schemas/Error"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert responses["default"]["content"]["application/json"]["schema"] == error
            for status, response in responses.items():
                if status.startswith("4"):
                    assert response["content"]["application/json"]["schema"] == error
            # a hook's signature is its credential
            public = path in ("/healthz", "/v1/hooks/{org}/{handle}", "/v1/event-hooks/{org}")
            assert (operation.get("security") == []) == public, (method, path)
    stream = schema["paths"]["/v1/chat/stream"]["post"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]


def test_nesting_depth_counts_brackets_outside_strings() -> None:
    assert not nests_deeper_than(_deep(32), 32)
    assert nests_deeper_than(_deep(33), 32)
    assert not nests_deeper_than(b'["' + b"[" * 100 + b'"]', 32)
    assert not nests_deeper_than(b'["\\"' + b"[" * 100 + b'"]', 32)  # an escaped quote
    assert nests_deeper_than(b'{"a": "]]]", "b": ' + _deep(32) + b"}", 32)
    assert not nests_deeper_than(b"[" + b"[]," * 1_000 + b"[]]", 2)


@given(st.text(alphabet=st.sampled_from([*BLANKS, "\x00", "a", "\u00e9", "\x1c", "\x85"])))
def test_the_message_pattern_is_what_the_model_checks(text: str) -> None:
    """The OpenAPI's pattern and the validator agree: some text besides blanks, no NUL."""
    try:
        MESSAGE.validate_python(text)
        valid = True
    except ValidationError:
        valid = False
    assert valid == bool(re.fullmatch(MESSAGE_PATTERN, text))
