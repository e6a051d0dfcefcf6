"""approval inbox: deferred and suspended tool calls waiting for a human

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("turn_id", sa.String(36), nullable=False),
        sa.Column("tool_use_id", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("input", JSON, nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.String(128), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", JSON, nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("turn_id", "tool_use_id", name="uq_approvals_call"),
    )
    op.create_index(
        "ix_approvals_org_status_requested", "approvals", ["org_id", "status", "requested_at"]
    )
    op.create_index("ix_approvals_status_expires", "approvals", ["status", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_approvals_status_expires", table_name="approvals")
    op.drop_index("ix_approvals_org_status_requested", table_name="approvals")
    op.drop_table("approvals")
