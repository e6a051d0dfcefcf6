"""Org settings: what an org's owner decides for everyone in it (``PUT /v1/org/settings``).

An org exists from its first token on (sessions and keys create its row); its settings
are columns of that row, read as their defaults until an owner changes one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update

from store._db import Database
from store._models import OrgRow, utcnow


@dataclass(frozen=True, slots=True, kw_only=True)
class OrgSettings:
    """An org's settings (every field has the default a new org gets)."""

    members_create_agents: bool = False


class Orgs:
    """Repository of the ``orgs`` table's settings."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def settings(self, org_id: str) -> OrgSettings:
        """The org's settings (the defaults for an org never seen)."""
        query = select(OrgRow.members_create_agents).where(OrgRow.id == org_id)
        async with self._db.read() as conn:
            value = await conn.scalar(query)
        return OrgSettings(members_create_agents=bool(value))

    async def save_settings(self, org_id: str, settings: OrgSettings) -> OrgSettings:
        """Store ``settings`` (creating the org's row on first sight)."""
        async with self._db.write() as conn:
            await conn.execute(
                self._db.insert(OrgRow)
                .values(id=org_id, tier="lite", created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["id"])
            )
            await conn.execute(
                update(OrgRow)
                .where(OrgRow.id == org_id)
                .values(members_create_agents=settings.members_create_agents)
            )
        return settings
