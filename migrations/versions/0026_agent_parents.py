"""people own agents: an agent's parent (a user of the org), the agent a notice is about,
a member's own outbound webhooks, and the org setting that lets members create agents

Revision ID: 0026
Revises: 0024
Create Date: 2026-11-27 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("parent", sa.String(length=128), nullable=True))
    with op.batch_alter_table("notices") as batch:
        batch.add_column(sa.Column("agent", sa.String(length=64), nullable=True))
    op.create_index("ix_notices_org_agent", "notices", ["org_id", "agent", "id"])
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("user_id", sa.String(length=128), nullable=True))
    with op.batch_alter_table("orgs") as batch:
        batch.add_column(
            sa.Column(
                "members_create_agents", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("orgs") as batch:
        batch.drop_column("members_create_agents")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("user_id")
    op.drop_index("ix_notices_org_agent", table_name="notices")
    with op.batch_alter_table("notices") as batch:
        batch.drop_column("agent")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("parent")
