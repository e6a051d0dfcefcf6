"""an agent's cool-down on a resource as a row of its own, taken by one conditional upsert
(two content events on one resource at once start the agent once)

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27 21:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trigger_cooldowns",
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("resource_type", sa.String(length=40), nullable=False),
        sa.Column("resource_id", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "agent", "resource_type", "resource_id"),
    )


def downgrade() -> None:
    op.drop_table("trigger_cooldowns")
