"""The store facade the upper layers hold: one database, its log and its repositories."""

from __future__ import annotations

from sqlalchemy import text

from store._db import Database
from store._log import EventLog, LogNotifier
from store._org_keys import OrgKeys, SecretBox
from store._sessions import Sessions
from store._tool_executions import ToolExecutions


class Store:
    """Everything persistent behind one database URL (SQLite or PostgreSQL)."""

    def __init__(self, url: str, *, secrets_key: str | None = None) -> None:
        self.db = Database(url)
        self.log = EventLog(self.db, LogNotifier())
        self.sessions = Sessions(self.db, self.log)
        self.org_keys = OrgKeys(self.db, SecretBox(secrets_key) if secrets_key else None)
        self.tool_executions = ToolExecutions(self.db)

    @property
    def dialect(self) -> str:
        return self.db.dialect

    async def ping(self) -> None:
        """Fail unless the database answers a trivial query."""
        async with self.db.read() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.db.close()
