"""Alembic environment: run on the connection Bosun hands over, or open one from the URL.

Bosun calls alembic with ``config.attributes["connection"]`` set (see
``bosun.migrate``); the ``alembic`` command line falls back to ``BOSUN_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from store import Store, metadata

config = context.config


def render_item(kind: str, obj: Any, _context: Any) -> str | bool:
    """Write Bosun's UTC timestamp type as a plain DateTime in generated migrations."""
    if kind == "type" and type(obj).__name__ == "UTCDateTime":
        return "sa.DateTime(timezone=True)"
    return False


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_from_url(url: str) -> None:
    store = Store(url)
    try:
        async with store.db.write() as conn:
            await conn.run_sync(run_on)
    finally:
        await store.close()


connection = config.attributes.get("connection")
if connection is not None:
    run_on(connection)
else:
    asyncio.run(
        run_from_url(os.environ.get("BOSUN_DATABASE_URL", "sqlite+aiosqlite:///./bosun.db"))
    )
