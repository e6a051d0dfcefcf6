"""A chat protocol's thread (the AI SDK's chat ``id``, AG-UI's ``threadId``) as a session.

The chat protocols are thin translations of the one event log: a thread is a Bosun
session, a message starts a turn through the same path as ``POST /v1/chat/stream`` (auth,
org isolation, rate limits, caps, idempotency and agents unchanged), and the reply is the
log's tail in the protocol's framing. A thread id a client made up (the AI SDK's are short
random strings) names the session ``uuid5(org, user, id)``, so the same chat finds its
session again and no one else's; a thread id that is a UUID is the session id itself, so
a client can continue a session it has from Bosun's own API, and another org's id is 404
like everywhere else.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from context import abandoned
from store import SessionRecord, StoredEvent, TurnRecord
from stream._api import AuthedRequest, ChatRequest, Services
from stream._auth import Principal
from stream._bounds import MESSAGE_PATTERN
from stream._bounds import THREAD_ID_PATTERN as THREAD_ID_PATTERN  # re-exported
from stream._errors import ApiError
from stream._routes import session_for, start_turn
from stream._sse import follow
from turn import TurnHandle

_THREADS = uuid.UUID("5b1e0c1a-3f4e-4a4b-9a43-b05d1c0a7e11")  # the namespace of uuid5 ids
MAX_BODY_BYTES = 1024 * 1024
"""A protocol's client posts the whole thread each time (Bosun reads only its newest
message), so its bodies may be larger than Bosun's own."""
MAX_MESSAGES = 2_000
MAX_PARTS = 500
NO_NUL = r"^[^\x00]*$"
TEXT_PART: dict[str, Any] = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {
        "type": {"const": "text"},
        "text": {"type": "string", "pattern": MESSAGE_PATTERN},
    },
}
"""A text part whose text is a message Bosun accepts (the newest user message has one)."""


def thread_session_id(principal: Principal, thread_id: str) -> str:
    """The session a thread id names for this user: the id itself when it is a UUID,
    else one derived from the org, the user and the id."""
    try:
        return str(uuid.UUID(thread_id))
    except ValueError:
        name = f"{principal.org_id}\x00{principal.user_id}\x00{thread_id}"
        return str(uuid.uuid5(_THREADS, name))


async def thread_session(
    services: Services, principal: Principal, thread_id: str
) -> tuple[str, SessionRecord | None]:
    """The thread's session id and record (``None``: no session yet); 404 when the id
    names a session the caller may not see."""
    session_id = thread_session_id(principal, thread_id)
    if await services.store.sessions.get(session_id) is None:
        return session_id, None
    return session_id, await session_for(services, principal, session_id)


async def start_thread_turn(
    services: Services,
    request: AuthedRequest,
    thread_id: str,
    text: str,
    *,
    options: dict[str, Any] | None = None,
) -> TurnHandle:
    """Start the turn ``text`` asks for in the thread's session (opening it on the first
    message), exactly as ``POST /v1/chat/stream`` would; ``options`` are that route's other
    body fields (``agent``, ``model``), and ``idempotency_key`` among them its header."""
    session_id, record = await thread_session(services, request.user, thread_id)
    fields = dict(options or {})
    key = fields.pop("idempotency_key", None)
    body = ChatRequest(message=text, session_id=record.id if record is not None else None, **fields)
    return await start_turn(
        services, request, body, key, new_session_id=None if record is not None else session_id
    )


async def running_turn(services: Services, session_id: str) -> TurnRecord | None:
    """The session's turn that is running now (the newest, if several), if any."""
    turns = await services.store.sessions.running_turns(session_id)
    return max(turns, key=lambda t: t.started_at) if turns else None


def turn_events(
    services: Services, session_id: str, *, turn_id: str, after: int = 0
) -> AsyncIterator[list[StoredEvent] | None]:
    """The turn's events after ``after``, live, to its ``done`` (``None``: a keep-alive
    is due), for a protocol's translator."""
    return follow(
        services.store,
        session_id,
        after=after,
        turn_id=turn_id,
        keepalive_s=services.config.keepalive_s,
    )


def kept_text(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    """``events`` without the text a ``message_reset`` among them abandoned (a dead
    worker's, streamed again by the turn's next attempt)."""
    gone = abandoned(events)
    return [e for e in events if e.seq not in gone] if gone else list(events)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)
