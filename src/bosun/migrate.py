"""Apply the alembic migrations in ``migrations/`` to a database.

The migration runs on a connection we already hold (``connection.run_sync``), so it works
both from the CLI and inside a running event loop, where alembic's async template's
``asyncio.run`` would fail (FIELD-NOTES.md).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection

from store import Store


def script_location() -> Path:
    """The migration scripts: packaged in a wheel, or the checkout's ``migrations/``."""
    packaged = Path(str(resources.files("bosun"))) / "migrations"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    assert checkout.is_dir(), f"migrations not found at {packaged} or {checkout}"
    return checkout


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.attributes["connection"] = connection
    return config


MIGRATION_LOCK = 0x626F73756E  # "bosun": the advisory lock key migrations hold on PostgreSQL


async def upgrade(store: Store, revision: str = "head") -> None:
    """Migrate the store's database to ``revision`` in one transaction. On PostgreSQL the
    transaction first takes an advisory lock, so concurrent upgrades (several workers
    starting at once) run one after the other and the later ones find nothing to do."""

    def _run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with store.db.write() as conn:
        if store.dialect == "postgresql":  # workers starting together migrate one at a time
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        await conn.run_sync(_run)
