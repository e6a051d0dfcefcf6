"""SSE framing and the log tail that feeds every stream.

A stream never runs a turn: it reads the log after its cursor, sends what it finds, and
waits for a wake-up or the keep-alive tick. So a dropped client loses nothing, and a
re-attached one gets every later event exactly once. Once caught up, a stream takes the
events this process committed from its wake-up (in memory, after the commit) as long as
they continue its cursor without a gap; anything else (another worker's events, a gap, a
backlog) sends it back to the log.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from events import INTERNAL_EVENTS
from store import Store, StoredEvent

KEEPALIVE = b": keep-alive\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def encode_frame(event: StoredEvent) -> bytes:
    data = event.text or json.dumps(event.data, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


async def tail(
    store: Store,
    session_id: str,
    *,
    after: int,
    keepalive_s: float,
    turn_id: str | None = None,
) -> AsyncIterator[bytes]:
    """Bosun's own SSE frames for the session's events after ``after``, live, until the
    end (see ``follow``). Operator-only events (``INTERNAL_EVENTS``) are never sent."""
    async for events in follow(
        store, session_id, after=after, keepalive_s=keepalive_s, turn_id=turn_id
    ):
        if events is None:
            yield KEEPALIVE
            continue
        # One chunk per read: the transport and the client pay per chunk, not per frame.
        frames = b"".join(encode_frame(e) for e in events if e.type not in INTERNAL_EVENTS)
        if frames:
            yield frames


async def follow(
    store: Store,
    session_id: str,
    *,
    after: int,
    keepalive_s: float,
    turn_id: str | None = None,
) -> AsyncIterator[list[StoredEvent] | None]:
    """The session's events after ``after`` in batches, live, until the end; ``None``
    when nothing happened for ``keepalive_s`` (time for a keep-alive). Every stream, in
    Bosun's own framing or a chat protocol's, is this one tail of the log.

    With ``turn_id`` it carries that turn's events and ends at its ``done``. Without, it
    carries every event and ends once it has caught up and no turn of the session is
    running or queued (a queued message's turn is the session's next). Batches may hold
    operator-only events: a translator leaves them out.
    """
    cursor = after
    idle_s = 0.0  # since the last batch or keep-alive
    caught_up = False  # the first round reads the log; later ones take what was committed
    with store.log.notifier.listen(session_id) as wake:
        while True:
            wake.clear()
            held = wake.take_after(cursor) if caught_up else None
            if held is None:
                events = await store.log.read(session_id, after=cursor, turn_id=turn_id)
                caught_up = True
            else:
                if held:
                    cursor = held[-1].seq  # other turns' events move the cursor too
                events = [e for e in held if turn_id is None or e.turn_id == turn_id]
            if events:
                yield events
                idle_s = 0.0
                cursor = max(cursor, events[-1].seq)
                if turn_id is not None and events[-1].type == "done":
                    return
                continue
            if turn_id is None and not await store.queue.busy(session_id):
                # A turn's done and its closing commit together: one more read is complete.
                rest = await store.log.read(session_id, after=cursor)
                if rest:
                    yield rest
                return
            poll = store.log.notifier.poll_s
            wait_s = keepalive_s if poll is None else min(poll, keepalive_s)
            try:
                await asyncio.wait_for(wake.wait(), timeout=wait_s)
            except TimeoutError:
                caught_up = False  # the poll fallback: re-read what other workers wrote
                idle_s += wait_s
                if idle_s >= keepalive_s:
                    idle_s = 0.0
                    yield None
