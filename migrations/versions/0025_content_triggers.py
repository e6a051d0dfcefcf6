"""content triggers: the host app's content events, agents' subscriptions, and on each run
the event that started it and its hops from a person; indexes to find the run that wrote
a resource (its audit rows by target, their tool calls by id)

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "content_events",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("resource_type", sa.String(40), nullable=False),
        sa.Column("resource_id", sa.String(200), nullable=False),
        sa.Column("title", sa.String(200), nullable=True),
        sa.Column("actor_type", sa.String(8), nullable=False),
        sa.Column("actor_id", sa.String(200), nullable=False),
        sa.Column("actor_run_id", sa.String(40), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("mentions", JSON, nullable=True),
        sa.Column("reply_to_type", sa.String(40), nullable=True),
        sa.Column("reply_to_id", sa.String(200), nullable=True),
        sa.Column("at", WHEN, nullable=False),
        sa.Column("received_at", WHEN, nullable=False),
        sa.Column("hops", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("outcome", JSON, nullable=True),
    )
    op.create_index(
        "ix_content_events_resource", "content_events", ["org_id", "resource_type", "resource_id"]
    )
    op.create_table(
        "agent_subscriptions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("resource_type", sa.String(40), nullable=False),
        sa.Column("resource_id", sa.String(200), nullable=True),
        sa.Column("event_types", JSON, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
    )
    op.create_index("ix_agent_subscriptions_agent", "agent_subscriptions", ["org_id", "agent"])
    op.create_index(
        "ix_agent_subscriptions_resource",
        "agent_subscriptions",
        ["org_id", "resource_type", "resource_id"],
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("trigger_event_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("hops", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_audit_log_org_target", "audit_log", ["org_id", "target"])
    op.create_index("ix_tool_executions_tool_use", "tool_executions", ["tool_use_id"])


def downgrade() -> None:
    op.drop_index("ix_tool_executions_tool_use", table_name="tool_executions")
    op.drop_index("ix_audit_log_org_target", table_name="audit_log")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("hops")
        batch.drop_column("trigger_event_id")
    op.drop_table("agent_subscriptions")
    op.drop_table("content_events")
