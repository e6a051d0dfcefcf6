"""OpenAPI toolsets per org: an API's document, base URL, operations, identity and secret

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "openapi_toolsets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.Column("source_url", sa.Text(), nullable=True),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("include", JSON, nullable=False),
        sa.Column("exclude", JSON, nullable=False),
        sa.Column("identity_mode", sa.String(16), nullable=False),
        sa.Column("categories", JSON, nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("secret_enc", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name", name="uq_openapi_toolsets_org_name"),
    )


def downgrade() -> None:
    op.drop_table("openapi_toolsets")
