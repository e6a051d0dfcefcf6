"""org api keys

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:54:20.762322
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "org_api_keys",
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("ciphertext", sa.String(length=1024), nullable=False),
        sa.Column("last4", sa.String(length=4), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("org_id", "provider"),
    )


def downgrade() -> None:
    op.drop_table("org_api_keys")
