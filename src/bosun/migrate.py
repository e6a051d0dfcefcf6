"""Apply the alembic migrations in ``migrations/`` to a database.

Two branches share one ``alembic_version`` table: ``core`` (``migrations/versions``,
what every deployment needs) and ``demo`` (``migrations/demo``, the demo domain's
tables), which is applied only when the demo is enabled, so a deployment without it has
no demo tables, and enabling it later adds them at the next migration.

The migration runs on a connection we already hold (``connection.run_sync``), so it works
both from the CLI and inside a running event loop, where alembic's async template's
``asyncio.run`` would fail (FIELD-NOTES.md).
"""

from __future__ import annotations

import os
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
    location = script_location()
    config = Config()
    config.set_main_option("script_location", str(location))
    # Both branches' scripts are always known, so a database that has the demo branch
    # still migrates (its core) with the demo turned off.
    config.set_main_option("path_separator", "os")
    config.set_main_option(
        "version_locations", os.pathsep.join(str(location / d) for d in ("versions", "demo"))
    )
    config.attributes["connection"] = connection
    return config


MIGRATION_LOCK = 0x626F73756E  # "bosun": the advisory lock key migrations hold on PostgreSQL

CORE_HEAD = "core@head"
DEMO_HEAD = "demo@head"


async def upgrade(store: Store, revision: str = "head", *, demo: bool) -> None:
    """Migrate the store's database in one transaction: the core to ``revision`` (``head``:
    the newest), then, when ``demo`` is on, the demo branch to its head (its tables).

    On PostgreSQL the transaction first takes an advisory lock, so concurrent upgrades
    (several workers starting at once) run one after the other and the later ones find
    nothing to do."""
    targets = [CORE_HEAD if revision == "head" else revision] + ([DEMO_HEAD] if demo else [])

    def _run(connection: Connection) -> None:
        config = alembic_config(connection)
        for target in targets:
            command.upgrade(config, target)

    async with store.db.write() as conn:
        if store.dialect == "postgresql":  # workers starting together migrate one at a time
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        await conn.run_sync(_run)
