"""Artifacts: structured outputs a tool made in a session (a workout, a list), versioned.

An artifact is ``(id, version)``: ``create`` makes version 1 of a new ``art_…`` id and
``revise`` adds version n+1 of the same id; old versions are never changed, so what a
message delivered earlier stays readable. Every read is scoped by session: an id from
another session does not exist, as far as the caller can tell.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import ForeignKey, Index, Integer, String, Text, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import Base, utcnow

ARTIFACT_ID_PATTERN: Final = r"^art_[0-9a-f]{24}$"
_REVISE_ATTEMPTS: Final = 5  # two racing revisions of one id: the loser takes the next number


def new_artifact_id() -> str:
    return f"art_{secrets.token_hex(12)}"


class ArtifactRow(Base):
    __tablename__ = "artifacts"
    __table_args__ = (Index("ix_artifacts_session_type", "session_id", "type"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    turn_id: Mapped[str] = mapped_column(String(36))
    tool_use_id: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(64))
    schema_version: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(String(200))
    summary: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactRecord:
    """One version of an artifact as stored."""

    id: str
    version: int
    session_id: str
    turn_id: str
    tool_use_id: str
    type: str
    schema_version: str
    title: str
    summary: str
    payload: dict[str, Any]
    created_at: datetime

    def as_dict(self, *, payload: bool = True) -> dict[str, Any]:
        """The JSON the API and the ``agent_message`` event carry."""
        data: dict[str, Any] = {
            "id": self.id,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "title": self.title,
            "summary": self.summary,
            "tool_use_id": self.tool_use_id,
            "created_at": self.created_at.isoformat(),
        }
        if payload:
            data["payload"] = self.payload
        return data


def _record(row: Any) -> ArtifactRecord:
    return ArtifactRecord(**row._asdict())


_COLUMNS = tuple(ArtifactRow.__table__.columns)


class Artifacts:
    """Repository of the ``artifacts`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self,
        session_id: str,
        *,
        turn_id: str,
        tool_use_id: str,
        type: str,
        schema_version: str,
        title: str,
        summary: str,
        payload: dict[str, Any],
    ) -> ArtifactRecord:
        """Version 1 of a new artifact of ``session_id``."""
        values: dict[str, Any] = {
            "id": new_artifact_id(), "version": 1, "session_id": session_id,
            "turn_id": turn_id, "tool_use_id": tool_use_id, "type": type,
            "schema_version": schema_version, "title": title, "summary": summary,
            "payload": payload, "created_at": utcnow(),
        }  # fmt: skip
        async with self._db.write() as conn:
            await conn.execute(insert(ArtifactRow).values(**values))
        return ArtifactRecord(**values)

    async def revise(
        self,
        session_id: str,
        artifact_id: str,
        *,
        turn_id: str,
        tool_use_id: str,
        title: str,
        summary: str,
        payload: dict[str, Any],
        schema_version: str | None = None,
    ) -> ArtifactRecord | None:
        """Version n+1 of ``artifact_id`` (same type; the schema version kept unless
        given), or ``None`` if the session has no such artifact. Older versions stay."""
        changes = {
            "turn_id": turn_id, "tool_use_id": tool_use_id, "title": title,
            "summary": summary, "payload": payload,
        }  # fmt: skip
        for attempt in range(_REVISE_ATTEMPTS):
            try:
                async with self._db.write() as conn:
                    return await _insert_next(
                        conn, session_id, artifact_id, changes, schema_version
                    )
            except IntegrityError:  # another revision took the number first (PostgreSQL)
                if attempt == _REVISE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(
        self, session_id: str, artifact_id: str, version: int | None = None
    ) -> ArtifactRecord | None:
        """One version of the session's artifact (the latest when ``version`` is None)."""
        query = select(*_COLUMNS).where(
            ArtifactRow.session_id == session_id, ArtifactRow.id == artifact_id
        )
        if version is None:
            query = query.order_by(ArtifactRow.version.desc()).limit(1)
        else:
            query = query.where(ArtifactRow.version == version)
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _record(row)

    async def list(self, session_id: str, *, type: str | None = None) -> list[ArtifactRecord]:
        """The latest version of each artifact of the session, oldest artifact first."""
        latest = (
            select(
                ArtifactRow.id,
                func.max(ArtifactRow.version).label("version"),
                func.min(ArtifactRow.created_at).label("first_at"),
            )
            .where(ArtifactRow.session_id == session_id)
            .group_by(ArtifactRow.id)
            .subquery()
        )
        query = (
            select(*_COLUMNS)
            .join(
                latest, (latest.c.id == ArtifactRow.id) & (latest.c.version == ArtifactRow.version)
            )
            .where(ArtifactRow.session_id == session_id)
            .order_by(latest.c.first_at, ArtifactRow.id)
        )
        if type is not None:
            query = query.where(ArtifactRow.type == type)
        async with self._db.read() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def latest(self, session_id: str, type: str) -> ArtifactRecord | None:
        """The session's most recently created or revised artifact of ``type``."""
        query = (
            select(*_COLUMNS)
            .where(ArtifactRow.session_id == session_id, ArtifactRow.type == type)
            .order_by(ArtifactRow.created_at.desc(), ArtifactRow.version.desc())
            .limit(1)
        )
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _record(row)


async def _insert_next(
    conn: AsyncConnection,
    session_id: str,
    artifact_id: str,
    changes: dict[str, Any],
    schema_version: str | None,
) -> ArtifactRecord | None:
    """Insert the next version of ``artifact_id`` after its latest, in ``conn``."""
    latest = (
        await conn.execute(
            select(*_COLUMNS)
            .where(ArtifactRow.session_id == session_id, ArtifactRow.id == artifact_id)
            .order_by(ArtifactRow.version.desc())
            .limit(1)
        )
    ).first()
    if latest is None:
        return None
    previous = _record(latest)
    values: dict[str, Any] = {
        "id": artifact_id, "version": previous.version + 1, "session_id": session_id,
        "type": previous.type, "schema_version": schema_version or previous.schema_version,
        "created_at": utcnow(), **changes,
    }  # fmt: skip
    await conn.execute(insert(ArtifactRow).values(**values))
    return ArtifactRecord(**values)
