"""Tool executions: one row per tool use of a turn, written before the tool runs and after.

The row is the runner's memory across crashes, suspensions and resumes: ``pending``
before the handler runs (or while a human decides), ``approved`` once a human said yes
and before the resumed turn runs it, then ``succeeded`` / ``failed``, or
``rejected_by_user``. A picker's row is ``succeeded`` with the user's pick as output.
A row is the call ``(turn_id, tool_use_id)`` (its primary key; ``idempotency_key`` is the
same pair as one string): a resumed turn finds what already ran instead of running a
write twice, while the same ``tool_use_id`` in another turn, session or org is another
call (providers and scripts reuse ids). A user addresses a call by session and id: the
session's most recent row with that id (``latest``), or for undo the most recent one that
can still be undone (``undo_target``). Undo does not add a status: the original stays
``succeeded`` and its ``inverse`` gains ``undone_by``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, null, or_, select, update
from sqlalchemy.engine import Connection

from store import _hot as hot
from store import _hot_pg as hot_pg
from store._approvals import ApprovalRow
from store._db import Database
from store._models import ToolExecutionRow, utcnow

ExecutionStatus = Literal[
    "pending", "approved", "succeeded", "failed", "rejected_by_user", "expired", "superseded"
]
Finished = Literal["succeeded", "failed"]
Resolution = Literal["approved", "rejected_by_user", "succeeded", "expired"]
_DECISIONS = {"approved": "approved", "rejected_by_user": "rejected", "expired": "expired"}
_RUNNABLE = ("pending", "approved")

_COLUMNS = (
    ToolExecutionRow.tool_use_id,
    ToolExecutionRow.session_id,
    ToolExecutionRow.turn_id,
    ToolExecutionRow.tool,
    ToolExecutionRow.status,
    ToolExecutionRow.idempotency_key,
    ToolExecutionRow.input,
    ToolExecutionRow.output,
    ToolExecutionRow.error,
    ToolExecutionRow.inverse,
    ToolExecutionRow.created_at,
    ToolExecutionRow.completed_at,
)


def idempotency_key(turn_id: str, tool_use_id: str) -> str:
    """The key a tool use is recorded under: the same call in the same turn is one row."""
    return f"{turn_id}:{tool_use_id}"


def _call(turn_id: str, tool_use_id: str) -> ColumnElement[bool]:
    """The row of one call: a tool_use_id names a call only within its turn."""
    return and_(ToolExecutionRow.turn_id == turn_id, ToolExecutionRow.tool_use_id == tool_use_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecutionRecord:
    """One tool use as stored; ``input``/``output``/``error``/``inverse`` are JSON values.

    ``inverse`` is ``{"tool": name, "input": {...}}`` for a succeeded write that can be
    undone, plus ``"undone_by": tool_use_id`` (of the same turn) once it was.
    """

    tool_use_id: str
    session_id: str
    turn_id: str
    tool: str
    status: ExecutionStatus
    idempotency_key: str | None
    input: dict[str, Any]
    output: Any
    error: dict[str, Any] | None
    inverse: dict[str, Any] | None
    created_at: datetime
    completed_at: datetime | None

    @property
    def undone_by(self) -> str | None:
        """The tool use that undid this one, if any."""
        return None if self.inverse is None else self.inverse.get("undone_by")

    @property
    def undoable(self) -> bool:
        return self.status == "succeeded" and self.inverse is not None and not self.undone_by


def _json(value: Any) -> Any:
    # SQL NULL rather than a JSON 'null', so "no output" reads the same on both dialects.
    return null() if value is None else value


class ToolExecutions:
    """Repository of the ``tool_executions`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _insert_pending(
        self,
        conn: Connection,
        *,
        tool_use_id: str,
        session_id: str,
        turn_id: str,
        tool: str,
        input: dict[str, Any],
        key: str,
        **ended: Any,
    ) -> bool:
        """Insert the call's row unless it is recorded already; whether it was. ``ended``
        (status, output, error, completed_at) records a call that already ran."""
        values = {"status": "pending", **ended}
        if "output" in values:
            values["output"], values["error"] = _json(values["output"]), _json(values["error"])
        inserted = conn.execute(
            self._db.insert(ToolExecutionRow)
            .values(
                tool_use_id=tool_use_id,
                session_id=session_id,
                turn_id=turn_id,
                tool=tool,
                idempotency_key=key,
                input=input,
                created_at=utcnow(),
                **values,
            )
            .on_conflict_do_nothing()  # the call's key, however it is spelt
            .returning(ToolExecutionRow.tool_use_id)
        )
        return inserted.first() is not None

    def _recorded(self, conn: Connection, turn_id: str, tool_use_id: str) -> ToolExecutionRecord:
        """The row an insert met instead of inserting (by key or by call)."""
        key = idempotency_key(turn_id, tool_use_id)
        row = conn.execute(
            select(*_COLUMNS).where(
                or_(ToolExecutionRow.idempotency_key == key, _call(turn_id, tool_use_id))
            )
        ).first()
        assert row is not None, "an insert that did nothing must have met an existing row"
        return ToolExecutionRecord(**row._asdict())

    async def start(
        self,
        *,
        tool_use_id: str,
        session_id: str,
        turn_id: str,
        tool: str,
        input: dict[str, Any],
    ) -> ToolExecutionRecord | None:
        """Record a ``pending`` execution before it runs (or while it waits for a human).

        Returns ``None`` when this call inserted the row, else the row already recorded
        for ``tool_use_id`` in ``turn_id`` (whatever its tool and input): the caller
        decides what it means.
        """
        key = idempotency_key(turn_id, tool_use_id)

        def write(conn: Connection) -> ToolExecutionRecord | None:
            if hot.runs_on(conn):  # the writer thread: fixed SQL (store._hot)
                inserted = hot.insert_pending(
                    hot.cursor_of(conn), tool_use_id=tool_use_id, session_id=session_id,
                    turn_id=turn_id, tool=tool, input=input, key=key, now=utcnow(),
                )  # fmt: skip
            else:
                inserted = self._insert_pending(
                    conn, tool_use_id=tool_use_id, session_id=session_id, turn_id=turn_id,
                    tool=tool, input=input, key=key,
                )  # fmt: skip
            return None if inserted else self._recorded(conn, turn_id, tool_use_id)

        async def write_pg(pg: Any) -> ToolExecutionRecord | None:
            met = await hot_pg.start_execution(
                pg, tool_use_id=tool_use_id, session_id=session_id, turn_id=turn_id,
                tool=tool, input=input, key=key, now=utcnow(),
            )  # fmt: skip
            return None if met is None else ToolExecutionRecord(**met)

        return await self._db.run_write(write, pg=write_pg)

    def record_soon(
        self,
        *,
        tool_use_id: str,
        session_id: str,
        turn_id: str,
        tool: str,
        input: dict[str, Any],
        status: Finished,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> Awaitable[ToolExecutionRecord | None]:
        """Record a call that already ran and ended, in one insert queued now: a read
        needs no intent row before it runs (running it again after a crash changes
        nothing). Resolves to ``None`` when this call inserted the row, else the row
        recorded before it."""
        key = idempotency_key(turn_id, tool_use_id)
        now = utcnow()

        def write(conn: Connection) -> ToolExecutionRecord | None:
            if hot.runs_on(conn):  # the writer thread: fixed SQL (store._hot)
                inserted = hot.insert_pending(
                    hot.cursor_of(conn), tool_use_id=tool_use_id, session_id=session_id,
                    turn_id=turn_id, tool=tool, input=input, key=key, now=now,
                    ended=hot.Ended(status, output, error),
                )  # fmt: skip
            else:
                inserted = self._insert_pending(
                    conn, tool_use_id=tool_use_id, session_id=session_id, turn_id=turn_id,
                    tool=tool, input=input, key=key, status=status, output=output,
                    error=error, completed_at=now,
                )  # fmt: skip
            return None if inserted else self._recorded(conn, turn_id, tool_use_id)

        async def write_pg(pg: Any) -> ToolExecutionRecord | None:
            met = await hot_pg.start_execution(
                pg, tool_use_id=tool_use_id, session_id=session_id, turn_id=turn_id,
                tool=tool, input=input, key=key, now=now, ended=hot.Ended(status, output, error),
            )  # fmt: skip
            return None if met is None else ToolExecutionRecord(**met)

        return self._db.write_soon(write, pg=write_pg)

    async def reopen(self, tool_use_id: str, *, turn_id: str) -> bool:
        """Put a ``failed`` execution back to ``pending`` before running it again (a
        failure changed nothing worth keeping; a success is never re-run)."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(ToolExecutionRow)
                .where(_call(turn_id, tool_use_id), ToolExecutionRow.status == "failed")
                .values(
                    status="pending",
                    output=null(),
                    error=null(),
                    inverse=null(),
                    completed_at=None,
                )
                .returning(ToolExecutionRow.tool_use_id)
            )
            return result.first() is not None

    async def finish(
        self,
        tool_use_id: str,
        *,
        turn_id: str,
        status: Finished,
        output: Any = None,
        error: dict[str, Any] | None = None,
        inverse: dict[str, Any] | None = None,
    ) -> ToolExecutionRecord | None:
        """Record how a ``pending`` (or ``approved``) execution ended. Returns ``None`` if it
        was neither (someone else settled it first: the stored result stands)."""

        def write(conn: Connection) -> ToolExecutionRecord | None:
            if hot.runs_on(conn):  # the writer thread: fixed SQL (store._hot)
                settled = hot.finish_execution(
                    hot.cursor_of(conn), tool_use_id=tool_use_id, turn_id=turn_id,
                    status=status, output=output, error=error, inverse=inverse, now=utcnow(),
                )  # fmt: skip
                return None if settled is None else ToolExecutionRecord(**settled)
            row = conn.execute(
                update(ToolExecutionRow)
                .where(_call(turn_id, tool_use_id), ToolExecutionRow.status.in_(_RUNNABLE))
                .values(
                    status=status,
                    output=_json(output),
                    error=_json(error),
                    inverse=_json(inverse),
                    completed_at=utcnow(),
                )
                .returning(*_COLUMNS)
            ).first()
            return ToolExecutionRecord(**row._asdict()) if row else None

        async def write_pg(pg: Any) -> ToolExecutionRecord | None:
            settled = await hot_pg.finish_execution(
                pg, tool_use_id=tool_use_id, turn_id=turn_id, status=status, output=output,
                error=error, inverse=inverse, now=utcnow(),
            )  # fmt: skip
            return None if settled is None else ToolExecutionRecord(**settled)

        return await self._db.run_write(write, pg=write_pg)

    async def mark_rejected(
        self,
        *,
        tool_use_id: str,
        session_id: str,
        turn_id: str,
        tool: str,
        input: dict[str, Any],
        error: dict[str, Any],
    ) -> ToolExecutionRecord:
        """Record that the user declined the call: a ``pending`` row (or none yet) becomes
        ``rejected_by_user``, and so do an ``approved`` one that has not run and a
        ``failed`` one (a failed call may be run again, so the refusal must stick): a "no"
        wins over anything that has not run. A row that succeeded is returned unchanged."""
        key = idempotency_key(turn_id, tool_use_id)
        async with self._db.write() as conn:
            await conn.run_sync(
                lambda sync: self._insert_pending(
                    sync, tool_use_id=tool_use_id, session_id=session_id, turn_id=turn_id,
                    tool=tool, input=input, key=key,
                )
            )  # fmt: skip
            await conn.execute(
                update(ToolExecutionRow)
                .where(
                    _call(turn_id, tool_use_id),
                    ToolExecutionRow.status.in_(("pending", "approved", "failed")),
                )
                .values(status="rejected_by_user", error=error, completed_at=utcnow())
            )
            row = (await conn.execute(select(*_COLUMNS).where(_call(turn_id, tool_use_id)))).one()
        return ToolExecutionRecord(**row._asdict())

    async def resolve(
        self,
        tool_use_id: str,
        *,
        turn_id: str,
        session_id: str,
        status: Resolution,
        output: Any = None,
        error: dict[str, Any] | None = None,
        by: str | None = None,
    ) -> bool:
        """Record a human's answer to a ``pending`` call of ``turn_id`` in ``session_id``
        (the turn that asked; the session is the one the user addressed): ``approved`` (it
        runs when the turn resumes), ``rejected_by_user`` (with ``error``) or, for a picker,
        ``succeeded`` with the pick as ``output``. Only a pending row changes, in one
        conditional update, so of two concurrent answers exactly one wins: returns whether
        this one did. The call's approval in the inbox (if any) is answered with it, ``by``
        that user."""
        done = status != "approved"
        async with self._db.write() as conn:
            result = await conn.execute(
                update(ToolExecutionRow)
                .where(
                    _call(turn_id, tool_use_id),
                    ToolExecutionRow.session_id == session_id,
                    ToolExecutionRow.status == "pending",
                )
                .values(
                    status=status,
                    output=_json(output),
                    error=_json(error),
                    completed_at=utcnow() if done else None,
                )
                .returning(ToolExecutionRow.tool_use_id)
            )
            won = result.first() is not None
            if won and status in _DECISIONS:  # a pick is not an approval
                await conn.execute(
                    update(ApprovalRow)
                    .where(
                        ApprovalRow.turn_id == turn_id,
                        ApprovalRow.tool_use_id == tool_use_id,
                        ApprovalRow.status == "pending",
                    )
                    .values(status=_DECISIONS[status], resolved_at=utcnow(), resolved_by=by)
                )
            return won

    async def mark_undone(self, tool_use_id: str, *, turn_id: str, undone_by: str) -> bool:
        """Link a succeeded, undoable execution to the execution (of its turn) that undid
        it. Returns whether it did (``False``: not undoable, or already undone)."""
        async with self._db.write() as conn:
            row = (
                await conn.execute(
                    select(ToolExecutionRow.status, ToolExecutionRow.inverse)
                    .where(_call(turn_id, tool_use_id))
                    .with_for_update()
                )
            ).first()
            if row is None or row.status != "succeeded" or not row.inverse:
                return False
            if row.inverse.get("undone_by"):
                return False
            await conn.execute(
                update(ToolExecutionRow)
                .where(_call(turn_id, tool_use_id))
                .values(inverse={**row.inverse, "undone_by": undone_by})
            )
        return True

    async def get(self, tool_use_id: str, *, turn_id: str) -> ToolExecutionRecord | None:
        """The execution of ``tool_use_id`` in ``turn_id``, if recorded."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(*_COLUMNS).where(_call(turn_id, tool_use_id)))).first()
        return ToolExecutionRecord(**row._asdict()) if row else None

    async def latest(self, tool_use_id: str, *, session_id: str) -> ToolExecutionRecord | None:
        """The execution a user of ``session_id`` means by ``tool_use_id``: the most recent
        turn's, when the session's turns reused the id."""
        rows = await self._in_session(tool_use_id, session_id)
        return rows[0] if rows else None

    async def undo_target(self, tool_use_id: str, *, session_id: str) -> ToolExecutionRecord | None:
        """The execution an undo of ``tool_use_id`` in ``session_id`` undoes: the most recent
        one that can still be undone, else the most recent (whose refusal the user then
        gets). Repeated undos of a reused id thus walk back through its writes, newest
        first, until ``already_undone``."""
        rows = await self._in_session(tool_use_id, session_id)
        return next((row for row in rows if row.undoable), rows[0] if rows else None)

    async def _in_session(self, tool_use_id: str, session_id: str) -> list[ToolExecutionRecord]:
        async with self._db.read() as conn:
            result = await conn.execute(
                select(*_COLUMNS)
                .where(
                    ToolExecutionRow.session_id == session_id,
                    ToolExecutionRow.tool_use_id == tool_use_id,
                )
                .order_by(ToolExecutionRow.created_at.desc(), ToolExecutionRow.turn_id.desc())
            )
            return [ToolExecutionRecord(**row._asdict()) for row in result]

    async def by_key(self, key: str) -> ToolExecutionRecord | None:
        async with self._db.read() as conn:
            row = (
                await conn.execute(select(*_COLUMNS).where(ToolExecutionRow.idempotency_key == key))
            ).first()
        return ToolExecutionRecord(**row._asdict()) if row else None

    async def list_for_turn(self, turn_id: str) -> list[ToolExecutionRecord]:
        """A turn's executions in the order they were recorded."""
        async with self._db.read() as conn:
            result = await conn.execute(
                select(*_COLUMNS)
                .where(ToolExecutionRow.turn_id == turn_id)
                .order_by(ToolExecutionRow.created_at, ToolExecutionRow.tool_use_id)
            )
            return [ToolExecutionRecord(**row._asdict()) for row in result]
