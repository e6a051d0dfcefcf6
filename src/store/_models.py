"""ORM tables. The events table is append-only: rows are inserted, never updated; they are
deleted only with their whole session (``bosun prune``), never part of a log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every dialect (SQLite keeps no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert value.tzinfo is not None, "store timestamps must be timezone-aware"
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


JSONData = JSON().with_variant(JSONB(), "postgresql")
BigId = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER only


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSONData,
    }


class OrgRow(Base):
    __tablename__ = "orgs"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tier: Mapped[str] = mapped_column(String(32), default="lite")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # org settings (``store.Orgs``): whether members may create agents of their own
    members_create_agents: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (
        Index("ix_sessions_org_user_updated", "org_id", "user_id", "updated_at"),
        Index("ix_sessions_updated", "updated_at"),  # retention finds old sessions by it
        Index("ix_sessions_org_agent", "org_id", "agent"),  # an agent's usage and costs
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"))
    user_id: Mapped[str] = mapped_column(String(128))
    title: Mapped[str | None] = mapped_column(String(200), default=None)
    # The agent profile the session talks to (its handle; NULL: the org's default).
    agent: Mapped[str | None] = mapped_column(String(64), default=None)
    # The per-session sequence counter: bumped in the same transaction as each insert.
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


RUNNING = text("status = 'running'")
QUEUED = text("status = 'queued'")


class TurnRow(Base):
    __tablename__ = "turns"
    __table_args__ = (
        Index("ix_turns_session_status", "session_id", "status"),
        Index("ix_turns_session_started", "session_id", "started_at"),  # the latest turn
        # One running turn per session, whichever worker starts it: the database refuses
        # a second (double texting; ``store.TurnInProgressError``).
        Index(
            "uq_turns_one_running",
            "session_id",
            unique=True,
            sqlite_where=RUNNING,
            postgresql_where=RUNNING,
        ),
        # Running turns by holder: lease holders, takeovers and the running runs read
        # only these, however many turns have finished (``store._leases.RUNNING``).
        Index(
            "ix_turns_running",
            "worker_id",
            "lease_until",
            sqlite_where=RUNNING,
            postgresql_where=RUNNING,
        ),
        # Messages waiting for the session's running turn to end (``enqueue``, ``interrupt``).
        Index(
            "ix_turns_queued",
            "session_id",
            "started_at",
            sqlite_where=QUEUED,
            postgresql_where=QUEUED,
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    trace_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="running")
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # The running turn's job: who runs it (worker), until when (lease, renewed by a
    # heartbeat), and what another worker needs to take it over (org, user, role, model).
    worker_id: Mapped[str | None] = mapped_column(String(128), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    job: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    # Bumped when a worker takes the turn over: its appends made under an older epoch (a
    # stale worker's late writes) are refused in the transaction that numbers them.
    epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The seq of the turn's first event: a read of one turn's events starts there instead
    # of scanning the session from its start (NULL: a turn opened before it was recorded).
    first_seq: Mapped[int | None] = mapped_column(BigInteger, default=None)
    # A request to stop the running turn (``interrupted``: a newer message interrupts it),
    # set by any worker; its holder sees it when it renews the lease.
    stop: Mapped[str | None] = mapped_column(String(16), default=None)


ANCHOR_TYPES = text("type IN ('history_summarised', 'context_loaded')")
"""The events a turn reads from before its compaction anchor too, and the anchor itself;
queries repeat this text verbatim so SQLite uses the partial index on it."""


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
        # A turn finds its compaction anchor and the knowledge before it by type
        # (read_context); partial, so the bulk of the log (deltas, tool events) skips it.
        Index(
            "ix_events_anchors",
            "session_id",
            "type",
            "seq",
            sqlite_where=ANCHOR_TYPES,
            postgresql_where=ANCHOR_TYPES,
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    turn_id: Mapped[str | None] = mapped_column(String(36), default=None)
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolExecutionRow(Base):
    """One row per tool use of a turn: ``pending -> succeeded | failed | rejected_by_user``.

    A call is ``(turn_id, tool_use_id)``: providers and scripts reuse tool use ids across
    turns, sessions and orgs, so the id alone names nothing. Undo and confirm address a
    call by session and id (``ix_tool_executions_session_tool_use``).
    """

    __tablename__ = "tool_executions"
    __table_args__ = (
        PrimaryKeyConstraint("turn_id", "tool_use_id", name="tool_executions_pkey"),
        Index("ix_tool_executions_session_tool_use", "session_id", "tool_use_id"),
        # An audit row's call (its turn, so its run): which run created a resource.
        Index("ix_tool_executions_tool_use", "tool_use_id"),
    )

    tool_use_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    turn_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tool: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(24), default="pending")
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True, default=None)
    input: Mapped[dict[str, Any]]
    output: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    inverse: Mapped[dict[str, Any] | None] = mapped_column(JSONData, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(default=None)


class OrgKeyRow(Base):
    """An org's own provider API key (bring your own key), encrypted at rest."""

    __tablename__ = "org_api_keys"

    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    ciphertext: Mapped[str] = mapped_column(String(1024))
    last4: Mapped[str] = mapped_column(String(4))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class UsageRow(Base):
    """Tokens and cost of one model call; roll-ups are derived from these rows."""

    __tablename__ = "usage"
    __table_args__ = (
        Index("ix_usage_session", "session_id"),
        Index("ix_usage_org_user_created", "org_id", "user_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    turn_id: Mapped[str] = mapped_column(String(36))
    org_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(200))
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RateWindowRow(Base):
    """A fixed-window request counter (``key`` names the limit and the caller), shared by
    every worker: bumped with one atomic upsert, old windows deleted as new ones open."""

    __tablename__ = "rate_windows"
    __table_args__ = (Index("ix_rate_windows_window_start", "window_start"),)

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)


class IdempotencyKeyRow(Base):
    """A client's ``Idempotency-Key`` and the turn it started; ``turn_id`` is null while the
    request that claimed the key is starting it. Keys expire after a day."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("org_id", "user_id", "key", name="uq_idempotency_keys_org_user_key"),
        Index("ix_idempotency_keys_created", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    org_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    key: Mapped[str] = mapped_column(String(200))
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    turn_id: Mapped[str | None] = mapped_column(String(36), default=None)
    request_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditLogRow(Base):
    """Who changed what: append-only; ``agent`` tells agent actions from human ones.

    ``tool_use_id`` links the row to the tool execution that wrote it (and so an undo's
    row to the original's).
    """

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_org_created", "org_id", "created_at"),
        Index("ix_audit_log_tool_use", "tool_use_id"),
        Index("ix_audit_log_org_target", "org_id", "target"),  # what changed a resource
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(String(128))
    agent: Mapped[bool] = mapped_column(Boolean, default=False)
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(128))
    detail: Mapped[dict[str, Any]]
    tool_use_id: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
