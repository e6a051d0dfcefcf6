"""OpenAPI toolsets over HTTP: owners configure them from a document (inline or by URL),
owners and staff read them with the tools they become, the signing secret is shown once,
and documents or URLs no tool could come from are refused with a stable code."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from conftest import ServerFactory, free_port
from openapi_testing import notes_host
from store import McpToolsetSpec

SECRETS_KEY = Fernet.generate_key().decode()
BASE = "/v1/openapi/toolsets"
NOTES = json.loads(
    (Path(__file__).parents[2] / "examples" / "notes_api" / "openapi.json").read_text()
)
API = "http://127.0.0.1:9"  # never called by these tests


def body(**more: Any) -> dict[str, Any]:
    return {"openapi": NOTES, "base_url": API, **more}


def code(response: httpx.Response) -> str:
    error: str = response.json()["error"]["code"]
    return error


async def test_owners_manage_a_toolset_and_its_secret_is_shown_once(
    make_server: ServerFactory,
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        client, owner = server.client, server.auth(user="olga", role="owner")
        chosen = body(
            operations={"exclude": ["getNote"]}, categories={"listNotes": "write"}, timeout_s=3
        )
        made = await client.put(f"{BASE}/notes", json=chosen, headers=owner)
        staff = server.auth(role="staff")
        listed = await client.get(BASE, headers=staff)
        one = await client.get(f"{BASE}/notes", headers=staff)
        replaced = await client.put(f"{BASE}/notes", json=body(), headers=owner)
        removed = await client.delete(f"{BASE}/notes", headers=owner)
        gone = await client.get(f"{BASE}/notes", headers=owner)
        again = await client.delete(f"{BASE}/notes", headers=owner)

    assert made.status_code == 200, made.text
    toolset = made.json()
    assert len(toolset["secret"]) >= 32 and toolset["version"] == 1
    assert toolset["identity"] == {"mode": "signed"} and toolset["timeout_s"] == 3
    assert toolset["operations"] == {"include": [], "exclude": ["getNote"]}
    assert [(t["name"], t["method"], t["category"], t["undo"]) for t in toolset["tools"]] == [
        ("notes.list_notes", "GET", "write", None),
        ("notes.create_note", "POST", "write", "notes.delete_note"),
        ("notes.delete_note", "DELETE", "destructive", None),
    ]  # fmt: skip
    assert [t["name"] for t in listed.json()] == ["notes"] and listed.json()[0]["secret"] is None
    assert one.json()["secret"] is None and one.json()["tools"] == toolset["tools"]
    assert replaced.json()["version"] == 2 and replaced.json()["secret"] is None
    assert len(replaced.json()["tools"]) == 4
    assert removed.status_code == 204 and gone.status_code == 404 and again.status_code == 404


async def test_members_read_nothing_staff_change_nothing_other_orgs_see_nothing(
    make_server: ServerFactory,
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        client = server.client
        made = await client.put(f"{BASE}/notes", json=body(), headers=server.auth(role="owner"))
        assert made.status_code == 200, made.text
        member = await client.get(BASE, headers=server.auth(role="member"))
        staff_put = await client.put(f"{BASE}/x", json=body(), headers=server.auth(role="staff"))
        staff_delete = await client.delete(f"{BASE}/notes", headers=server.auth(role="staff"))
        other = await client.get(f"{BASE}/notes", headers=server.auth(org="o2", role="owner"))
        others = await client.get(BASE, headers=server.auth(org="o2", role="owner"))

    assert member.status_code == 403 and code(member) == "forbidden"
    assert staff_put.status_code == 403 and staff_delete.status_code == 403
    assert other.status_code == 404 and others.json() == []


def _broken(change: str) -> dict[str, Any]:
    document = copy.deepcopy(NOTES)
    if change == "swagger":
        return {"swagger": "2.0", "paths": {}}
    if change == "no_operation_id":
        del document["paths"]["/notes"]["get"]["operationId"]
    if change == "dangling_ref":
        document["components"]["schemas"].pop("NoteIn")
    if change == "bad_category":
        document["paths"]["/notes"]["get"]["x-bosun-category"] = "sometimes"
    return document


@pytest.mark.parametrize(
    ("sent", "status", "error"),
    [
        (body(openapi=_broken("swagger")), 422, "invalid_document"),
        (body(openapi=_broken("no_operation_id")), 422, "invalid_document"),
        (body(openapi=_broken("dangling_ref")), 422, "invalid_document"),
        (body(openapi=_broken("bad_category")), 422, "invalid_document"),
        (body(openapi_url=f"{API}/openapi.json"), 400, "invalid_request"),  # both
        ({"base_url": API}, 400, "invalid_request"),  # neither
        (body(base_url="file:///etc/passwd"), 400, "invalid_request"),
        (body(identity={"mode": "trust_me"}), 400, "invalid_request"),
        (body(categories={"listNotes": "admin"}), 400, "invalid_request"),
        (body(timeout_s=0), 400, "invalid_request"),
        (body(extra=1), 400, "invalid_request"),
    ],
)
async def test_bad_bodies_are_refused_with_a_stable_code(
    make_server: ServerFactory, sent: dict[str, Any], status: int, error: str
) -> None:
    async with make_server(secrets_key=SECRETS_KEY) as server:
        response = await server.client.put(
            f"{BASE}/notes", json=sent, headers=server.auth(role="owner")
        )
        listed = await server.client.get(BASE, headers=server.auth(role="owner"))
    assert (response.status_code, code(response)) == (status, error), response.text
    assert listed.json() == []


async def test_a_document_by_url_is_fetched_and_urls_are_checked(
    make_server: ServerFactory,
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with notes_host() as (_, url):
        async with make_server(secrets_key=SECRETS_KEY) as server:
            owner = server.auth(role="owner")
            fetched = await server.client.put(
                f"{BASE}/notes", json={"openapi_url": f"{url}/openapi.json", "base_url": url},
                headers=owner,
            )  # fmt: skip
            unreachable = await server.client.put(
                f"{BASE}/down", json={"openapi_url": f"{closed}/openapi.json", "base_url": url},
                headers=owner,
            )  # fmt: skip
            not_a_document = await server.client.put(
                f"{BASE}/notdoc", json={"openapi_url": f"{url}/notes", "base_url": url},
                headers=owner,
            )  # fmt: skip
        async with make_server(secrets_key=SECRETS_KEY, egress={}) as shut:
            refused = await shut.client.put(
                f"{BASE}/notes", json=body(base_url=url), headers=shut.auth(role="owner")
            )
            refused_doc = await shut.client.put(
                f"{BASE}/notes",
                json={"openapi_url": f"{url}/openapi.json", "base_url": "https://8.8.8.8"},
                headers=shut.auth(role="owner"),
            )

    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["openapi_url"] == f"{url}/openapi.json"
    assert len(fetched.json()["tools"]) == 4
    assert (unreachable.status_code, code(unreachable)) == (422, "openapi_unreachable")
    assert (not_a_document.status_code, code(not_a_document)) == (422, "openapi_unreachable")
    assert (refused.status_code, code(refused)) == (422, "egress_refused")
    assert (refused_doc.status_code, code(refused_doc)) == (422, "egress_refused")


async def test_no_secrets_key_and_a_taken_name_are_refused(make_server: ServerFactory) -> None:
    async with make_server() as keyless:
        no_key = await keyless.client.put(
            f"{BASE}/notes", json=body(), headers=keyless.auth(role="owner")
        )
    async with make_server(secrets_key=SECRETS_KEY) as server:
        await server.store.mcp_toolsets.put(
            "acme", "tickets", McpToolsetSpec(transport="http", url="http://127.0.0.1:9/")
        )
        owner = server.auth(role="owner")
        taken = await server.client.put(f"{BASE}/tickets", json=body(), headers=owner)
        made = await server.client.put(f"{BASE}/notes", json=body(), headers=owner)
        mcp = {"transport": "http", "url": "http://127.0.0.1:9/"}
        taken_by_us = await server.client.put("/v1/mcp/toolsets/notes", json=mcp, headers=owner)
    assert (no_key.status_code, code(no_key)) == (422, "secrets_unavailable")
    assert (taken.status_code, code(taken)) == (409, "toolset_exists")
    assert made.status_code == 200, made.text
    assert (taken_by_us.status_code, code(taken_by_us)) == (409, "toolset_exists")
