"""an agent's runs by the user who triggered them: a member's list pages through theirs only

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_org_agent_user_created", "runs", ["org_id", "agent", "user_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_runs_org_agent_user_created", table_name="runs")
