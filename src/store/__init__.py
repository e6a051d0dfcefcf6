"""Persistence: the append-only event log, sessions, turns, tool executions, usage and
the audit log.

SQLAlchemy 2 async over SQLite (aiosqlite) or PostgreSQL (asyncpg) with the same code;
the schema is migrated by alembic scripts in the repository's ``migrations/``. A toolset
that keeps its own tables in the same database (the demo, ``bosun_demo``) may declare
them on ``Base``, refer to ``OrgRow`` and stamp times with ``utcnow``.
"""

from store import _usage_models as _usage_models  # registers the daily roll-ups
from store._agent_costs import AgentCosts, DayUsage, FiredAlert
from store._agents import AgentExistsError, AgentRecord, Agents
from store._appends import SessionNotFoundError, StaleOwnerError, StoredEvent
from store._approvals import (
    ApprovalMode,
    ApprovalRecord,
    Approvals,
    ApprovalStatus,
    Decision,
)
from store._artifacts import ARTIFACT_ID_PATTERN, ArtifactRecord, Artifacts
from store._audit import AuditEntry, AuditLog
from store._content_events import ContentEventRecord, ContentEvents, Cooldown
from store._hooks import AgentHooks
from store._hot_pg import TurnOpening
from store._idempotency import IdempotencyClaim
from store._leases import Claim
from store._log import EventLog, TurnInProgressError
from store._mcp_toolsets import (
    McpToolsetRecord,
    McpToolsets,
    McpToolsetSpec,
    stdio_refusal,
)
from store._models import Base, OrgRow, utcnow
from store._notices import NOTICE_TYPES, NoticeRecord, Notices, NoticeType, notice_key
from store._openapi_toolsets import (
    IdentityMode,
    OpenApiToolsetRecord,
    OpenApiToolsets,
    OpenApiToolsetSpec,
)
from store._org_keys import OrgKeyInfo, OrgKeys, SecretsKeyError
from store._orgs import Orgs, OrgSettings
from store._queue import QueuedTurn, TurnQueue
from store._rate_limits import TokenSpend
from store._retention import PruneReport
from store._runs import USER_TRIGGER, RunFigures, RunRecord, Runs, RunTakenError, RunWakes
from store._sessions import SessionRecord, TurnRecord, UsageRecord
from store._spend import DaySpend, resets_at, utc_day
from store._store import Store
from store._subscriptions import (
    MAX_SUBSCRIPTIONS,
    SubscriptionLimitError,
    SubscriptionRecord,
    Subscriptions,
)
from store._tool_executions import ToolExecutionRecord, idempotency_key
from store._toolsets import TOOLSET_NAME_PATTERN, InvalidToolsetError
from store._webhook_claims import AttemptResult, Breaker, DueDelivery
from store._webhook_rows import DELIVERIES_KEY
from store._webhooks import (
    AttemptRecord,
    DeliveryRecord,
    WebhookLimitError,
    WebhookRecord,
    Webhooks,
)

metadata = Base.metadata

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "DELIVERIES_KEY",
    "MAX_SUBSCRIPTIONS",
    "NOTICE_TYPES",
    "TOOLSET_NAME_PATTERN",
    "USER_TRIGGER",
    "AgentCosts",
    "AgentExistsError",
    "AgentHooks",
    "AgentRecord",
    "Agents",
    "ApprovalMode",
    "ApprovalRecord",
    "ApprovalStatus",
    "Approvals",
    "ArtifactRecord",
    "Artifacts",
    "AttemptRecord",
    "AttemptResult",
    "AuditEntry",
    "AuditLog",
    "Base",
    "Breaker",
    "Claim",
    "ContentEventRecord",
    "ContentEvents",
    "Cooldown",
    "DaySpend",
    "DayUsage",
    "Decision",
    "DeliveryRecord",
    "DueDelivery",
    "EventLog",
    "FiredAlert",
    "IdempotencyClaim",
    "IdentityMode",
    "InvalidToolsetError",
    "McpToolsetRecord",
    "McpToolsetSpec",
    "McpToolsets",
    "NoticeRecord",
    "NoticeType",
    "Notices",
    "OpenApiToolsetRecord",
    "OpenApiToolsetSpec",
    "OpenApiToolsets",
    "OrgKeyInfo",
    "OrgKeys",
    "OrgRow",
    "OrgSettings",
    "Orgs",
    "PruneReport",
    "QueuedTurn",
    "RunFigures",
    "RunRecord",
    "RunTakenError",
    "RunWakes",
    "Runs",
    "SecretsKeyError",
    "SessionNotFoundError",
    "SessionRecord",
    "StaleOwnerError",
    "Store",
    "StoredEvent",
    "SubscriptionLimitError",
    "SubscriptionRecord",
    "Subscriptions",
    "TokenSpend",
    "ToolExecutionRecord",
    "TurnInProgressError",
    "TurnOpening",
    "TurnQueue",
    "TurnRecord",
    "UsageRecord",
    "WebhookLimitError",
    "WebhookRecord",
    "Webhooks",
    "idempotency_key",
    "metadata",
    "notice_key",
    "resets_at",
    "stdio_refusal",
    "utc_day",
    "utcnow",
]
