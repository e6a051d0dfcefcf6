"""audit log: who changed what in an org, the agent or a human

Until the demo's tables got a migration branch of their own (``migrations/demo``,
``demo_0001``), this revision also created them, so a database that was migrated before
has them whether the demo is enabled or not; ``demo_0001`` then finds them there.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 00:08:10.439124
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("agent", sa.Boolean(), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=128), nullable=False),
        sa.Column(
            "detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("tool_use_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_org_created", ["org_id", "created_at"], unique=False)
        batch_op.create_index("ix_audit_log_tool_use", ["tool_use_id"], unique=False)


def downgrade() -> None:
    op.drop_table("audit_log")  # its indexes go with it
