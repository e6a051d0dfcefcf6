"""Org provider keys: encrypted at rest, readable only with the server's key."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text

from store import OrgKeys, SecretsKeyError, Store
from store._org_keys import SecretBox

API_KEY = "sk-ant-test-0123456789-wxyz"


async def test_keys_round_trip_encrypted(store: Store) -> None:
    keys = OrgKeys(store.db, SecretBox(Fernet.generate_key().decode()))
    info = await keys.put(org_id="acme", provider="anthropic", api_key=API_KEY)
    assert info.last4 == "wxyz"
    assert await keys.get(org_id="acme", provider="anthropic") == API_KEY
    assert await keys.get(org_id="acme", provider="openai") is None
    assert await keys.get(org_id="other", provider="anthropic") is None
    async with store.db.read() as conn:
        stored = (await conn.execute(text("SELECT ciphertext, last4 FROM org_api_keys"))).one()
    assert API_KEY not in stored[0]
    assert stored[1] == "wxyz"

    await keys.put(org_id="acme", provider="anthropic", api_key="sk-ant-replaced-9999")
    listed = await keys.list_for_org("acme")
    assert [(i.provider, i.last4) for i in listed] == [("anthropic", "9999")]
    assert await keys.delete(org_id="acme", provider="anthropic")
    assert not await keys.delete(org_id="acme", provider="anthropic")
    assert await keys.list_for_org("acme") == []


async def test_another_server_key_cannot_read_them(store: Store) -> None:
    writer = OrgKeys(store.db, SecretBox(Fernet.generate_key().decode()))
    await writer.put(org_id="acme", provider="openai", api_key=API_KEY)
    reader = OrgKeys(store.db, SecretBox(Fernet.generate_key().decode()))
    with pytest.raises(SecretsKeyError, match="rotated"):
        await reader.get(org_id="acme", provider="openai")


async def test_without_a_server_key_keys_are_off(store: Store) -> None:
    keys = OrgKeys(store.db, None)
    assert not keys.enabled
    with pytest.raises(SecretsKeyError, match="BOSUN_SECRETS_KEY"):
        await keys.put(org_id="acme", provider="openai", api_key=API_KEY)
    assert await keys.get(org_id="acme", provider="openai") is None


def test_a_malformed_server_key_says_how_to_make_one() -> None:
    with pytest.raises(SecretsKeyError, match="generate_key"):
        SecretBox("not-a-fernet-key")
