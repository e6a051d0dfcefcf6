"""The egress guard over real HTTP: a webhook or MCP URL at (or resolving to) an internal
address is refused when it is saved (422 ``egress_refused``, nothing saved, nothing
connected) and accepted when the operator opens ``egress.allow_private``; a name that
rebinds to 127.0.0.1 after it was saved is refused when connected to, the delivery log
and the toolset's status naming the class of address, and nothing reaches the receiver."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from test_notices import OWNER, deliveries_until

from bosun.settings import Settings
from conftest import JWT_SECRET, Server, ServerFactory
from egress_testing import PUBLIC_IP, FakeDns, listener
from tools import McpPool, McpStatus
from turn import TurnModels

SECRETS_KEY = Fernet.generate_key().decode()
SHUT: dict[str, bool] = {}  # the default settings: public addresses only
HOSTS = {  # host in the URL: the class of address the refusal names
    "127.0.0.1": "a loopback address",
    "0x7f000001": "a loopback address",
    "2130706433": "a loopback address",
    "017700000001": "a loopback address",
    "127.1": "a loopback address",
    "localhost": "a loopback address",
    "loopback.test": "a loopback address",  # a name resolving to 127.0.0.1
    "loopback6.test": "a loopback address",  # ... and to ::1
    "169.254.169.254": "a link-local address",
    "10.1.2.3": "a private address",
    "192.168.1.1": "a private address",
    "100.64.0.1": "a shared (carrier-grade NAT) address",
    "0.0.0.0": "an unspecified address (0.0.0.0 or ::)",  # noqa: S104 (under test)
}
MCP_HOSTS = HOSTS | {"[::1]": "a loopback address", "[::ffff:127.0.0.1]": "a loopback address"}


def fake_dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    dns = FakeDns(monkeypatch)
    dns.answers |= {"loopback.test": ["127.0.0.1"], "loopback6.test": ["::1"]}
    return dns


async def _status_only(pool: McpPool, org_id: str, name: str) -> McpStatus:
    [status] = await pool.status(org_id, [name])
    return status


async def test_webhooks_to_internal_addresses_are_refused_unless_opened(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_dns(monkeypatch)
    async with make_server(secrets_key=SECRETS_KEY, egress=SHUT) as server:
        refused = {
            host: await server.client.post(
                "/v1/webhooks",
                json={"url": f"http://{host}:8080/hook"},
                headers=server.auth(**OWNER),
            )
            for host in HOSTS
        }
        listed = await server.client.get("/v1/webhooks", headers=server.auth(**OWNER))
    async with make_server(secrets_key=SECRETS_KEY) as opened:  # egress.allow_private
        accepted = [
            await opened.client.post(
                "/v1/webhooks", json={"url": f"http://{host}/hook"}, headers=opened.auth(**OWNER)
            )
            for host in HOSTS
        ]

    for host, kind in HOSTS.items():
        answer = refused[host]
        assert answer.status_code == 422, (host, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "egress_refused", host
        assert error["message"].startswith(f"The URL resolves to {kind}: "), (host, error)
        assert "8080" not in error["message"]
    assert listed.json() == []  # nothing saved
    assert [a.status_code for a in accepted] == [201] * len(HOSTS)


async def test_mcp_servers_at_internal_addresses_are_refused_unless_opened(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_dns(monkeypatch)
    monkeypatch.setattr(McpPool, "refresh", _status_only)  # opened: saved, not connected to

    def put(server: Server, index: int, host: str) -> Any:
        body = {"transport": "http", "url": f"http://{host}:8080/mcp"}
        return server.client.put(
            f"/v1/mcp/toolsets/t{index}", json=body, headers=server.auth(**OWNER)
        )

    async with make_server(secrets_key=SECRETS_KEY, egress=SHUT) as server:
        refused = {host: await put(server, i, host) for i, host in enumerate(MCP_HOSTS)}
        listed = await server.client.get("/v1/mcp/toolsets", headers=server.auth(**OWNER))
    async with make_server(secrets_key=SECRETS_KEY) as opened:
        accepted = [await put(opened, i, host) for i, host in enumerate(MCP_HOSTS)]

    for host, kind in MCP_HOSTS.items():
        answer = refused[host]
        assert answer.status_code == 422, (host, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "egress_refused", host
        assert error["message"].startswith(f"The URL resolves to {kind}: "), (host, error)
    assert listed.json() == []
    assert [a.status_code for a in accepted] == [200] * len(MCP_HOSTS)


async def test_a_webhook_rebound_to_loopback_is_refused_at_delivery(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers["hooks.rebind.test"] = [PUBLIC_IP, "127.0.0.1"]  # saved public, sent local
    settings = Settings(
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        secrets_key=SECRETS_KEY,  # type: ignore[arg-type]
        webhooks={"retry_schedule_s": [], "timeout_s": 2.0},  # type: ignore[arg-type]
    )
    with listener() as rx:
        async with Server(settings, TurnModels()) as server:
            url = f"http://hooks.rebind.test:{rx.port}/hooks"
            made = await server.client.post(
                "/v1/webhooks", json={"url": url}, headers=server.auth(**OWNER)
            )
            assert made.status_code == 201, made.text
            await server.store.notices.publish("acme", "cost_alert", {"agent": "coach"})
            [delivery] = await deliveries_until(
                server, made.json()["id"], lambda d: d and d[0]["status"] == "failed"
            )

    [attempt] = delivery["attempts"]
    assert attempt["error"] == "egress_refused: the URL resolves to a loopback address"
    assert attempt["status_code"] is None and delivery["status"] == "failed"
    assert rx.got == [] and dns.asked == ["hooks.rebind.test", "hooks.rebind.test"]


async def test_an_mcp_server_rebound_to_loopback_is_down_with_the_class_of_address(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers["mcp.rebind.test"] = [PUBLIC_IP, "127.0.0.1"]
    with listener() as rx:
        async with make_server(secrets_key=SECRETS_KEY, egress=SHUT) as server:
            body = {"transport": "http", "url": f"http://mcp.rebind.test:{rx.port}/mcp"}
            saved = await server.client.put(
                "/v1/mcp/toolsets/tickets", json=body, headers=server.auth(**OWNER)
            )

    assert saved.status_code == 200, saved.text
    status = saved.json()["status"]
    assert status["state"] == "down" and status["tools"] == []
    assert status["error"] == "egress_refused: the URL resolves to a loopback address"
    assert rx.got == []


async def test_loopback_alone_is_open_under_dev(make_server: ServerFactory) -> None:
    # What `bosun serve --dev` sets: a local receiver works, other private ranges do not.
    with listener() as rx:
        dev = {"allow_loopback": True}
        async with make_server(secrets_key=SECRETS_KEY, egress=dev) as server:
            owner = server.auth(**OWNER)
            local = await server.client.post(
                "/v1/webhooks", json={"url": f"http://127.0.0.1:{rx.port}/hooks"}, headers=owner
            )
            private = await server.client.post(
                "/v1/webhooks", json={"url": "http://10.0.0.8/hooks"}, headers=owner
            )
            await server.store.notices.publish("acme", "cost_alert", {"agent": "coach"})
            [delivery] = await deliveries_until(
                server, local.json()["id"], lambda d: d and d[0]["status"] == "delivered"
            )

    assert local.status_code == 201 and delivery["attempts"][0]["status_code"] == 200
    assert rx.got == ["POST /hooks"]
    assert private.status_code == 422 and private.json()["error"]["code"] == "egress_refused"
