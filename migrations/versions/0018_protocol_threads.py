"""chat protocol threads: a client's thread id per org and user names a session Bosun chose

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 00:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "protocol_threads",
        sa.Column("org_id", sa.String(128), primary_key=True),
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("thread_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_protocol_threads_session", "protocol_threads", ["session_id"])


def downgrade() -> None:
    op.drop_table("protocol_threads")
