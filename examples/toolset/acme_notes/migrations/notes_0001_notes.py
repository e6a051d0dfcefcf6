"""acme notes: the notes table

Revision ID: notes_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "notes_0001"
down_revision = None
branch_labels = ("notes",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "acme_notes",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("acme_notes")
