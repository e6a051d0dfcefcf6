"""the dispatcher's queries read only what is waiting or running: partial indexes on the
unclaimed runs (oldest first) and on the running turns (by holder), and the runs' index by
turn made partial (claimed runs only, so the queue never reads it); and a run claimed by
an older version whose turn never opened goes back to the queue (a claim now opens its
turn in the same transaction, so nothing looks for such rows any more)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 12:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUNNING = sa.text("status = 'running'")
UNCLAIMED = sa.text("turn_id IS NULL AND cancelled_at IS NULL")
CLAIMED = sa.text("turn_id IS NOT NULL")
# Older versions claimed a run, then opened its turn in another transaction, and gave a
# claim whose turn had not opened a minute later back to the queue. A claim that old
# here is one whose worker died in between: queued again. A younger one may still open
# its turn (an older worker still running), so it is left to that worker's own rule.
REQUEUE = sa.text(
    "UPDATE runs SET turn_id = NULL, claimed_at = NULL "
    "WHERE turn_id IS NOT NULL AND cancelled_at IS NULL AND claimed_at < :before "
    "AND NOT EXISTS (SELECT 1 FROM turns WHERE turns.id = runs.turn_id)"
)


def upgrade() -> None:
    before = datetime.now(UTC) - timedelta(minutes=1)
    op.execute(REQUEUE.bindparams(sa.bindparam("before", before, type_=sa.DateTime(True))))
    op.drop_index("ix_runs_queued", table_name="runs")
    op.create_index(
        "ix_runs_turn", "runs", ["turn_id"], sqlite_where=CLAIMED, postgresql_where=CLAIMED
    )
    op.create_index(
        "ix_runs_unclaimed",
        "runs",
        ["created_at", "id"],
        sqlite_where=UNCLAIMED,
        postgresql_where=UNCLAIMED,
    )
    op.create_index(
        "ix_turns_running",
        "turns",
        ["worker_id", "lease_until"],
        sqlite_where=RUNNING,
        postgresql_where=RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_turns_running", table_name="turns")
    op.drop_index("ix_runs_unclaimed", table_name="runs")
    op.drop_index("ix_runs_turn", table_name="runs")
    op.create_index("ix_runs_queued", "runs", ["turn_id", "created_at"])
