"""Persistence: the append-only event log, sessions, turns, tool executions and usage.

SQLAlchemy 2 async over SQLite (aiosqlite) or PostgreSQL (asyncpg) with the same code;
the schema is migrated by alembic scripts in the repository's ``migrations/``.
"""

from store import _demo_models as _demo_models  # registers the demo tables
from store._log import EventLog, LogNotifier, SessionNotFoundError, StoredEvent
from store._models import Base
from store._org_keys import OrgKeyInfo, OrgKeys, SecretBox, SecretsKeyError
from store._sessions import SessionRecord, Sessions, TurnRecord, UsageRecord, UsageTotals
from store._store import Store
from store._tool_executions import (
    ExecutionStatus,
    ToolExecutionRecord,
    ToolExecutions,
    idempotency_key,
)

metadata = Base.metadata

__all__ = [
    "EventLog",
    "ExecutionStatus",
    "LogNotifier",
    "OrgKeyInfo",
    "OrgKeys",
    "SecretBox",
    "SecretsKeyError",
    "SessionNotFoundError",
    "SessionRecord",
    "Sessions",
    "Store",
    "StoredEvent",
    "ToolExecutionRecord",
    "ToolExecutions",
    "TurnRecord",
    "UsageRecord",
    "UsageTotals",
    "idempotency_key",
    "metadata",
]
