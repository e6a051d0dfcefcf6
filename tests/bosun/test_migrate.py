"""Migrations run once however many workers start at the same moment."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from bosun.migrate import upgrade
from store import Store


@pytest.mark.postgres
async def test_concurrent_upgrades_of_one_database_all_succeed(postgres_url: str) -> None:
    stores = [Store(postgres_url) for _ in range(4)]
    try:
        await asyncio.gather(*(upgrade(store) for store in stores))
        async with stores[0].db.read() as conn:
            versions = list(
                (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
            )
    finally:
        for store in stores:
            await store.close()
    assert len(versions) == 1 and versions[0] >= "0006"
