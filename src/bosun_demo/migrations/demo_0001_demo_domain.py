"""demo domain: members, programs, workouts, class sessions, tasks

The base of the ``demo`` branch, applied only when the demo is enabled (``bosun.migrate``).
Core revision ``0003`` created these tables before they had a branch of their own, so a
database migrated back then has them already: each table is created only when missing,
and such a database keeps its rows and simply gains this revision.

Revision ID: demo_0001
Revises:
Depends on: 0001 (orgs)
Create Date: 2026-11-24 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "demo_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("demo",)
depends_on: str | Sequence[str] | None = "0001"


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    tables = (  # members and programs before workouts, which refer to them
        ("class_sessions", _class_sessions),
        ("members", _members),
        ("programs", _programs),
        ("tasks", _tasks),
        ("workouts", _workouts),
    )
    for table, create in tables:
        if table not in existing:  # core 0003 created it, before this branch existed
            create()


def downgrade() -> None:
    # Dropping a table drops its indexes too.
    for table in ("workouts", "tasks", "programs", "members", "class_sessions"):
        op.drop_table(table)


def _class_sessions() -> None:
    op.create_table(
        "class_sessions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("coach", sa.String(length=100), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_min", sa.Integer(), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("class_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_class_sessions_org_starts", ["org_id", "starts_at"], unique=False)


def _members() -> None:
    op.create_table(
        "members",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("first_name", sa.String(length=100), nullable=False),
        sa.Column("last_name", sa.String(length=100), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("phone", sa.String(length=40), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "email", name="uq_members_org_email"),
    )
    with op.batch_alter_table("members", schema=None) as batch_op:
        batch_op.create_index(
            "ix_members_org_name", ["org_id", "last_name", "first_name"], unique=False
        )


def _programs() -> None:
    op.create_table(
        "programs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("published", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("programs", schema=None) as batch_op:
        batch_op.create_index("ix_programs_org", ["org_id"], unique=False)


def _tasks() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("due_on", sa.Date(), nullable=True),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("assignee", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_org_done_due", ["org_id", "done", "due_on"], unique=False)


def _workouts() -> None:
    op.create_table(
        "workouts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("org_id", sa.String(length=128), nullable=False),
        sa.Column("program_id", sa.String(length=36), nullable=True),
        sa.Column("member_id", sa.String(length=36), nullable=True),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_min", sa.Integer(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["member_id"], ["members.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["program_id"], ["programs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("workouts", schema=None) as batch_op:
        batch_op.create_index("ix_workouts_org_created", ["org_id", "created_at"], unique=False)
        batch_op.create_index(
            "ix_workouts_org_scheduled", ["org_id", "scheduled_for"], unique=False
        )
