"""Retention: delete whole finished sessions that have been idle since before a cutoff.

The log's rule is that events are never updated or deleted *within* a session; retention
is the one exception, and it only ever removes a session together with everything that
hangs off it (events, turns, tool executions, usage rows, approvals,
artifacts, the chat protocol threads that name it), so no log is left
partial. A session is kept while one of its turns is ``running`` or ``suspended`` (a
suspended turn still waits for the user's answer) or one of its calls waits in the
approval inbox. Audit rows (``audit_log``) record changes to org
data, not session data, and stay.

The host app's content events received before the cutoff go too (their outcome only
answered a redelivery, long over), but for the ``created`` events whose actor was an
agent: they are how a reply to a resource an agent made finds that agent, however old;
and the agents' cool-downs on resources that ended before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import ColumnElement, Select, delete, exists, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from store._approvals import ApprovalRow
from store._artifacts import ArtifactRow
from store._content_events import ContentEventRow, TriggerCooldownRow
from store._db import Database
from store._models import EventRow, SessionRow, ToolExecutionRow, TurnRow, UsageRow
from store._threads import ProtocolThreadRow

WAITING_STATUSES: Final = ("running", "suspended")
DEFAULT_BATCH_SIZE: Final = 500

# Children before the session row; each has a ``session_id`` (indexed) pointing at it.
_CHILDREN: Final = (
    ("events", EventRow),
    ("tool_executions", ToolExecutionRow),
    ("usage", UsageRow),
    ("approvals", ApprovalRow),
    ("artifacts", ArtifactRow),
    ("protocol_threads", ProtocolThreadRow),
    ("turns", TurnRow),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneReport:
    """What a prune removed (``applied``) or would remove (a dry run), row counts per table.

    ``kept_waiting`` counts sessions idle since before ``cutoff`` that were kept because a
    turn of theirs is still running or waits for the user.
    """

    cutoff: datetime
    applied: bool
    sessions: int = 0
    events: int = 0
    turns: int = 0
    tool_executions: int = 0
    usage: int = 0
    approvals: int = 0
    artifacts: int = 0
    protocol_threads: int = 0
    content_events: int = 0
    kept_waiting: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cutoff"] = self.cutoff.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return data


def _waiting_turn() -> ColumnElement[bool]:
    """A turn of the session still runs or waits, or one of its calls waits in the approval
    inbox (or was approved and has not run yet): its outcome is still to be logged."""
    turn = exists().where(TurnRow.session_id == SessionRow.id, TurnRow.status.in_(WAITING_STATUSES))
    approval = exists().where(
        ApprovalRow.session_id == SessionRow.id,
        (ApprovalRow.status == "pending")
        | ((ApprovalRow.status == "approved") & ApprovalRow.finished_at.is_(None)),
    )
    return turn | approval


def _prunable(before: datetime) -> tuple[ColumnElement[bool], ...]:
    return SessionRow.updated_at < before, ~_waiting_turn()


def _old_event(before: datetime) -> tuple[ColumnElement[bool], ...]:
    """A content event received before the cutoff that reply routing does not need."""
    made_by_agent = (ContentEventRow.type == "created") & (ContentEventRow.actor_type == "agent")
    return ContentEventRow.received_at < before, ~made_by_agent


class Retention:
    """Deletes whole finished sessions, in batches, one transaction per batch."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def prune(
        self, *, before: datetime, apply: bool, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> PruneReport:
        """Remove (``apply``) or count (dry run) the sessions last active before ``before``
        that have no running or suspended turn, with all their rows.

        Batches keep each write transaction short, so a large prune never holds the SQLite
        writer (or PostgreSQL row locks) for long and live turns interleave with it.
        """
        assert before.tzinfo is not None, "the cutoff must be timezone-aware"
        assert batch_size > 0, "batch_size must be positive"
        if not apply:
            return await self._dry_run(before)
        async with self._db.read() as conn:
            # One scan for the candidates (there is no index on ``updated_at`` alone), then
            # primary-key lookups per batch.
            candidates = list(
                await conn.scalars(
                    select(SessionRow.id)
                    .where(*_prunable(before))
                    .order_by(SessionRow.updated_at, SessionRow.id)
                )
            )
        totals = dict.fromkeys(("sessions", *(name for name, _ in _CHILDREN)), 0)
        for start in range(0, len(candidates), batch_size):
            async with self._db.write() as conn:
                removed = await self._delete_batch(
                    conn, candidates[start : start + batch_size], before
                )
            for name, count in removed.items():
                totals[name] += count
        totals["content_events"] = await self._prune_content_events(before, batch_size)
        async with self._db.write() as conn:  # ended cool-downs: a row per agent and resource
            await conn.execute(delete(TriggerCooldownRow).where(TriggerCooldownRow.until < before))
        async with self._db.read() as conn:
            kept = await _kept_waiting(conn, before)
        return PruneReport(cutoff=before, applied=True, kept_waiting=kept, **totals)

    async def _prune_content_events(self, before: datetime, batch_size: int) -> int:
        """Delete the old content events as sessions go: one read of their keys, then
        batches by primary key."""
        keys = select(ContentEventRow.org_id, ContentEventRow.id).where(*_old_event(before))
        async with self._db.read() as conn:
            found = [tuple(row) for row in await conn.execute(keys)]
        removed = 0
        for start in range(0, len(found), batch_size):
            batch = found[start : start + batch_size]
            async with self._db.write() as conn:
                result = await conn.execute(
                    delete(ContentEventRow).where(
                        tuple_(ContentEventRow.org_id, ContentEventRow.id).in_(batch),
                        *_old_event(before),
                    )
                )
            removed += result.rowcount
        return removed

    @staticmethod
    async def _delete_batch(
        conn: AsyncConnection, ids: Sequence[str], before: datetime
    ) -> dict[str, int]:
        # Check again under lock: a session may have come back to life since the candidates
        # were read. Every append bumps ``updated_at`` on the locked row, so PostgreSQL
        # re-checks it against the newest version, and SQLite's BEGIN IMMEDIATE already
        # excludes every other writer.
        locked = list(
            await conn.scalars(
                select(SessionRow.id)
                .where(SessionRow.id.in_(ids), *_prunable(before))
                .with_for_update()
            )
        )
        if not locked:
            return {}
        removed: dict[str, int] = {}
        for name, table in _CHILDREN:
            # Explicit deletes rather than ON DELETE CASCADE: the counts are the report, and
            # the schema's cascades are not what this relies on.
            result = await conn.execute(delete(table).where(table.session_id.in_(locked)))
            removed[name] = result.rowcount
        result = await conn.execute(delete(SessionRow).where(SessionRow.id.in_(locked)))
        removed["sessions"] = result.rowcount
        return removed

    async def _dry_run(self, before: datetime) -> PruneReport:
        """The same selection as ``prune`` applies, counted in one read transaction."""
        prunable = select(SessionRow.id).where(*_prunable(before)).scalar_subquery()
        counts: dict[str, int] = {}
        async with self._db.read() as conn:
            counts["sessions"] = await _count(conn, select(SessionRow.id).where(*_prunable(before)))
            for name, table in _CHILDREN:
                counts[name] = await _count(
                    conn, select(table.session_id).where(table.session_id.in_(prunable))
                )
            counts["content_events"] = await _count(
                conn, select(ContentEventRow.id).where(*_old_event(before))
            )
            kept = await _kept_waiting(conn, before)
        return PruneReport(cutoff=before, applied=False, kept_waiting=kept, **counts)


async def _kept_waiting(conn: AsyncConnection, before: datetime) -> int:
    return await _count(
        conn, select(SessionRow.id).where(SessionRow.updated_at < before, _waiting_turn())
    )


async def _count(conn: AsyncConnection, query: Select[str]) -> int:
    return int(await conn.scalar(select(func.count()).select_from(query.subquery())) or 0)
