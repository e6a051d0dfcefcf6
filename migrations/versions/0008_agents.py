"""agent profiles: versioned per org; a session belongs to one agent

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 04:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("handle", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "agent_versions",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("handle", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("profile", _JSON, nullable=False),
        sa.Column("saved_by", sa.String(128), nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_column("agent")
    op.drop_table("agent_versions")
    op.drop_table("agents")
