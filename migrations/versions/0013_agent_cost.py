"""per-agent cost alerts and pause state

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("paused_reason", sa.String(32), nullable=True))
    op.create_index("ix_sessions_org_agent", "sessions", ["org_id", "agent"])
    op.create_table(
        "agent_cost_alerts",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("agent", sa.String(64), primary_key=True),
        sa.Column("period_key", sa.String(16), primary_key=True),
        sa.Column("threshold_usd_micros", sa.BigInteger(), primary_key=True),
        sa.Column("spent_usd_micros", sa.BigInteger(), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("agent_cost_alerts")
    op.drop_index("ix_sessions_org_agent", table_name="sessions")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("paused_reason")
        batch.drop_column("paused_at")
