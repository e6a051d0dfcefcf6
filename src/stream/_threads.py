"""A chat protocol's thread (the AI SDK's chat ``id``, AG-UI's ``threadId``) as a session.

The chat protocols are thin translations of the one event log: a thread is a Bosun
session, a message starts a turn through the same path as ``POST /v1/chat/stream`` (auth,
org isolation, rate limits, caps, idempotency and agents unchanged), and the reply is the
log's tail in the protocol's framing.

A client never chooses a session id. Thread ids live in their own keyspace per (org,
user, thread id) (``store.threads``), each naming a session id the server generated on
the thread's first message, so two orgs or two users with the same thread id have two
sessions and no one can take another's thread id first. One exception keeps clients of
Bosun's own API working: a thread id that is the id of a session *this user* owns (a
UUID from ``/v1/chat``, or a session an earlier Bosun derived from the thread id)
continues that session; any other id, UUID or not, is a thread of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from context import abandoned
from store import SessionRecord, StoredEvent, TurnRecord
from stream._agents import require_chat, visible_agent
from stream._api import AuthedRequest, ChatRequest, Services
from stream._auth import Principal
from stream._bounds import MESSAGE_PATTERN
from stream._bounds import THREAD_ID_PATTERN as THREAD_ID_PATTERN  # re-exported
from stream._errors import ApiError
from stream._routes import start_turn
from stream._sse import follow
from turn import TurnHandle

_THREADS = uuid.UUID("5b1e0c1a-3f4e-4a4b-9a43-b05d1c0a7e11")  # an earlier Bosun's uuid5 ids
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


def _legacy_session_id(principal: Principal, thread_id: str) -> str:
    """The session an earlier Bosun derived from a thread id, still found after upgrading."""
    name = f"{principal.org_id}\x00{principal.user_id}\x00{thread_id}"
    return str(uuid.uuid5(_THREADS, name))


def _owns(principal: Principal, record: SessionRecord) -> bool:
    return record.org_id == principal.org_id and record.user_id == principal.user_id


async def _own_session(
    services: Services, principal: Principal, session_id: str | None
) -> SessionRecord | None:
    record = None if session_id is None else await services.store.sessions.get(session_id)
    return record if record is not None and _owns(principal, record) else None


async def thread_session(
    services: Services, principal: Principal, thread_id: str
) -> SessionRecord | None:
    """The session the user's thread names, if it has one yet (``None``: the thread is
    new to this user, or its first message opened nothing). Reads only."""
    mapped = await services.store.threads.find(principal.org_id, principal.user_id, thread_id)
    if mapped is not None:
        return await _own_session(services, principal, mapped)
    try:
        named: str | None = str(uuid.UUID(thread_id))
    except ValueError:
        named = None
    for session_id in (named, _legacy_session_id(principal, thread_id)):
        if (record := await _own_session(services, principal, session_id)) is not None:
            return record
    return None


async def start_thread_turn(
    services: Services,
    request: AuthedRequest,
    thread_id: str,
    text: str,
    *,
    options: dict[str, Any] | None = None,
) -> TurnHandle:
    """Start the turn ``text`` asks for in the thread's session (opening it on the first
    message, under an id generated here), exactly as ``POST /v1/chat/stream`` would;
    ``options`` are that route's other body fields (``agent``, ``model``), and
    ``idempotency_key`` among them its header."""
    principal = request.user
    record = await thread_session(services, principal, thread_id)
    new_id = None
    if record is None:  # reserved before the session opens: a retry names the same one
        # A caller the agent will not talk to reserves nothing.
        agent = await visible_agent(services, principal, (options or {}).get("agent"))
        require_chat(agent, principal)
        new_id = await services.store.threads.open(
            principal.org_id, principal.user_id, thread_id, session_id=str(uuid.uuid4())
        )
    fields = dict(options or {})
    key = fields.pop("idempotency_key", None)
    body = ChatRequest(message=text, session_id=record.id if record is not None else None, **fields)
    return await start_turn(services, request, body, key, new_session_id=new_id)


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
