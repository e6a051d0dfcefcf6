"""people own agents: an agent's parent (a user of the org), the agent a notice is about,
a member's own outbound webhooks, and the org setting that lets members create agents

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch rebuild: orgs, notices and webhooks are referenced).
    op.add_column("agents", sa.Column("parent", sa.String(length=128), nullable=True))
    op.add_column("notices", sa.Column("agent", sa.String(length=64), nullable=True))
    op.create_index("ix_notices_org_agent", "notices", ["org_id", "agent", "id"])
    op.add_column("webhooks", sa.Column("user_id", sa.String(length=128), nullable=True))
    op.add_column(
        "orgs",
        sa.Column("members_create_agents", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_index("ix_notices_org_agent", table_name="notices")
    for table, column in (
        ("orgs", "members_create_agents"),
        ("webhooks", "user_id"),
        ("notices", "agent"),
        ("agents", "parent"),
    ):
        _drop(table, column)


def _drop(table: str, column: str) -> None:
    """SQLite's own ``DROP COLUMN``: a batch rebuild would drop a table others reference
    (orgs; notices and webhooks, whose deliveries cascade), foreign keys on."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)
