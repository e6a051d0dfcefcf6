"""Persistence: the append-only event log, sessions, turns, tool executions and usage.

SQLAlchemy 2 async over SQLite (aiosqlite) or PostgreSQL (asyncpg) with the same code;
the schema is migrated by alembic scripts in the repository's ``migrations/``.
"""

from store import _demo_models as _demo_models  # registers the demo tables
from store import _usage_models as _usage_models  # registers the daily roll-ups
from store._idempotency import IdempotencyClaim, IdempotencyKeys, IdempotencyRecord
from store._leases import Claim, Leases
from store._log import EventLog, LogNotifier, SessionNotFoundError, StaleOwnerError, StoredEvent
from store._models import Base
from store._org_keys import OrgKeyInfo, OrgKeys, SecretBox, SecretsKeyError
from store._rate_limits import RateLimits, TokenSpend, WindowCount
from store._retention import PruneReport, Retention
from store._sessions import SessionRecord, Sessions, TurnRecord, UsageRecord, UsageTotals
from store._spend import DaySpend, Spend, resets_at, utc_day
from store._store import Store
from store._tool_executions import (
    ExecutionStatus,
    ToolExecutionRecord,
    ToolExecutions,
    idempotency_key,
)

metadata = Base.metadata

__all__ = [
    "Claim",
    "DaySpend",
    "EventLog",
    "ExecutionStatus",
    "IdempotencyClaim",
    "IdempotencyKeys",
    "IdempotencyRecord",
    "Leases",
    "LogNotifier",
    "OrgKeyInfo",
    "OrgKeys",
    "PruneReport",
    "RateLimits",
    "Retention",
    "SecretBox",
    "SecretsKeyError",
    "SessionNotFoundError",
    "SessionRecord",
    "Sessions",
    "Spend",
    "StaleOwnerError",
    "Store",
    "StoredEvent",
    "TokenSpend",
    "ToolExecutionRecord",
    "ToolExecutions",
    "TurnRecord",
    "UsageRecord",
    "UsageTotals",
    "WindowCount",
    "idempotency_key",
    "metadata",
    "resets_at",
    "utc_day",
]
