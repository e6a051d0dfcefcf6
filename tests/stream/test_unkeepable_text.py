"""Text no database keeps: a NUL character or a lone UTF-16 surrogate, in any string of a
body (at any depth, keys included), a signed webhook's payload, a path, a query or a
header, is a 400 ``invalid_request`` naming it, and nothing is stored. Over HTTP on SQLite
and PostgreSQL: PostgreSQL used to answer 500 for a NUL in ten accepted fields, and on
SQLite a webhook with a lone surrogate started a run whose pages then answered 500."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook

from conftest import Server, ServerFactory
from providers import ScriptedModel
from stream._bounds import text_flaw, value_flaw
from turn import TurnModels

UNKEEPABLE = ["a\x00b", "a\ud800b", "\udc00", "\ud83d"]
"""A NUL, a lone high surrogate, a lone low one, a high one at the end."""
APPROVAL = "apr_00000000000000000000000000000000"


def _agent(**fields: Any) -> dict[str, Any]:
    return {"handle": "bad", "name": "Bad", **fields}


def _cases(bad: str) -> list[tuple[str, str, Any, str]]:
    """(method, path, body, the JSON path the refusal names) for one unkeepable string."""
    notes = {"notes": ["a", "b", bad]}
    ai_sdk = {"id": "c1", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": bad}]},
    ]}  # fmt: skip
    ag_ui = {"threadId": "t1", "runId": "r1", "messages": [
        {"id": "m1", "role": "user", "content": "hi"}, {"id": "m2", "role": "user", "content": bad},
    ]}  # fmt: skip
    return [
        ("POST", "/v1/agents", _agent(name=bad), "name"),
        ("POST", "/v1/agents", _agent(identity_prompt=bad), "identity_prompt"),
        (
            "POST",
            "/v1/agents",
            _agent(schedule={"cron": "0 9 * * *", "task": bad}),
            "schedule.task",
        ),
        (
            "POST",
            "/v1/agents",
            _agent(schedule={"cron": "0 9 * * *", "task": "t", "context": notes}),
            "schedule.context.notes[2]",
        ),
        ("POST", "/v1/agents", _agent(webhook_task=bad), "webhook_task"),
        ("PUT", "/v1/agents/inbox", {"name": "Inbox", "identity_prompt": bad}, "identity_prompt"),
        ("POST", "/v1/agents/inbox/runs", {"task": "t", "context": notes}, "context.notes[2]"),
        ("POST", "/v1/agents/inbox/runs", {"task": "t", "context": {f"k{bad}": 1}}, "context"),
        ("POST", "/v1/webhooks", {"url": f"https://example.com/{bad}"}, "url"),
        ("POST", f"/v1/approvals/{APPROVAL}/reject", {"reason": bad}, "reason"),
        ("POST", "/v1/chat", {"message": "hi", "context": {"a b": bad}}, 'context["a b"]'),
        ("POST", "/v1/chat", {"message": bad}, "message"),
        ("POST", "/v1/ai-sdk/chat", ai_sdk, "messages[0].parts[0].text"),
        ("POST", "/v1/ag-ui", ag_ui, "messages[1].content"),
        ("POST", "/v1/plan", {"message": bad}, "message"),
    ]


def _refusal(response: httpx.Response, bad: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    message: str = error["message"]
    assert ("NUL character" if "\x00" in bad else "lone surrogate") in message, message
    return message


async def _post_hook(server: Server, secret: str, payload: Any) -> httpx.Response:
    """A signed delivery of ``payload`` (json.dumps writes a lone surrogate as an escape)."""
    text, msg_id, now = json.dumps(payload), f"msg_{uuid.uuid4().hex}", datetime.now(UTC)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, text),
        "content-type": "application/json",
    }
    return await server.client.post("/v1/hooks/acme/inbox", content=text, headers=headers)


async def test_unkeepable_text_in_any_body_is_400_naming_it(make_server: ServerFactory) -> None:
    planner = ScriptedModel(['{"strategy": "simple", "reasoning": "r"}'])
    executor = ScriptedModel(["Done."])  # for the one run that starts: the last one
    async with make_server(
        TurnModels(planner=planner, executor=executor), secrets_key=Fernet.generate_key().decode()
    ) as server:
        owner = {**server.auth(role="owner"), "Content-Type": "application/json"}
        inbox = {"handle": "inbox", "name": "Inbox"}
        made = await server.client.post("/v1/agents", json=inbox, headers=owner)
        assert made.status_code == 201, made.text
        hook = await server.client.post("/v1/agents/inbox/webhook", headers=owner)
        secret = hook.json()["secret"]
        for bad in UNKEEPABLE:
            for method, path, body, field in _cases(bad):
                # json.dumps writes "\u0000" and a lone "\ud800" as escapes, as a client would.
                response = await server.client.request(
                    method, path, content=json.dumps(body), headers=owner
                )
                message = _refusal(response, bad)
                assert f"Invalid request: {field} (body): " in message, (path, message)
            for payload, field in [
                ({"ticket": {"notes": ["ok", bad]}}, "ticket.notes[1]"),
                ({bad: 1}, "body"),
                (bad, "body"),
            ]:
                message = _refusal(await _post_hook(server, secret, payload), bad)
                assert f"Invalid request: {field} (body): " in message, message
        agents = (await server.client.get("/v1/agents", headers=owner)).json()
        runs = (await server.client.get("/v1/agents/inbox/runs", headers=owner)).json()
        webhooks = (await server.client.get("/v1/webhooks", headers=owner)).json()
        sessions = (await server.client.get("/v1/sessions", headers=owner)).json()
        calls = [*planner.calls, *executor.calls]
        # A valid surrogate pair is one character, kept and given back as it came.
        started = await _post_hook(server, secret, {"ticket": "\ud83d\ude00"})
        detail = await server.client.get(f"/v1/runs/{started.json()['run_id']}", headers=owner)

    assert [(a["handle"], a["version"], a["name"]) for a in agents] == [
        ("default", 0, "Default agent"),
        ("inbox", 1, "Inbox"),
    ]  # nothing created, nothing updated
    assert runs["runs"] == [] and webhooks == [] and sessions["sessions"] == []
    assert calls == []
    assert started.status_code == 202, started.text
    assert detail.status_code == 200 and detail.json()["context"] == {"ticket": "\U0001f600"}


async def test_unkeepable_text_in_a_path_query_or_header_is_400(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        owner = server.auth(role="owner")
        refused = [
            ("/v1/agents/a%00b", "handle (path)"),
            ("/v1/agents/a%00b/runs", "handle (path)"),
            ("/v1/approvals?agent=a%00b", "agent (query)"),
            ("/v1/approvals?status=%00", "status (query)"),
            ("/v1/agents?a%00=1", "a query parameter's name"),
        ]
        answers = [await server.client.get(url, headers=owner) for url, _ in refused]
        # Uvicorn's HTTP parser refuses a NUL in a header; the app checks headers too, for a
        # server that lets one through (called here in-process, with no HTTP parser).
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server.app), base_url="http://app"
        ) as direct:
            header = await direct.get("/v1/agents", headers={**owner, "X-Note": b"a\x00b"})
            fine = await direct.get("/v1/agents", headers={**owner, "X-Note": "ok"})

    for (url, where), response in zip(refused, answers, strict=True):
        assert f"Invalid request: {where}" in _refusal(response, "\x00"), url
    assert "x-note (header)" in _refusal(header, "\x00")
    assert fine.status_code == 200, fine.text


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"a": [1, {"b": "ok"}], "c": None}, None),
        ({"a": [1, {"b": "x\x00"}]}, "a[1].b"),
        ({"a": {"x y": ["\ud800"]}}, 'a["x y"][0]'),
        ({"deep": {"er": "\x00"}, "shallow": "\udfff"}, "shallow"),
        ("\x00", "body"),
        ({"k\x00": 1}, "body"),
        ({"a": {"k\udc00": 1}}, "a"),
        ("\U0001f600 \u00e9 \ufffd", None),
    ],
)
def test_value_flaw_names_the_shallowest_unkeepable_string(value: Any, found: str | None) -> None:
    flaw = value_flaw(value)
    assert (flaw and flaw[0]) == found


def test_text_flaw_says_what_to_do() -> None:
    assert text_flaw("a\x00") == "contains a NUL character (\\u0000); drop it"
    assert text_flaw("\udc01") == (
        "contains a lone surrogate (\\udc01); send whole characters (surrogate pairs)"
    )
    assert text_flaw("fine \U0001f600") is None


def _string_schemas(schema: Any, components: dict[str, Any], seen: set[str]) -> list[Any]:
    """The string schemas in ``schema``, following references (each component once)."""
    if isinstance(schema, list):
        return [s for item in schema for s in _string_schemas(item, components, seen)]
    if not isinstance(schema, dict):
        return []
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[1]
        if name in seen:
            return []
        seen.add(name)
        return _string_schemas(components[name], components, seen)
    kinds = schema.get("type")
    own = [schema] if kinds == "string" or (isinstance(kinds, list) and "string" in kinds) else []
    return own + [s for v in schema.values() for s in _string_schemas(v, components, seen)]


async def test_the_openapi_states_that_request_strings_hold_no_nul(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        schema = (await server.client.get("/schema/openapi.json")).json()
    components = schema["components"]["schemas"]
    strings = []
    for item in schema["paths"].values():
        for operation in item.values():
            body = operation.get("requestBody", {}).get("content", {})
            for part in [*body.values(), *operation.get("parameters", [])]:
                strings += _string_schemas(part["schema"], components, set())
    assert len(strings) > 100
    nul = ["\x00", "a\x00b", "https://example.com/\x00", "0\x00"]
    for string in strings:
        if "enum" not in string and "const" not in string:
            assert not any(re.search(string["pattern"], text) for text in nul), string
    assert "NUL" in schema["info"]["description"]  # and of free-form values, in words
