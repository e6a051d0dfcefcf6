"""Inbound webhooks are held to what the run API holds a run to: a deleted agent's secret
dies with it, and a signed payload gets the same size, nesting and key bounds (and the
same error codes) as a context sent to ``POST /v1/agents/{handle}/runs``."""

from __future__ import annotations

from typing import Any

from cryptography.fernet import Fernet
from test_triggers import quick, runs_of, signed

from conftest import Server, ServerFactory

HOOKED = {"handle": "inbox", "name": "Inbox", "runs_per_minute": 10}


async def hooked(server: Server) -> tuple[str, str]:
    """Make the ``inbox`` agent and its webhook: its path and secret."""
    owner = server.auth(role="owner")
    made = await server.client.post("/v1/agents", json=HOOKED, headers=owner)
    assert made.status_code == 201, made.text
    hook = (await server.client.post("/v1/agents/inbox/webhook", headers=owner)).json()
    return hook["path"], hook["secret"]


def nested(depth: int) -> Any:
    """A JSON value ``depth`` levels of arrays deep (``[]`` is one)."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


async def test_deleting_an_agent_deletes_its_webhook(make_server: ServerFactory) -> None:
    async with make_server(quick(), secrets_key=Fernet.generate_key().decode()) as server:
        owner = server.auth(role="owner")
        path, secret = await hooked(server)
        deleted = await server.client.delete("/v1/agents/inbox", headers=owner)
        again = await server.client.post("/v1/agents", json=HOOKED, headers=owner)
        text, headers = signed(secret, {"ticket": 1})
        replayed = await server.client.post(path, content=text, headers=headers)
        # A secret left behind by a deletion from before (written straight to the table):
        # creating the handle drops it too.
        await server.client.delete("/v1/agents/inbox", headers=owner)
        leftover = await server.store.hooks.rotate("acme", "inbox")
        await server.client.post("/v1/agents", json=HOOKED, headers=owner)
        text, headers = signed(leftover, {"ticket": 2})
        revived = await server.client.post(path, content=text, headers=headers)
        runs = await runs_of(server, "inbox")
        hook_off = await server.client.delete("/v1/agents/inbox/webhook", headers=owner)

    assert deleted.status_code == 204 and again.status_code == 201
    for refused in (replayed, revived):
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthorized"
    assert runs == []  # nothing started
    assert hook_off.status_code == 404  # the new agent has no webhook until one is made


async def test_a_signed_payload_has_the_run_apis_bounds(make_server: ServerFactory) -> None:
    async with make_server(quick(), secrets_key=Fernet.generate_key().decode()) as server:
        owner = server.auth(role="owner")
        path, secret = await hooked(server)

        async def deliver(payload: Any) -> tuple[int, str]:
            text, headers = signed(secret, payload)
            answer = await server.client.post(path, content=text, headers=headers)
            return answer.status_code, answer.json()["error"]["code"] if answer.is_error else ""

        async def through_api(context: Any) -> tuple[int, str]:
            body = {"task": "t", "context": context}
            answer = await server.client.post("/v1/agents/inbox/runs", json=body, headers=owner)
            return answer.status_code, answer.json()["error"]["code"] if answer.is_error else ""

        deepest_ok = {"a": nested(30)}  # 31 levels: as deep as a run's context may go
        too_deep = {"a": nested(31)}
        many_keys = {f"k{i}": i for i in range(65)}
        huge = {"blob": "x" * (65 * 1024)}
        hook = [await deliver(p) for p in (deepest_ok, too_deep, nested(31), many_keys, huge)]
        api = [await through_api(c) for c in (deepest_ok, too_deep, many_keys, huge)]
        fine = await deliver(nested(30))  # wrapped as {"event": [...]}: 31 levels
        text, headers = signed(secret, {"x": float("nan")})  # Python's json writes NaN
        not_json = await server.client.post(path, content=text, headers=headers)
        runs = await runs_of(server, "inbox")

    too_deep_code = (400, "invalid_request")
    assert api == [(202, ""), too_deep_code, too_deep_code, (413, "payload_too_large")]
    assert hook == [
        (202, ""),
        too_deep_code,
        too_deep_code,
        too_deep_code,
        (413, "payload_too_large"),
    ]
    assert fine == (202, "")
    assert not_json.status_code == 400, not_json.text
    assert not_json.json()["error"]["code"] == "invalid_request"
    assert sorted(r["trigger"] for r in runs) == ["api", "webhook", "webhook"]
