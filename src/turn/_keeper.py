"""The lease keeper: renews this worker's turn leases and takes over those of dead workers.

Every ``lease_s / 3`` seconds it renews the leases of the turns this process runs (a turn
whose lease another worker has taken is stopped here: its writes would be refused), then
claims running turns whose lease has run out, oldest first, and runs each on from where
its log ends. On SQLite the database is on this host, so a holder whose process has ended
is known to be dead (``worker_gone``): its turns are claimed at once, without waiting for
the lease (a restarted server resumes the turns its predecessor left running at its
first tick, on start-up). On PostgreSQL a worker on another host may only be slow, so the
lease decides. A turn interrupted by a newer message (its ``stop`` column) is cancelled
when its holder renews the lease, or closed here if its holder died; and a session whose
queued messages no one started (their starter died) gets its next turn started. It also
ends suspended turns whose questions went unanswered for
``pending_ttl_s`` (``expired``): the deadline is in the database, so it holds across
restarts, and the conditional close lets one worker of several do it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from events import UserMessage
from store import Claim, Store
from turn._models import ModelResolver
from turn._runner import TurnRunner
from turn._workers import worker_gone

_log = structlog.get_logger("bosun.turns")


class Keeper:
    """Heartbeats and takeovers for one worker, as a background task."""

    def __init__(
        self,
        store: Store,
        runner: TurnRunner,
        models: ModelResolver,
        *,
        pending_ttl_s: float = 86_400.0,
    ) -> None:
        self._store = store
        self._runner = runner
        self._models = models
        self._pending_ttl_s = pending_ttl_s
        self._task: asyncio.Task[None] | None = None

    @property
    def every_s(self) -> float:
        return self._runner.lease_s / 3

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="lease-keeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # a database hiccup must not stop the heartbeat
                _log.error("keeper.failed", error_type=type(exc).__name__, exc_info=exc)
            await asyncio.sleep(self.every_s)

    async def tick(self) -> list[str]:
        """One round: renew, stop what was lost, take over what expired. Returns the ids of
        the turns taken over."""
        runner = self._runner
        mine = runner.running
        held = await self._store.leases.renew(runner.worker_id, mine, runner.lease_s)
        runner.fenced({t for t in mine if t not in held and t in runner.running})
        for turn_id in await self._store.queue.stops(held):  # interrupted from any worker
            runner.interrupt(turn_id)
        claims = await self._store.leases.claim_expired(
            runner.worker_id, runner.lease_s, gone=await self._gone()
        )
        for claim in claims:
            await self._take_over(claim)
        await self.expire()
        for session_id in await self._store.queue.orphaned():  # their starter died
            await runner.start_next(session_id)
        return [c.turn_id for c in claims]

    async def _gone(self) -> set[str]:
        """The workers holding running turns whose process has ended (SQLite only: its
        database is on this host, so their pids are this host's)."""
        if self._store.dialect != "sqlite":
            return set()
        holders = await self._store.leases.holders(self._runner.worker_id)
        return {worker for worker in holders if worker_gone(worker)}

    async def expire(self) -> list[str]:
        """End the turns whose questions have waited longer than ``pending_ttl_s``; returns
        the ids of those this worker ended."""
        cutoff = datetime.now(UTC) - timedelta(seconds=self._pending_ttl_s)
        ended = []
        for turn in await self._store.sessions.suspended_turns(before=cutoff):
            if await self._store.log.close_unanswered(turn.session_id, turn.id, "expired"):
                _log.info("turn.expired", turn_id=turn.id, session_id=turn.session_id)
                ended.append(turn.id)
                await self._runner.turn_ended({}, turn.id, "expired")
        return ended

    async def _take_over(self, claim: Claim) -> None:
        events = await self._store.log.read(claim.session_id, turn_id=claim.turn_id)
        opening = next((e.event for e in events if e.type == "user_message"), None)
        job = claim.job
        if claim.stop is not None and isinstance(opening, UserMessage):
            # Interrupted while its worker was dying: end it here, then start the next.
            said = [e.type for e in events if e.type == "message_done" or _answer_text(e.data)]
            answering = bool(said) and said[-1] != "message_done"
            await self._runner.close_interrupted(claim, opening.message_id, answering)
            await self._runner.start_next(claim.session_id)
            return
        if job is None or not isinstance(opening, UserMessage):
            why = "The server stopped while this turn was running, and it cannot be resumed"
            await self._runner.close_unresumable(claim, why)
            return
        kit = None
        if self._runner.setups is not None:  # its agent's version: its kit and models
            kit, models = await self._runner.setups(job)
        else:
            models = await self._models.resolve_offered(
                org_id=str(job["org_id"]),
                requested=job.get("model"),
                planner=job.get("planner_model"),
            )
        _log.warning(
            "turn.taken_over",
            turn_id=claim.turn_id,
            session_id=claim.session_id,
            worker_id=self._runner.worker_id,
            epoch=claim.epoch,
        )
        self._runner.take_over(claim, opening, models, kit)


def _answer_text(data: dict[str, Any]) -> bool:
    return data.get("type") == "text_delta" and not data.get("step_id")
