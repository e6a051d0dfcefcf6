"""Agents' inbound webhook secrets: one per agent, encrypted at rest like org keys.

A secret is shown once, when it is made (``rotate``); afterwards only the webhook route
reads it, to check a delivery's signature. Without ``BOSUN_SECRETS_KEY`` no secret can be
stored, so no agent has a webhook.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime

from sqlalchemy import String, Text, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import Base, utcnow
from store._org_keys import SecretBox, require_box

SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)
"""Standard Webhooks' prefix of a base64 secret."""


class AgentHookRow(Base):
    __tablename__ = "agent_hooks"

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    handle: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_enc: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AgentHooks:
    """Repository of the ``agent_hooks`` table."""

    def __init__(self, db: Database, box: SecretBox | None) -> None:
        self._db = db
        self._box = box

    def _require_box(self) -> SecretBox:
        return require_box(
            self._box,
            "An agent's webhook secret is stored encrypted",
        )

    async def rotate(self, org_id: str, handle: str) -> str:
        """Make the agent a new secret (the old one stops working); returns it, once."""
        box = self._require_box()
        secret = SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()
        row = {"org_id": org_id, "handle": handle, "secret_enc": box.encrypt(secret)}
        async with self._db.write() as conn:
            await conn.execute(
                self._db.insert(AgentHookRow)
                .values(**row, created_at=utcnow())
                .on_conflict_do_update(
                    index_elements=["org_id", "handle"],
                    set_={"secret_enc": row["secret_enc"], "created_at": utcnow()},
                )
            )
        return secret

    async def secret(self, org_id: str, handle: str) -> str | None:
        """The agent's secret, if it has a webhook (and the server can decrypt it)."""
        if self._box is None:
            return None
        query = select(AgentHookRow.secret_enc).where(
            AgentHookRow.org_id == org_id, AgentHookRow.handle == handle
        )
        async with self._db.read() as conn:
            stored: str | None = await conn.scalar(query)
        return None if stored is None else self._box.decrypt(stored)

    async def delete(self, org_id: str, handle: str) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(AgentHookRow)
                .where(AgentHookRow.org_id == org_id, AgentHookRow.handle == handle)
                .returning(AgentHookRow.handle)
            )
            return result.first() is not None
