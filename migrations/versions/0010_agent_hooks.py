"""agents' inbound webhook secrets, encrypted at rest

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_hooks",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("handle", sa.String(64), primary_key=True),
        sa.Column("secret_enc", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("agent_hooks")
