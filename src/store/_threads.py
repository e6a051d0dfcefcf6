"""Chat protocol threads: a client's thread id, per org and user, names a session Bosun chose.

The AI SDK's chat ``id`` and AG-UI's ``threadId`` are picked by the client. Each (org,
user, thread id) is its own key here, mapped to a session id the server generated, so a
thread id is never a session id: another org or user using the same thread id (by chance
or to squat it) gets a session of their own and takes nothing from anyone. A row is
written before its session exists (the id is reserved: two first messages of one thread,
or a retry with an idempotency key, name the same session) and goes with its session
when retention removes it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Select, String, select
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import Base, utcnow


class ProtocolThreadRow(Base):
    __tablename__ = "protocol_threads"
    __table_args__ = (Index("ix_protocol_threads_session", "session_id"),)

    org_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    thread_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


def _session_of(org_id: str, user_id: str, thread_id: str) -> Select[str]:
    return select(ProtocolThreadRow.session_id).where(
        ProtocolThreadRow.org_id == org_id,
        ProtocolThreadRow.user_id == user_id,
        ProtocolThreadRow.thread_id == thread_id,
    )


class ProtocolThreads:
    """Repository of the ``protocol_threads`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def find(self, org_id: str, user_id: str, thread_id: str) -> str | None:
        """The session id the user's thread names, if it has one yet."""
        async with self._db.read() as conn:
            found: str | None = await conn.scalar(_session_of(org_id, user_id, thread_id))
        return found

    async def open(self, org_id: str, user_id: str, thread_id: str, *, session_id: str) -> str:
        """Give the user's thread ``session_id`` unless it has one already (a concurrent
        first message may have won); the session id the thread names now."""
        claim = (
            self._db.insert(ProtocolThreadRow)
            .values(
                org_id=org_id, user_id=user_id, thread_id=thread_id, session_id=session_id,
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["org_id", "user_id", "thread_id"])
        )  # fmt: skip
        async with self._db.write() as conn:
            await conn.execute(claim)
            held = await conn.scalar(_session_of(org_id, user_id, thread_id))
        assert held is not None, "the row was just written or already there"
        return str(held)
