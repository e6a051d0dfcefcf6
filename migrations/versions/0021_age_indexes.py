"""events by session, type and seq (a turn finds its compaction anchor and the knowledge
before it without reading the whole log); turns by session and start (the latest turn),
and each turn's first seq (a turn's events are read from there)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Partial: only the rows a turn looks up by type (the bulk of the log skips the index).
ANCHOR_TYPES = sa.text("type IN ('history_summarised', 'context_loaded')")


def upgrade() -> None:
    op.create_index(
        "ix_events_anchors",
        "events",
        ["session_id", "type", "seq"],
        sqlite_where=ANCHOR_TYPES,
        postgresql_where=ANCHOR_TYPES,
    )
    op.create_index("ix_turns_session_started", "turns", ["session_id", "started_at"])
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("first_seq", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("first_seq")
    op.drop_index("ix_turns_session_started", table_name="turns")
    op.drop_index("ix_events_anchors", table_name="events")
