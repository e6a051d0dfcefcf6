"""Tables of the demo domain (a fitness studio) that the demo toolset reads and writes.

They are declared on the store's ``Base`` (its metadata, so alembic's autogenerate sees
them) but created only by the demo's own migration branch (``bosun_demo/migrations``),
which ``bosun migrate`` applies when the demo toolset is loaded. Every row carries
``org_id`` and every query of the demo tools filters on it: one org never sees another's
rows. Ids are short prefixed
strings (``mem_…``, ``wo_…``) because models read and repeat them.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from store import Base, utcnow

_ORG_FK = "orgs.id"


class MemberRow(Base):
    __tablename__ = "members"
    __table_args__ = (
        UniqueConstraint("org_id", "email", name="uq_members_org_email"),
        Index("ix_members_org_name", "org_id", "last_name", "first_name"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey(_ORG_FK, ondelete="CASCADE"))
    first_name: Mapped[str] = mapped_column(String(100))
    last_name: Mapped[str] = mapped_column(String(100))
    email: Mapped[str] = mapped_column(String(254))
    phone: Mapped[str | None] = mapped_column(String(40), default=None)
    status: Mapped[str] = mapped_column(String(16), default="active")
    notes: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProgramRow(Base):
    __tablename__ = "programs"
    __table_args__ = (Index("ix_programs_org", "org_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey(_ORG_FK, ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    level: Mapped[str] = mapped_column(String(16), default="beginner")
    published: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class WorkoutRow(Base):
    __tablename__ = "workouts"
    __table_args__ = (
        Index("ix_workouts_org_scheduled", "org_id", "scheduled_for"),
        Index("ix_workouts_org_created", "org_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey(_ORG_FK, ondelete="CASCADE"))
    program_id: Mapped[str | None] = mapped_column(
        ForeignKey("programs.id", ondelete="SET NULL"), default=None
    )
    member_id: Mapped[str | None] = mapped_column(
        ForeignKey("members.id", ondelete="SET NULL"), default=None
    )
    title: Mapped[str] = mapped_column(String(200))
    scheduled_for: Mapped[datetime | None] = mapped_column(default=None)
    duration_min: Mapped[int] = mapped_column(Integer, default=60)
    notes: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClassSessionRow(Base):
    """A group class on the timetable; ``status`` is ``scheduled`` or ``cancelled``."""

    __tablename__ = "class_sessions"
    __table_args__ = (Index("ix_class_sessions_org_starts", "org_id", "starts_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey(_ORG_FK, ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    coach: Mapped[str] = mapped_column(String(100))
    starts_at: Mapped[datetime]
    duration_min: Mapped[int] = mapped_column(Integer, default=60)
    capacity: Mapped[int] = mapped_column(Integer, default=12)
    status: Mapped[str] = mapped_column(String(16), default="scheduled")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_org_done_due", "org_id", "done", "due_on"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey(_ORG_FK, ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    due_on: Mapped[date | None] = mapped_column(default=None)
    done: Mapped[bool] = mapped_column(Boolean, default=False)
    assignee: Mapped[str | None] = mapped_column(String(128), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
