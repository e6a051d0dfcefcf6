"""MCP toolsets per org: an MCP server's place, its encrypted secrets and its policies

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "mcp_toolsets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("transport", sa.String(8), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("command", JSON, nullable=True),
        sa.Column("header_names", JSON, nullable=False),
        sa.Column("headers_enc", sa.Text(), nullable=True),
        sa.Column("env_names", JSON, nullable=False),
        sa.Column("env_enc", sa.Text(), nullable=True),
        sa.Column("default_category", sa.String(16), nullable=True),
        sa.Column("tool_categories", JSON, nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name", name="uq_mcp_toolsets_org_name"),
    )


def downgrade() -> None:
    op.drop_table("mcp_toolsets")
