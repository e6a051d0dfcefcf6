"""Per-org provider keys, encrypted with Fernet (AES-128-CBC + HMAC) under the server key.

Only the ciphertext and the last four characters are stored; the plaintext is decrypted
per request, for the one provider call that needs it, and never listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import delete, insert, select, update

from store._db import Database
from store._models import OrgKeyRow, OrgRow, utcnow


class SecretsKeyError(ValueError):
    """No usable server key to encrypt or decrypt org secrets with. ``needs`` says what
    needed one when no key is set at all, so a caller that is not the server (the CLI,
    which encrypts what it stores itself) can say where to set it."""

    def __init__(self, message: str, *, needs: str | None = None) -> None:
        super().__init__(message)
        self.needs = needs


@dataclass(frozen=True, slots=True)
class OrgKeyInfo:
    provider: str
    last4: str
    updated_at: datetime


class SecretBox:
    """Encrypts and decrypts short secrets under one Fernet key."""

    def __init__(self, key: str) -> None:
        try:
            self._fernet = Fernet(key)
        except ValueError as exc:
            raise SecretsKeyError(
                "BOSUN_SECRETS_KEY must be a Fernet key (32 url-safe base64 bytes); generate one "
                "with: python3 -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'"
            ) from exc

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self._fernet.decrypt(ciphertext.encode()).decode()
        except InvalidToken as exc:
            raise SecretsKeyError(
                "A stored org key cannot be decrypted with the current BOSUN_SECRETS_KEY "
                "(was the key rotated?); store the org key again"
            ) from exc


def require_box(box: SecretBox | None, needs: str) -> SecretBox:
    """``box``, or ``SecretsKeyError`` when the server has no ``BOSUN_SECRETS_KEY``: each
    repository that stores secrets says in ``needs`` what needs it."""
    if box is None:
        raise SecretsKeyError(f"{needs}: set BOSUN_SECRETS_KEY on the server", needs=needs)
    return box


class OrgKeys:
    """Repository of org provider keys; needs a ``SecretBox`` to store or read one."""

    def __init__(self, db: Database, box: SecretBox | None) -> None:
        self._db = db
        self._box = box

    @property
    def enabled(self) -> bool:
        return self._box is not None

    def _require_box(self) -> SecretBox:
        return require_box(self._box, "Org provider keys are stored encrypted")

    async def put(self, *, org_id: str, provider: str, api_key: str) -> OrgKeyInfo:
        box = self._require_box()
        now = utcnow()
        values = {"ciphertext": box.encrypt(api_key), "last4": api_key[-4:], "updated_at": now}
        async with self._db.write() as conn:
            if await conn.scalar(select(OrgRow.id).where(OrgRow.id == org_id)) is None:
                await conn.execute(insert(OrgRow).values(id=org_id, tier="lite", created_at=now))
            changed = await conn.execute(
                update(OrgKeyRow)
                .where(OrgKeyRow.org_id == org_id, OrgKeyRow.provider == provider)
                .values(**values)
            )
            if changed.rowcount == 0:
                await conn.execute(
                    insert(OrgKeyRow).values(org_id=org_id, provider=provider, **values)
                )
        return OrgKeyInfo(provider=provider, last4=api_key[-4:], updated_at=now)

    async def get(self, *, org_id: str, provider: str) -> str | None:
        """The decrypted key, or ``None`` when the org has none (or keys are disabled)."""
        if self._box is None:
            return None
        async with self._db.read() as conn:
            ciphertext = await conn.scalar(
                select(OrgKeyRow.ciphertext).where(
                    OrgKeyRow.org_id == org_id, OrgKeyRow.provider == provider
                )
            )
        return self._box.decrypt(ciphertext) if ciphertext else None

    async def list_for_org(self, org_id: str) -> list[OrgKeyInfo]:
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(OrgKeyRow.provider, OrgKeyRow.last4, OrgKeyRow.updated_at)
                .where(OrgKeyRow.org_id == org_id)
                .order_by(OrgKeyRow.provider)
            )
            return [OrgKeyInfo(**row._asdict()) for row in rows]

    async def delete(self, *, org_id: str, provider: str) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(OrgKeyRow).where(OrgKeyRow.org_id == org_id, OrgKeyRow.provider == provider)
            )
        return bool(result.rowcount)
