"""OpenAPI toolsets: per org, replaced whole (a new version, the same secret), the signing
secret made once, returned once and encrypted at rest."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text

from store import (
    InvalidToolsetError,
    OpenApiToolsets,
    OpenApiToolsetSpec,
    SecretsKeyError,
    Store,
)
from store._org_keys import SecretBox

DOCUMENT = {"openapi": "3.1.0", "paths": {}}


def spec(**fields: object) -> OpenApiToolsetSpec:
    values: dict[str, object] = {"document": DOCUMENT, "base_url": "https://api.example.test"}
    return OpenApiToolsetSpec(**(values | fields))  # type: ignore[arg-type]


async def test_the_secret_is_made_once_returned_once_and_kept_encrypted(store: Store) -> None:
    repo = OpenApiToolsets(store.db, SecretBox(Fernet.generate_key().decode()))
    made, secret = await repo.put("acme", "notes", spec(include=["notes"], timeout_s=3))
    replaced, again = await repo.put("acme", "notes", spec(identity_mode="forward"))
    other, theirs = await repo.put("o2", "notes", spec())

    assert secret is not None and len(secret) >= 32 and again is None
    assert (made.version, replaced.version) == (1, 2) and replaced.id == made.id
    assert made.include == ["notes"] and replaced.include == [] and made.timeout_s == 3
    assert replaced.identity_mode == "forward" and replaced.document == DOCUMENT
    assert await repo.secret(replaced) == secret  # a replace keeps it
    assert theirs is not None and theirs != secret and other.org_id == "o2"
    assert await repo.versions("acme") == {"notes": (made.id, 2)}
    async with store.db.read() as conn:
        raw = " ".join(
            " ".join(map(str, row))
            for row in (await conn.execute(text("SELECT * FROM openapi_toolsets"))).all()
        )
    assert secret not in raw and theirs not in raw
    assert await repo.delete("acme", "notes") and await repo.get("acme", "notes") is None
    assert await repo.secret(made) is None and await repo.names("o2") == ["notes"]


@pytest.mark.parametrize(
    ("name", "fields", "message"),
    [
        ("Notes", {}, "toolset name"),
        ("notes", {"base_url": "ftp://x"}, "base_url"),
        ("notes", {"identity_mode": "trust"}, "signed or forward"),
        ("notes", {"categories": {"x": "admin"}}, "read, write or destructive"),
        ("notes", {"timeout_s": 0}, "timeout"),
    ],
)
async def test_unusable_configurations_are_refused(
    store: Store, name: str, fields: dict[str, object], message: str
) -> None:
    repo = OpenApiToolsets(store.db, SecretBox(Fernet.generate_key().decode()))
    with pytest.raises(InvalidToolsetError, match=message):
        await repo.put("acme", name, spec(**fields))


async def test_no_secrets_key_no_toolset(store: Store) -> None:
    with pytest.raises(SecretsKeyError, match="BOSUN_SECRETS_KEY"):
        await OpenApiToolsets(store.db, None).put("acme", "notes", spec())
