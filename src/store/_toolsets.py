"""What an org's toolset tables of every kind share (MCP servers, OpenAPI documents): a
name per org, its checks, and reading and deleting rows by name."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import delete, select

from store._db import Database

TOOLSET_NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,39}$"
"""A toolset's name: the router its tools get (``name.tool``)."""
MAX_TIMEOUT_S: Final = 600.0
_NAME = re.compile(TOOLSET_NAME_PATTERN)
Record = TypeVar("Record")


class InvalidToolsetError(ValueError):
    """A toolset configuration that could never be used; the message says what to fix."""


def check_name(name: str) -> None:
    """A toolset's name is its tools' router: ``InvalidToolsetError`` unless it can be."""
    if not _NAME.fullmatch(name):
        raise InvalidToolsetError(
            f"toolset name {name!r:.60}: 1-40 of a-z, 0-9 and _, starting with a letter"
        )


def check_timeout(timeout_s: float) -> None:
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidToolsetError(f"timeout {timeout_s}: more than 0, at most {MAX_TIMEOUT_S} s")


class NamedRows(Generic[Record]):
    """``get``, ``list_for_org`` and ``delete`` of a table with ``org_id`` and ``name``
    columns, each row read as the ``columns`` given to ``record``."""

    def __init__(
        self, db: Database, row: Any, columns: tuple[Any, ...], record: Callable[[Any], Record]
    ) -> None:
        self._db = db
        self._row = row
        self._columns = columns
        self._record = record

    async def get(self, org_id: str, name: str) -> Record | None:
        row = self._row
        query = select(*self._columns).where(row.org_id == org_id, row.name == name)
        async with self._db.read() as conn:
            found = (await conn.execute(query)).first()
        return None if found is None else self._record(found)

    async def list_for_org(self, org_id: str) -> list[Record]:
        query = select(*self._columns).where(self._row.org_id == org_id)
        async with self._db.read() as conn:
            rows = (await conn.execute(query.order_by(self._row.name))).all()
        return [self._record(row) for row in rows]

    async def delete(self, org_id: str, name: str) -> bool:
        row = self._row
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(row).where(row.org_id == org_id, row.name == name).returning(row.id)
            )
            return result.first() is not None
