"""MCP toolsets over HTTP: owners configure them, owners and staff read them with their
status, nobody ever reads a secret back. Real MCP servers (``tests/tools/mcp_server.py``)
over stdio and streamable HTTP; a closed port for one that is down."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from structlog.testing import capture_logs

from conftest import ServerFactory, free_port
from mcp_testing import ALLOW_STDIO_ENV

SECRETS_KEY = Fernet.generate_key().decode()
SECRET = "tok-7c1d-very-secret-header-value"
MCP_SERVER = Path(__file__).parents[1] / "tools" / "mcp_server.py"
BASE = "/v1/mcp/toolsets"
DEAD = "http://127.0.0.1:9/"  # never connected to: every body below is refused


@pytest.fixture(autouse=True)
def _stdio_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The served app may run the test MCP server over stdio (off by default)."""
    for name, value in ALLOW_STDIO_ENV.items():
        monkeypatch.setenv(name, value)


def closed_url() -> str:
    """An MCP URL nothing listens on: the server is down."""
    return f"http://127.0.0.1:{free_port()}/mcp"


def stdio_body(state: Path, **more: Any) -> dict[str, Any]:
    command = [sys.executable, str(MCP_SERVER), "--state", str(state)]
    return {"transport": "stdio", "command": command, **more}


@asynccontextmanager
async def http_mcp_server(tmp_path: Path, header: str) -> AsyncIterator[str]:
    """The test MCP server over streamable HTTP, refusing requests without ``header``."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, str(MCP_SERVER), "--http", str(port)),
        *("--state", str(tmp_path / "http_state.json"), "--require-header", header),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


def code(response: httpx.Response) -> str:
    error: str = response.json()["error"]["code"]
    return error


async def test_owners_manage_a_toolset_and_a_down_server_still_saves(
    make_server: ServerFactory,
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        client, owner = server.client, server.auth(user="olga", role="owner")
        body = {
            "transport": "http", "url": closed_url(), "headers": {"Authorization": SECRET},
            "default_category": "write", "tool_categories": {"searchTickets": "read"},
            "timeout_s": 5,
        }  # fmt: skip
        saved = await client.put(f"{BASE}/tickets", json=body, headers=owner)
        assert saved.status_code == 200, saved.text
        toolset = saved.json()
        assert (toolset["name"], toolset["version"], toolset["transport"]) == ("tickets", 1, "http")
        assert toolset["header_names"] == ["Authorization"] and toolset["env_names"] == []
        assert toolset["tool_categories"] == {"searchTickets": "read"}
        assert toolset["status"]["state"] == "down" and toolset["status"]["error"]
        assert toolset["status"]["tools"] == []

        listed = await client.get(BASE, headers=server.auth(role="staff"))
        assert [t["name"] for t in listed.json()] == ["tickets"]
        assert listed.json()[0]["status"]["state"] == "down"
        one = await client.get(f"{BASE}/tickets", headers=server.auth(role="staff"))
        assert one.json()["url"] == body["url"] and one.json()["status"]["state"] == "down"

        replaced = await client.put(
            f"{BASE}/tickets", json={**body, "enabled": False, "headers": {}}, headers=owner
        )
        assert replaced.json()["version"] == 2 and replaced.json()["header_names"] == []
        assert replaced.json()["status"]["state"] == "disabled"

        assert (await client.delete(f"{BASE}/tickets", headers=owner)).status_code == 204
        assert (await client.get(f"{BASE}/tickets", headers=owner)).status_code == 404
        assert (await client.delete(f"{BASE}/tickets", headers=owner)).status_code == 404
        assert (await client.get(BASE, headers=owner)).json() == []


async def test_members_read_nothing_staff_change_nothing_other_orgs_see_nothing(
    make_server: ServerFactory,
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        client = server.client
        body = {"transport": "http", "url": closed_url()}
        made = await client.put(f"{BASE}/t", json=body, headers=server.auth(role="owner"))
        assert made.status_code == 200, made.text
        member, staff = server.auth(role="member"), server.auth(role="staff")
        refused = [
            await client.get(BASE, headers=member),
            await client.get(f"{BASE}/t", headers=member),
            await client.put(f"{BASE}/t", json=body, headers=member),
            await client.put(f"{BASE}/t", json=body, headers=staff),
            await client.delete(f"{BASE}/t", headers=staff),
        ]
        assert [(r.status_code, code(r)) for r in refused] == [(403, "forbidden")] * 5

        other = server.auth(org="other-org", role="owner")
        assert (await client.get(BASE, headers=other)).json() == []
        assert code(await client.get(f"{BASE}/t", headers=other)) == "not_found"
        assert (await client.delete(f"{BASE}/t", headers=other)).status_code == 404
        kept = await client.get(f"{BASE}/t", headers=staff)
        assert kept.status_code == 200 and kept.json()["version"] == 1


BAD_BODIES: list[tuple[dict[str, Any], int, str]] = [
    ({"transport": "http", "url": DEAD, "extra": 1}, 400, "invalid_request"),
    ({"transport": "sse", "url": DEAD}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "timeout_s": 0}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "headers": {"bad name": "x"}}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "headers": {"A": "x\ny"}}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "tool_categories": {"t": "admin"}}, 400, "invalid_request"),
    ({"transport": "http"}, 400, "invalid_request"),
    ({"transport": "http", "url": "https://user:pw@127.0.0.1/"}, 400, "invalid_request"),
    ({"transport": "http", "url": "file:///etc/passwd"}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "command": ["x"]}, 400, "invalid_request"),
    ({"transport": "http", "url": DEAD, "env": {"A": "x"}}, 400, "invalid_request"),
    ({"transport": "stdio", "command": []}, 400, "invalid_request"),
    ({"transport": "stdio", "command": ["x"], "url": DEAD}, 400, "invalid_request"),
    ({"transport": "stdio", "command": ["x"], "headers": {"A": SECRET}}, 400, "invalid_request"),
    ({"transport": "stdio", "command": [" "]}, 422, "stdio_disabled"),  # not on the list
    ({"transport": "stdio", "command": ["/bin/sh", "-c", "env"]}, 422, "stdio_disabled"),
    ({"transport": "stdio", "command": ["python3", "-c", "1"]}, 422, "stdio_disabled"),
    ({"transport": "http", "url": DEAD, "headers": {"Host": "x"}}, 422, "invalid_toolset"),
]


async def test_bad_bodies_are_refused_and_nothing_is_saved(make_server: ServerFactory) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        owner = server.auth(role="owner")
        for body, status, error in BAD_BODIES:
            response = await server.client.put(f"{BASE}/tickets", json=body, headers=owner)
            assert (response.status_code, code(response)) == (status, error), (body, response.text)
            assert SECRET not in response.text
        assert (await server.client.get(BASE, headers=owner)).json() == []


async def test_names_secrets_and_stdio_are_checked_before_saving(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("BOSUN_MCP__STDIO_COMMANDS")  # the default: stdio is off
    async with make_server() as server:  # no BOSUN_SECRETS_KEY
        client, owner = server.client, server.auth(role="owner")
        bad_name = await client.put(f"{BASE}/Tickets", json={}, headers=owner)
        assert (bad_name.status_code, code(bad_name)) == (400, "invalid_request")
        assert "toolset" in bad_name.json()["error"]["message"]

        stdio = await client.put(f"{BASE}/db", json=stdio_body(tmp_path / "s"), headers=owner)
        assert (stdio.status_code, code(stdio)) == (422, "stdio_disabled")
        secret = {"transport": "http", "url": closed_url(), "headers": {"Authorization": SECRET}}
        sealed = await client.put(f"{BASE}/t", json=secret, headers=owner)
        assert (sealed.status_code, code(sealed)) == (422, "secrets_unavailable")
        assert "BOSUN_SECRETS_KEY" in sealed.json()["error"]["message"]
        assert (await client.get(BASE, headers=owner)).json() == []

        plain = await client.put(f"{BASE}/t", json={**secret, "headers": {}}, headers=owner)
        assert plain.status_code == 200, plain.text


async def test_a_stdio_server_is_connected_and_its_tools_listed(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    with capture_logs() as logs:
        made = make_server(secrets_key=SECRETS_KEY)  # stdio allowed: a loud start
    assert [log["programs"] for log in logs if log["event"] == "mcp.stdio_allowed"] == [
        [sys.executable]
    ]
    assert [log["log_level"] for log in logs if log["event"] == "mcp.stdio_allowed"] == ["warning"]
    async with made as server:
        client, owner = server.client, server.auth(role="owner")
        body = stdio_body(tmp_path / "state.json", tool_categories={"create_ticket": "read"})
        saved = await client.put(f"{BASE}/tickets", json=body, headers=owner)
        assert saved.status_code == 200, saved.text
        status = saved.json()["status"]
        assert status["state"] == "connected", status
        categories = {t["name"]: t["category"] for t in status["tools"]}
        assert categories["tickets.search_tickets"] == "read"  # readOnlyHint
        assert categories["tickets.delete_ticket"] == "destructive"  # destructiveHint
        assert categories["tickets.create_ticket"] == "read"  # the owner's override
        assert categories["tickets.add_extras"] == "write"  # no annotation: never read
        assert categories["tickets.slow_echo"] == "read"
        assert {t["mcp_name"] for t in status["tools"]} >= {"slowEcho", "search_tickets"}
        assert status["skipped"] == ["9lives"]

        again = await client.get(f"{BASE}/tickets", headers=owner)
        assert again.json()["status"]["state"] == "connected"
        refreshed = await client.get(f"{BASE}/tickets?refresh=true", headers=owner)
        assert refreshed.json()["status"]["tools"] == status["tools"]
        assert (await client.delete(f"{BASE}/tickets", headers=owner)).status_code == 204


async def test_a_secret_header_reaches_the_server_and_nothing_else(
    make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        http_mcp_server(tmp_path, f"Authorization=Bearer {SECRET}") as url,
        make_server(secrets_key=SECRETS_KEY) as server,
    ):
        client, owner = server.client, server.auth(role="owner")
        with capture_logs() as logs:
            wrong = {"transport": "http", "url": url, "headers": {"Authorization": "Bearer no"}}
            refused = await client.put(f"{BASE}/tickets", json=wrong, headers=owner)
            right = {**wrong, "headers": {"Authorization": f"Bearer {SECRET}"}}
            saved = await client.put(f"{BASE}/tickets", json=right, headers=owner)
            responses = [
                refused, saved,
                await client.get(BASE, headers=owner),
                await client.get(f"{BASE}/tickets?refresh=true", headers=owner),
            ]  # fmt: skip
        assert refused.json()["status"]["state"] == "down"
        assert saved.json()["status"]["state"] == "connected", saved.text
        assert saved.json()["header_names"] == ["Authorization"]
        stored = await server.store.mcp_toolsets.get("acme", "tickets")
        assert stored is not None
        assert await server.store.mcp_toolsets.secrets(stored) == (right["headers"], {})

    for response in responses:
        assert SECRET not in response.text
    assert {"mcp.down", "mcp.connected"} <= {event["event"] for event in logs}  # captured
    assert SECRET not in json.dumps(logs, default=str)
    assert SECRET not in caplog.text


async def test_an_agent_shows_the_state_of_the_toolsets_its_profile_names(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        client, owner = server.client, server.auth(role="owner")
        body = stdio_body(tmp_path / "state.json")
        await client.put(f"{BASE}/tickets", json=body, headers=owner)
        down = {"transport": "http", "url": closed_url()}
        await client.put(f"{BASE}/calendar", json=down, headers=owner)
        await client.put(f"{BASE}/unused", json=body, headers=owner)
        profile = {
            "handle": "helper", "name": "Helper",
            "tools": ["tickets.*", "calendar.book", "workouts.*"],
            "approvals": ["unused.anything"],  # granted no tool of it: not shown
        }  # fmt: skip
        made = await client.post("/v1/agents", json=profile, headers=owner)
        assert made.status_code == 201, made.text

        shown = await client.get("/v1/agents/helper", headers=server.auth(role="member"))
        assert shown.status_code == 200, shown.text
        assert shown.json()["toolsets"] == [
            {"name": "calendar", "state": "down", "error": shown.json()["toolsets"][0]["error"]},
            {"name": "tickets", "state": "connected", "error": None},
        ]
        assert shown.json()["toolsets"][0]["error"]
        plain = await client.get("/v1/agents/default", headers=owner)
        assert plain.json()["toolsets"] == []
