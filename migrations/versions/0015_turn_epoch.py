"""the ownership epoch per turn: a takeover fences that turn only, not its session

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch_op:
        batch_op.add_column(sa.Column("epoch", sa.Integer(), server_default="0", nullable=False))
    _drop_session_epoch()


def downgrade() -> None:
    op.add_column("sessions", sa.Column("epoch", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("turns") as batch_op:
        batch_op.drop_column("epoch")


def _drop_session_epoch() -> None:
    """SQLite's own ``DROP COLUMN``: a batch rebuild of ``sessions`` would drop the table
    its events, turns and usage reference (``ON DELETE CASCADE``, foreign keys on)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE sessions DROP COLUMN epoch")
    else:
        op.drop_column("sessions", "epoch")
