"""one running turn per session (a partial unique index: double texting is decided by the
database across workers), queued messages by session (a partial index), and a turn's stop
request (``interrupted``), which its holder sees when it renews the lease

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUNNING = sa.text("status = 'running'")
QUEUED = sa.text("status = 'queued'")
# Before the index a session could hold several running turns (double texts ran at
# once): all but the newest of each session are closed ``cancelled`` so the index holds.
CLOSE_OLDER = sa.text(
    "UPDATE turns SET status = 'cancelled', finished_at = CURRENT_TIMESTAMP, "
    "worker_id = NULL, lease_until = NULL "
    "WHERE status = 'running' AND EXISTS (SELECT 1 FROM turns AS newer "
    "WHERE newer.session_id = turns.session_id AND newer.status = 'running' "
    "AND (newer.started_at > turns.started_at "
    "OR (newer.started_at = turns.started_at AND newer.id > turns.id)))"
)


def upgrade() -> None:
    op.execute(CLOSE_OLDER)
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("stop", sa.String(16), nullable=True))
    op.create_index(
        "uq_turns_one_running",
        "turns",
        ["session_id"],
        unique=True,
        sqlite_where=RUNNING,
        postgresql_where=RUNNING,
    )
    op.create_index(
        "ix_turns_queued",
        "turns",
        ["session_id", "started_at"],
        sqlite_where=QUEUED,
        postgresql_where=QUEUED,
    )


def downgrade() -> None:
    op.drop_index("ix_turns_queued", table_name="turns")
    op.drop_index("uq_turns_one_running", table_name="turns")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stop")
