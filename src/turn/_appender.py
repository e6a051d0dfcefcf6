"""The turn's writer: its events appended in order, in as few transactions as keep up."""

from __future__ import annotations

import asyncio

from events import Event, MessageDone, TextDelta, TurnStatus
from store import EventLog


class BatchingAppender:
    """Appends a turn's events in order, grouping those that arrive during a write.

    With a fast model many deltas share one transaction (group commit); with a slow one
    each is committed as soon as it arrives. ``close`` writes the closing events and the
    turn's final status after everything queued before them.
    """

    def __init__(
        self, log: EventLog, session_id: str, turn_id: str, epoch: int | None = None
    ) -> None:
        self._log = log
        self._session_id = session_id
        self._turn_id = turn_id
        self._epoch = epoch
        self._pending: list[Event] = []
        self._writer: asyncio.Task[None] | None = None
        self.answering = False
        """Whether answer text went out that no ``message_done`` closed yet: an interrupted
        turn marks that partial answer (``message_done``, ``interrupted``)."""

    def add(self, event: Event) -> None:
        self._pending.append(event)
        if isinstance(event, TextDelta) and event.step_id is None:
            self.answering = True
        elif isinstance(event, MessageDone):
            self.answering = False
        if self._writer is None or self._writer.done():
            if self._writer is not None:
                self._writer.result()  # surface a failed write instead of losing events
            self._writer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            await self._log.append(
                self._session_id, batch, turn_id=self._turn_id, epoch=self._epoch
            )

    async def close(self, events: list[Event], status: TurnStatus) -> None:
        if self._writer is not None:
            await asyncio.shield(self._writer)
        batch, self._pending = [*self._pending, *events], []
        await self._log.append(
            self._session_id, batch, turn_id=self._turn_id, finish=status, epoch=self._epoch
        )
