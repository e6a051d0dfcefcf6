"""daily spend and usage roll-ups; sessions by last activity

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 02:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "daily_spend",
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("spent_usd_micros", sa.BigInteger(), nullable=False),
        sa.Column("reserved_usd_micros", sa.BigInteger(), nullable=False),
        sa.Column("alerted_pct", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "day"),
    )
    op.create_table(
        "daily_usage",
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd_micros", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "user_id", "day"),
    )
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.create_index("ix_sessions_updated", ["updated_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_index("ix_sessions_updated")
    op.drop_table("daily_usage")
    op.drop_table("daily_spend")
