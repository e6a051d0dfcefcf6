"""tool executions keyed by turn: primary key (turn_id, tool_use_id), session lookups

A tool call is the same call only within its turn: providers and scripts reuse tool use
ids across turns, sessions and orgs. Existing rows keep their values (every turn id was
already set), so the new key holds them all.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PKEY = "tool_executions_pkey"  # PostgreSQL's name for the unnamed key of 0001


def upgrade() -> None:
    _set_primary_key(["turn_id", "tool_use_id"])
    with op.batch_alter_table("tool_executions") as batch_op:
        batch_op.drop_index("ix_tool_executions_session")
        batch_op.create_index(
            "ix_tool_executions_session_tool_use", ["session_id", "tool_use_id"], unique=False
        )


def downgrade() -> None:
    # Fails (as it must) while one tool_use_id is recorded in two turns.
    with op.batch_alter_table("tool_executions") as batch_op:
        batch_op.drop_index("ix_tool_executions_session_tool_use")
        batch_op.create_index("ix_tool_executions_session", ["session_id"], unique=False)
    _set_primary_key(["tool_use_id"])


def _set_primary_key(columns: list[str]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot alter a key: batch mode copies the rows into a table built with the
        # new one. The naming convention names the reflected key (unnamed in 0001) so it
        # can be dropped first.
        with op.batch_alter_table(
            "tool_executions", recreate="always", naming_convention={"pk": _PKEY}
        ) as batch_op:
            batch_op.drop_constraint(_PKEY, type_="primary")
            batch_op.create_primary_key(_PKEY, columns)
        return
    op.drop_constraint(_PKEY, "tool_executions", type_="primary")
    op.create_primary_key(_PKEY, "tool_executions", columns)
