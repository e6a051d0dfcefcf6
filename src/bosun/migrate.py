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


async def upgrade(store: Store, revision: str = "head") -> None:
    """Migrate the store's database to ``revision`` in one transaction."""

    def _run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with store.db.write() as conn:
        await conn.run_sync(_run)
