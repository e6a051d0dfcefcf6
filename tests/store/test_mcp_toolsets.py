"""MCP toolsets: per org, replaced whole (a new version), secrets encrypted at rest."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text

from store import InvalidToolsetError, McpToolsets, McpToolsetSpec, SecretsKeyError, Store
from store._org_keys import SecretBox

TOKEN = "Bearer tok-very-secret-4242"
DB_PASSWORD = "hunter2-db-password"


def toolsets(store: Store) -> McpToolsets:
    return McpToolsets(store.db, SecretBox(Fernet.generate_key().decode()))


async def test_an_http_toolset_round_trips_with_its_secrets_encrypted(store: Store) -> None:
    repo = toolsets(store)
    saved = await repo.put(
        "acme",
        "tickets",
        McpToolsetSpec(
            transport="http",
            url="https://mcp.example.test/mcp",
            headers={"Authorization": TOKEN, "X-Team": "blue"},
            default_category="write",
            tool_categories={"search-tickets": "read"},
            timeout_s=12.5,
        ),
    )
    assert saved.id.startswith("mcp_") and saved.version == 1 and saved.enabled
    assert saved.header_names == ["Authorization", "X-Team"] and saved.env_names == []
    assert saved.tool_categories == {"search-tickets": "read"} and saved.timeout_s == 12.5
    assert await repo.get("acme", "tickets") == saved
    assert await repo.secrets(saved) == ({"Authorization": TOKEN, "X-Team": "blue"}, {})

    async with store.db.read() as conn:
        raw = " ".join(map(str, (await conn.execute(text("SELECT * FROM mcp_toolsets"))).one()))
    assert "tok-very-secret" not in raw and "blue" not in raw
    assert "Authorization" in raw  # names are listed, values never


async def test_a_stdio_toolset_keeps_its_command_and_env(store: Store) -> None:
    repo = toolsets(store)
    saved = await repo.put(
        "acme",
        "db",
        McpToolsetSpec(
            transport="stdio",
            command=["python", "-m", "db_server", "--read-only"],
            env={"DB_PASSWORD": DB_PASSWORD},
        ),
    )
    assert saved.command == ["python", "-m", "db_server", "--read-only"]
    assert saved.url is None and saved.default_category is None and saved.timeout_s == 30.0
    assert await repo.secrets(saved) == ({}, {"DB_PASSWORD": DB_PASSWORD})
    async with store.db.read() as conn:
        sealed = await conn.scalar(text("SELECT env_enc FROM mcp_toolsets"))
    assert DB_PASSWORD not in sealed


async def test_a_replace_bumps_the_version_and_drops_secrets_not_given(store: Store) -> None:
    repo = toolsets(store)
    first = await repo.put(
        "acme",
        "tickets",
        McpToolsetSpec(
            transport="http", url="http://127.0.0.1:9/mcp", headers={"Authorization": TOKEN}
        ),
    )
    second = await repo.put(
        "acme",
        "tickets",
        McpToolsetSpec(transport="http", url="http://127.0.0.1:9/v2", enabled=False),
    )
    assert (second.id, second.version, second.created_at) == (first.id, 2, first.created_at)
    assert second.updated_at >= first.updated_at
    assert (
        second.url == "http://127.0.0.1:9/v2" and not second.enabled and second.header_names == []
    )
    assert await repo.secrets(second) == ({}, {})
    third = await repo.put("acme", "tickets", McpToolsetSpec(transport="stdio", command=["srv"]))
    assert third.version == 3 and third.transport == "stdio" and third.url is None


async def test_orgs_are_apart_and_delete_removes_one(store: Store) -> None:
    repo = toolsets(store)
    for org in ("acme", "other"):
        await repo.put(org, "tickets", McpToolsetSpec(transport="stdio", command=["srv", org]))
    await repo.put("acme", "calendar", McpToolsetSpec(transport="stdio", command=["cal"]))

    assert [t.name for t in await repo.list_for_org("acme")] == ["calendar", "tickets"]
    other = await repo.get("other", "tickets")
    assert other is not None and other.command == ["srv", "other"]
    assert await repo.get("other", "calendar") is None

    assert await repo.delete("acme", "tickets")
    assert not await repo.delete("acme", "tickets")
    assert await repo.get("acme", "tickets") is None
    assert [t.name for t in await repo.list_for_org("other")] == ["tickets"]


async def test_secrets_need_the_server_key_but_plain_toolsets_do_not(store: Store) -> None:
    repo = McpToolsets(store.db, None)
    with pytest.raises(SecretsKeyError, match="BOSUN_SECRETS_KEY"):
        await repo.put(
            "acme",
            "t",
            McpToolsetSpec(
                transport="http", url="http://127.0.0.1:9/", headers={"Authorization": TOKEN}
            ),
        )
    assert await repo.get("acme", "t") is None
    plain = await repo.put("acme", "t", McpToolsetSpec(transport="http", url="http://127.0.0.1:9/"))
    assert await repo.secrets(plain) == ({}, {})

    sealed = await toolsets(store).put(
        "acme", "s", McpToolsetSpec(transport="stdio", command=["x"], env={"K": "v"})
    )
    with pytest.raises(SecretsKeyError, match="rotated"):
        await toolsets(store).secrets(sealed)  # another server key


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"name": "Tickets", "transport": "stdio", "command": ["x"]}, "toolset name"),
        ({"name": "t" * 41, "transport": "stdio", "command": ["x"]}, "toolset name"),
        ({"transport": "http"}, "url"),
        ({"transport": "http", "url": "ftp://host/"}, "url"),
        ({"transport": "http", "url": "https://user:pw@host/"}, "credentials"),
        ({"transport": "http", "url": "https://h/", "command": ["x"]}, "no command"),
        ({"transport": "stdio"}, "needs a command"),
        ({"transport": "stdio", "command": [" "]}, "needs a command"),
        ({"transport": "stdio", "command": ["x"], "url": "https://h/"}, "no url"),
        ({"transport": "sse", "url": "https://h/"}, "transport"),
        ({"transport": "http", "url": "https://h/", "headers": {"Host": "x"}}, "header"),
        ({"transport": "http", "url": "https://h/", "headers": {"A": "x\r\nB: y"}}, "line"),
        ({"transport": "stdio", "command": ["x"], "env": {"1X": "v"}}, "environment"),
        ({"transport": "stdio", "command": ["x"], "default_category": "admin"}, "category"),
        ({"transport": "stdio", "command": ["x"], "tool_categories": {"a": "x"}}, "category"),
        ({"transport": "stdio", "command": ["x"], "timeout_s": 0}, "timeout"),
    ],
)
async def test_bad_configurations_are_refused(
    store: Store, fields: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidToolsetError, match=match):
        spec = McpToolsetSpec(**{k: v for k, v in fields.items() if k != "name"})  # type: ignore[arg-type]
        await toolsets(store).put("acme", str(fields.get("name", "t")), spec)
    assert await store.mcp_toolsets.list_for_org("acme") == []
