"""The store facade the upper layers hold: one database, its log and its repositories."""

from __future__ import annotations

from sqlalchemy import text

from store._agent_costs import AgentCosts
from store._agents import Agents
from store._appends import LogNotifier
from store._approvals import Approvals
from store._artifacts import Artifacts
from store._audit import AuditLog
from store._content_events import ContentEvents
from store._db import Database
from store._hooks import AgentHooks
from store._idempotency import IdempotencyKeys
from store._leases import Leases
from store._log import EventLog
from store._mcp_toolsets import McpToolsets
from store._notices import Notices
from store._notify import PgListener
from store._openapi_toolsets import OpenApiToolsets
from store._org_keys import OrgKeys, SecretBox
from store._orgs import Orgs
from store._queue import TurnQueue
from store._rate_limits import RateLimits
from store._retention import Retention
from store._runs import Runs
from store._sessions import Sessions
from store._spend import Spend
from store._subscriptions import Subscriptions
from store._threads import ProtocolThreads
from store._tool_executions import ToolExecutions
from store._webhooks import Webhooks

POLL_S = 1.0
"""How often a log reader re-reads on PostgreSQL, in case a wake-up was missed."""


class Store:
    """Everything persistent behind one database URL (SQLite or PostgreSQL)."""

    def __init__(self, url: str, *, secrets_key: str | None = None) -> None:
        self.db = Database(url)
        postgres = self.db.dialect == "postgresql"
        self.log = EventLog(self.db, LogNotifier(poll_s=POLL_S if postgres else None))
        self.sessions = Sessions(self.db, self.log)
        self.queue = TurnQueue(self.db, self.log)
        box = SecretBox(secrets_key) if secrets_key else None
        self.org_keys = OrgKeys(self.db, box)
        self.orgs = Orgs(self.db)
        self.hooks = AgentHooks(self.db, box)
        self.tool_executions = ToolExecutions(self.db)
        self.spend = Spend(self.db)
        self.leases = Leases(self.db)
        self.rate_limits = RateLimits(self.db)
        self.idempotency = IdempotencyKeys(self.db)
        self.retention = Retention(self.db)
        self.audit = AuditLog(self.db)
        self.subscriptions = Subscriptions(self.db)
        self.agents = Agents(self.db, self.subscriptions)
        self.agent_costs = AgentCosts(self.db)
        self.runs = Runs(self.db, self.log.notifier)
        # Other workers' appends wake this process's readers, their queued runs its dispatcher.
        self._listener = PgListener(url, self.log.notifier, self.runs.wakes) if postgres else None
        self.notices = Notices(self.db, self.log.notifier)  # wakes like the log
        self.webhooks = Webhooks(self.db, box)
        self.approvals = Approvals(self.db)
        self.artifacts = Artifacts(self.db)
        self.mcp_toolsets = McpToolsets(self.db, box)
        self.openapi_toolsets = OpenApiToolsets(self.db, box)
        self.threads = ProtocolThreads(self.db)
        self.content_events = ContentEvents(self.db)  # the host app's events, routed once

    @property
    def dialect(self) -> str:
        return self.db.dialect

    async def ping(self) -> None:
        """Fail unless the database answers a trivial query."""
        async with self.db.read() as conn:
            await conn.execute(text("SELECT 1"))

    def listen(self) -> None:
        """Start waking this process's log readers on other workers' appends (PostgreSQL;
        SQLite has one process). Needs a running event loop; ``close`` stops it."""
        if self._listener is not None:
            self._listener.start()

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
        await self.db.close()
