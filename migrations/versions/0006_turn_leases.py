"""turn jobs: worker, lease and job on turns; session ownership epoch

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 02:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONData = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch_op:
        batch_op.add_column(sa.Column("worker_id", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("job", JSONData, nullable=True))
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.add_column(sa.Column("epoch", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_column("epoch")
    with op.batch_alter_table("turns") as batch_op:
        batch_op.drop_column("job")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("worker_id")
