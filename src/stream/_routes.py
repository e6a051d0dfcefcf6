"""Route handlers: chat turns, sessions and their logs, health."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable
from typing import Annotated

from litestar import get, post
from litestar.openapi.spec import OpenAPIFormat
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream

from context import CallDetail, ClientContext, MessageDetail, answer_text, session_messages
from fleet import DEFAULT_HANDLE, AgentSetup
from store import IdempotencyClaim, SessionRecord, StoredEvent, TurnInProgressError
from stream._agents import require_chat, visible_agent
from stream._api import (
    ArtifactRefOut,
    AuthedRequest,
    ChatRequest,
    ChatResponse,
    EventOut,
    EventPage,
    MessageOut,
    Services,
    ServicesDep,
    SessionDetail,
    SessionPage,
    SessionSummary,
    StepOut,
    ToolCallOut,
    ToolErrorOut,
    Totals,
    TurnOut,
)
from stream._auth import Principal
from stream._bounds import check_message_length, event_cursor, int_query, utc_instant
from stream._client import request_locale
from stream._errors import ApiError, trace_id_of
from stream._limits import enforce_rate_limits
from stream._questions import answer_questions
from stream._sse import SSE_HEADERS, tail
from turn import ModelNotAllowedError, TurnHandle, TurnOrder, TurnRoleModels, new_session

IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        description="1-200 printable ASCII characters; a retry with the same key and body "
        "re-attaches to the first request's turn instead of starting another (for 24 h).",
        # Checked by _claim_key, whose message says more than a pattern mismatch would.
        schema_extra={"pattern": r"^[ -~]{1,200}$"},
    ),
]
MAX_KEY_CHARS = 200
FOLLOW_POLL_S = 0.25


async def session_for(services: Services, principal: Principal, session_id: str) -> SessionRecord:
    """The session if the caller may see it; otherwise 404, so ids of others never leak."""
    record = await services.store.sessions.get(session_id)
    visible = (
        record is not None
        and record.org_id == principal.org_id
        and (principal.sees_whole_org or record.user_id == principal.user_id)
    )
    if record is None or not visible:
        raise ApiError(404, "not_found", f"No session {session_id!r}")
    return record


async def _pick_models(
    services: Services, org_id: str, body: ChatRequest | None, setup: AgentSetup
) -> TurnRoleModels:
    """The turn's models: the agent's, with the answering roles' (``body.model``) and the
    planner's (``body.planner_model``) that the request picked; a spec the server does not
    offer is 422 ``model_not_allowed``, before anything starts."""
    requested = body.model if body is not None else None
    planner = body.planner_model if body is not None else None
    try:
        return await services.models.resolve(
            org_id=org_id, requested=requested, planner=planner, roles=setup.specs
        )
    except ModelNotAllowedError as exc:
        allowed = ", ".join(services.models.allowed) or "none"
        where = "" if exc.field == "models" else f" ({exc.field})"
        message = f"Model {exc.spec!r}{where} is not allowed here (allowed: {allowed})"
        raise ApiError(422, "model_not_allowed", message) from None


async def _pick_agent(
    services: Services, principal: Principal, asked: str | None, session: SessionRecord | None
) -> AgentSetup:
    """The agent a chat talks to: the session's (a session keeps its agent), else the one
    asked for, else the org's default. A role its profile does not talk to is refused,
    then a paused agent takes no new turns: both before anything is stored or counted."""
    if session is not None and asked is not None and asked != (session.agent or DEFAULT_HANDLE):
        raise ApiError(
            409, "agent_mismatch", f"This session talks to {session.agent or DEFAULT_HANDLE!r}"
        )
    handle = session.agent if session is not None else asked
    agent = await visible_agent(services, principal, handle)
    require_chat(agent, principal)
    if agent.paused:
        raise ApiError(409, "agent_paused", agent.paused_message())
    return await services.agents.setup(agent, org_id=principal.org_id)


async def start_turn(
    services: Services,
    request: AuthedRequest,
    body: ChatRequest,
    key: str | None,
    *,
    new_session_id: str | None = None,
) -> TurnHandle:
    """Start the turn ``body`` asks for; with an idempotency ``key`` already used for the
    same body, the earlier request's turn instead (nothing new starts, nothing is counted).
    Without ``body.session_id`` the turn opens a session, with ``new_session_id`` when one
    was reserved for it (a chat protocol's thread: an id Bosun generated, never a client's)."""
    principal = request.user
    check_message_length(body.message, services.config.max_message_chars)
    if key is not None:
        _check_key(key)
    session = None
    if body.session_id is not None:
        session = await session_for(services, principal, body.session_id)
    setup = await _pick_agent(services, principal, body.agent, session)
    models = await _pick_models(services, principal.org_id, body, setup)
    client = client_of(request, body)
    session_id = session.id if session is not None else None
    claim = None
    if key is not None:
        # A thread's first message names the session it opens, so that its retry (which
        # finds the session open) is the same request.
        keyed = body.model_copy(update={"session_id": new_session_id}) if new_session_id else body
        held = await _claim_key(services, request, key, keyed)
        if isinstance(held, TurnHandle):
            return held
        claim = held
    try:
        if session_id is not None and setup.agent.profile.double_texting == "reject":
            await _refuse_double_text(services, session_id)  # before rate limits count it
        await enforce_rate_limits(services, principal)
        handle = None
        if session_id is not None:  # a question waiting in the session: this answers it
            handle = await answer_questions(services, principal, session_id, body.message)
        if handle is None:
            handle = await _open_turn(
                services, principal, body.message, (session_id, new_session_id),
                (setup, models, (body.model, body.planner_model)),
                trace_id=trace_id_of(request), client=client,
            )  # fmt: skip
    except BaseException:
        if claim is not None:  # no turn started: a retry may claim the key again
            await services.store.idempotency.release(claim)
        raise
    if claim is not None:
        await services.store.idempotency.record(
            claim, session_id=handle.session_id, turn_id=handle.turn_id
        )
    return handle


async def send_message(
    services: Services, principal: Principal, text: str, *, session_id: str | None, trace_id: str
) -> TurnHandle:
    """What a chat request does with ``principal``'s message, below HTTP and without its
    idempotency key and rate limits: answer the question the session's suspended turn
    waits for, or start a turn with the session's agent (a new session's: the default)."""
    check_message_length(text, services.config.max_message_chars)
    session = await session_for(services, principal, session_id) if session_id else None
    setup = await _pick_agent(services, principal, None, session)
    models = await _pick_models(services, principal.org_id, None, setup)
    if session is not None:
        handle = await answer_questions(services, principal, session.id, text)
        if handle is not None:
            return handle
    return await _open_turn(
        services,
        principal,
        text,
        (session_id, None),
        (setup, models, (None, None)),
        trace_id=trace_id,
    )


async def _open_turn(
    services: Services,
    principal: Principal,
    text: str,
    session: tuple[str | None, str | None],
    chosen: tuple[AgentSetup, TurnRoleModels, tuple[str | None, str | None]],
    *,
    trace_id: str,
    client: ClientContext | None = None,
) -> TurnHandle:
    """Start a turn in the session (``session``: its id, or none yet and the id to give
    the new one, if chosen) with the agent, models and the model specs the request picked
    (answering roles', planner's) ``chosen``, and the request's ``client`` context; the job
    records those, so a resume or a takeover runs with the same choice."""
    setup, models, (model_spec, planner_spec) = chosen
    agent = setup.agent
    session_id, new_id = session
    if session_id is None:
        session_id = await new_session(
            services.store,
            org_id=principal.org_id,
            user_id=principal.user_id,
            first_message=text,
            agent=None if agent.handle == DEFAULT_HANDLE else agent.handle,
            session_id=new_id,
        )
    strategy = agent.profile.double_texting

    order = TurnOrder(
        org_id=principal.org_id, user_id=principal.user_id, role=principal.role,
        model_spec=model_spec, planner_spec=planner_spec, agent=(agent.handle, agent.version),
        client=client,
    )  # fmt: skip

    def queue() -> Awaitable[TurnHandle]:
        return services.runner.queue(order, session_id=session_id, text=text, trace_id=trace_id)

    if strategy != "reject" and await services.store.queue.waiting(session_id):
        return await queue()  # behind the messages already waiting
    try:
        return await services.runner.start(
            order, session_id=session_id, text=text, trace_id=trace_id, kit=setup.kit,
            models=models,
        )  # fmt: skip
    except TurnInProgressError as busy:
        if strategy == "reject":
            raise _in_progress(busy.turn_id) from None
        handle = await queue()
        if strategy == "interrupt" and busy.turn_id is not None:
            await _interrupt(services, busy.turn_id)
        return handle


async def _refuse_double_text(services: Services, session_id: str) -> None:
    """409 ``turn_in_progress`` when a turn runs in the session (an agent that rejects
    double texts); the database refuses a racing second turn in any case."""
    running = await services.store.log.running_turn(session_id)
    if running is not None:
        raise _in_progress(running)


def _in_progress(turn_id: str | None) -> ApiError:
    running = f"Turn {turn_id!r} is" if turn_id else "A turn was"
    return ApiError(
        409,
        "turn_in_progress",
        f"{running} still running in this session; send the message after its `done` event "
        "arrives, or cancel it first",
        headers={"X-Turn-Id": turn_id} if turn_id else None,
    )


async def _interrupt(services: Services, turn_id: str) -> None:
    """Stop the running ``turn_id`` for a newer message: at once if this worker runs it,
    else its worker sees the stop request when it renews the lease (a third of it)."""
    if await services.store.queue.stop(turn_id, "interrupted"):
        services.runner.interrupt(turn_id)


def client_of(request: AuthedRequest, body: ChatRequest) -> ClientContext | None:
    """The request's client context and locale (``context.locale``, ``x-locale``, then
    ``Accept-Language``); ``None`` when it has neither."""
    context = body.client_context()
    headers = request.headers
    locale = request_locale(context, headers.get("x-locale"), headers.get("accept-language"))
    if context is None:
        return ClientContext(locale=locale) if locale else None
    return context.to_client(locale)


def _check_key(key: str) -> None:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise ApiError(
            400,
            "invalid_request",
            f"Idempotency-Key must be 1-{MAX_KEY_CHARS} printable ASCII characters, "
            f"not {key[: MAX_KEY_CHARS + 1]!r}",
        )


async def _claim_key(
    services: Services, request: AuthedRequest, key: str, body: ChatRequest
) -> IdempotencyClaim | TurnHandle:
    """Claim ``key`` for a new turn, or find the turn an earlier request with the same key
    and body started (waiting while that request is still starting it)."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    principal = request.user
    delay_s = 0.02
    while True:
        held = await services.store.idempotency.claim(
            org_id=principal.org_id, user_id=principal.user_id, key=key, request_hash=digest
        )
        if isinstance(held, IdempotencyClaim):
            return held
        if held.request_hash != digest:
            raise ApiError(
                422,
                "idempotency_conflict",
                f"Idempotency-Key {key!r} was used for a different request in the last "
                "24 hours; send a new key with a new request",
            )
        if held.session_id is not None and held.turn_id is not None:
            return TurnHandle(
                session_id=held.session_id, turn_id=held.turn_id, trace_id=trace_id_of(request)
            )
        # The first request is starting its turn right now (or gave the key up): ask again.
        await asyncio.sleep(delay_s)
        delay_s = min(2 * delay_s, 0.5)


def sse_stream(
    services: Services,
    session_id: str,
    *,
    after: int = 0,
    turn_id: str | None = None,
    queued: bool = False,
) -> Stream:
    """The session's events as SSE (one turn's with ``turn_id``); ``X-Turn-Status:
    queued`` says the turn waits for the session's running one (its events come later)."""
    more = {} if turn_id is None else {"X-Turn-Id": turn_id}
    if queued:
        more["X-Turn-Status"] = "queued"
    frames = tail(
        services.store,
        session_id,
        after=after,
        turn_id=turn_id,
        keepalive_s=services.config.keepalive_s,
    )
    return Stream(
        frames,
        media_type="text/event-stream",
        headers={**SSE_HEADERS, "X-Session-Id": session_id, **more},
    )


@post("/v1/chat/stream", status_code=200, summary="Send a user turn; stream its events (SSE)")
async def chat_stream(
    data: JSONBody[ChatRequest],
    request: AuthedRequest,
    services: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Stream:
    handle = await start_turn(services, request, data, idempotency_key)
    return sse_stream(
        services, handle.session_id, after=handle.after, turn_id=handle.turn_id,
        queued=handle.queued,
    )  # fmt: skip


@post("/v1/chat", status_code=200, summary="Send a user turn; wait for its end")
async def chat(
    data: JSONBody[ChatRequest],
    request: AuthedRequest,
    services: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> ChatResponse:
    handle = await start_turn(services, request, data, idempotency_key)
    events = await _finished_turn(services, handle)
    done = next((e.data for e in reversed(events) if e.type == "done"), {})
    usage = next((e.data for e in events if e.type == "usage"), None)
    error = next((e.data for e in reversed(events) if e.type == "error"), None)
    ended = next((e.data for e in reversed(events) if e.type == "message_done"), {})
    return ChatResponse(
        session_id=handle.session_id,
        turn_id=handle.turn_id,
        status=done.get("status", "running"),
        answer=answer_text(events),  # text a takeover wrote again, once
        events=[{"seq": e.seq, "type": e.type, "data": e.data} for e in events],
        usage=usage,
        error=error,
        partial=bool(done.get("partial")),
        failed_steps=done.get("failed_steps", []),
        stop_reason=ended.get("stop_reason"),
    )


async def _finished_turn(services: Services, handle: TurnHandle) -> list[StoredEvent]:
    """The turn's events once it has ended (or stopped for the user), read from its log
    (those after ``handle.after``: a resumed turn's part that this request started).

    A retry may re-attach to a turn another worker runs, whose appends wake nobody here:
    the log is then polled every ``FOLLOW_POLL_S``, up to the turn timeout.
    """
    await services.runner.wait(handle.turn_id)
    log = services.store.log
    with log.notifier.listen(handle.session_id) as wake, contextlib.suppress(TimeoutError):
        async with asyncio.timeout(services.config.turn_timeout_s):
            while True:
                wake.clear()
                events = await log.read(
                    handle.session_id, after=handle.after, turn_id=handle.turn_id
                )
                if any(e.type == "done" for e in events):
                    return events
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=FOLLOW_POLL_S)
    return await log.read(handle.session_id, after=handle.after, turn_id=handle.turn_id)


@get("/v1/sessions", summary="The caller's sessions, most recently active first")
async def list_sessions(
    request: AuthedRequest,
    services: ServicesDep,
    limit: Annotated[int | None, int_query(ge=1, le=500, description="Page size.")] = None,
    before: Annotated[
        str | None,
        QueryParameter(
            format=OpenAPIFormat.DATE_TIME,
            max_length=64,
            description="Sessions active before this instant (a page's next_before).",
        ),
    ] = None,
) -> SessionPage:
    page_size = limit or services.config.sessions_page_size
    cursor = utc_instant(before, name="before") if before is not None else None
    records = await services.store.sessions.list_for_user(
        org_id=request.user.org_id, user_id=request.user.user_id, limit=page_size, before=cursor
    )
    return SessionPage(
        sessions=[_summary(r) for r in records],
        next_before=records[-1].updated_at if len(records) == page_size else None,
    )


def _summary(record: SessionRecord) -> SessionSummary:
    return SessionSummary(
        id=record.id,
        title=record.title,
        agent=record.agent,
        last_seq=record.last_seq,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


@get(
    "/v1/sessions/{session_id:str}",
    summary="Messages with their tool calls, turns, status and totals of a session",
)
async def session_detail(
    session_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> SessionDetail:
    record = await session_for(services, request.user, session_id)
    store = services.store
    turns = await store.sessions.turns(record.id)
    running = any(t.status == "running" for t in turns)
    status = "running" if running else (turns[-1].status if turns else "idle")
    totals = await store.sessions.usage_totals(record.id)
    return SessionDetail(
        **_summary(record).model_dump(),
        status=status,
        messages=[_message_out(m) for m in session_messages(await store.log.read(record.id))],
        turns=[
            TurnOut(id=t.id, status=t.status, started_at=t.started_at, finished_at=t.finished_at)
            for t in turns
        ],
        totals=Totals(
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            cache_read_tokens=totals.cache_read_tokens,
            cache_write_tokens=totals.cache_write_tokens,
            cost_usd_micros=totals.cost_usd_micros,
        ),
    )


def _message_out(message: MessageDetail) -> MessageOut:
    return MessageOut(
        role=message.role,
        text=message.text,
        turn_id=message.turn_id,
        seq=message.seq,
        complete=message.complete,
        tool_calls=[_call_out(c) for c in message.tool_calls],
        steps=[
            StepOut(
                step_id=s.step_id, goal=s.goal, status=s.status, text=s.text, summary=s.summary,
                error_code=s.error_code, depends_on=list(s.depends_on),
            )
            for s in message.steps
        ],
        stop_reason=message.stop_reason,
    )  # fmt: skip


def _call_out(call: CallDetail) -> ToolCallOut:
    error = call.error
    return ToolCallOut(
        tool_use_id=call.tool_use_id, tool=call.tool, input=call.input, status=call.status,
        output=call.output, output_summary=call.output_summary,
        output_truncated=call.output_truncated, output_chars=call.output_chars,
        error=ToolErrorOut(
            code=str(error.get("code", "error")), message=str(error.get("message", "")),
            hint=error.get("hint"),
        ) if error is not None else None,
        step_id=call.step_id, step_goal=call.step_goal, decision=call.decision,
        undone_by=call.undone_by,
        artifacts=[
            ArtifactRefOut(id=a.artifact_id, version=a.version, type=a.artifact_type, title=a.title)
            for a in call.artifacts
        ],
    )  # fmt: skip


def _event_out(event: StoredEvent) -> EventOut:
    return EventOut(seq=event.seq, type=event.type, data=event.data, created_at=event.created_at)


@get("/v1/sessions/{session_id:str}/events", summary="The raw event log after a sequence number")
async def session_events(
    session_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    after: Annotated[int, int_query(ge=0, description="Events with a greater seq.")] = 0,
    limit: Annotated[int, int_query(ge=1, le=10_000, description="At most this many.")] = 1_000,
) -> EventPage:
    record = await session_for(services, request.user, session_id)
    events = await services.store.log.read(record.id, after=after, limit=limit)
    return EventPage(events=[_event_out(e) for e in events], last_seq=record.last_seq)


@get(
    "/v1/sessions/{session_id:str}/stream",
    summary="Re-attach: events after Last-Event-ID, then live",
)
async def session_stream(
    session_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    after: Annotated[
        int | None, int_query(ge=0, description="Replay events after this seq.")
    ] = None,
    last_event_id: Annotated[
        str | None,
        HeaderParameter(name="Last-Event-ID", schema_extra={"pattern": r"^[0-9]{1,19}$"}),
    ] = None,
) -> Stream:
    record = await session_for(services, request.user, session_id)
    cursor = after
    if last_event_id is not None:
        cursor = event_cursor(last_event_id)
    return sse_stream(services, record.id, after=cursor or 0)


@get("/healthz", summary="Liveness and database reachability")
async def healthz(services: ServicesDep) -> dict[str, str]:
    await services.store.ping()
    return {"status": "ok"}
