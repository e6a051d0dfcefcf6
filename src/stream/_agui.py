"""AG-UI 1.0 (``@ag-ui/client``'s ``HttpAgent``, CopilotKit, assistant-ui) as a thin
translation of the one event log, in the ``ag-ui-protocol`` package's types and encoder.

A run's ``threadId`` is a thread (``_threads``). A run whose newest message is the user's
starts a turn exactly as ``POST /v1/chat/stream`` does; a run with ``resume`` answers the
interrupts the thread's suspended turn ended with, confirmations through the same path as
``/confirm``, picks as ``/pick`` and questions as the next user message would; a run with
neither re-attaches to the thread's running turn (after a dropped connection). Either way
the reply is one AG-UI run: RUN_STARTED, the turn's tail of the log as AG-UI events
(docs/protocols.md has the mapping), then RUN_FINISHED, whose ``outcome`` carries the
interrupts a suspended turn waits for, or RUN_ERROR; nothing follows either. A turn that
waits for answers spans several runs, so ``runId`` is the client's, echoed (its validation
does not ask for that, the spec does), and Bosun's turn id travels beside it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from litestar import Response, post
from litestar.params import JSONBody
from litestar.response import Stream
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from executors import PendingCall
from fleet import HANDLE_PATTERN
from store import SessionRecord, StoredEvent
from stream._agents import require_answer, require_chat, session_agent
from stream._api import (
    AnswerModelSpec,
    AuthedRequest,
    PlannerModelSpec,
    ProtocolBody,
    Services,
    ServicesDep,
)
from stream._auth import Principal
from stream._bounds import BLANKS, MESSAGE_PATTERN, THREAD_ID_PATTERN, MessageText
from stream._client import MAX_NOTES_CHARS, ClientContextIn
from stream._errors import ApiError
from stream._questions import Waiting, is_pending, waiting_turn
from stream._resolve import ConfirmIn, PickIn, _not_waiting, answer_call
from stream._routes import IdempotencyKey
from stream._sse import KEEPALIVE, SSE_HEADERS
from stream._threads import (
    MAX_BODY_BYTES,
    MAX_MESSAGES,
    MAX_PARTS,
    NO_NUL,
    TEXT_PART,
    kept_text,
    running_turn,
    start_thread_turn,
    thread_session,
    turn_events,
)

if TYPE_CHECKING:  # the ag-ui-protocol package loads with the first run (stream._agui_run)
    from ag_ui.core import Interrupt

    from stream._agui_run import Out, Run

MAX_RESUME = 100
MAX_ID = 200
_T = TypeVar("_T", bound=BaseModel)
Role = Literal["developer", "system", "assistant", "user", "tool", "activity", "reasoning"]


class AgUiPart(BaseModel):
    """A content part; Bosun reads the text of a user message's ``text`` parts."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1, max_length=64)
    text: str | None = Field(default=None, pattern=NO_NUL)


class AgUiToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(max_length=MAX_ID)


class AgUiMessage(BaseModel):
    """A message of the thread as the client has it; a user's has some text."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "if": {"properties": {"role": {"const": "user"}}},
            "then": {
                "required": ["content"],
                "properties": {
                    "content": {
                        "anyOf": [
                            {"type": "string", "pattern": MESSAGE_PATTERN},
                            {"type": "array", "contains": TEXT_PART},
                        ]
                    }
                },
            },
        },
    )

    id: str = Field(max_length=MAX_ID)
    role: Role
    content: str | list[AgUiPart] | dict[str, Any] | None = Field(
        default=None, max_length=MAX_PARTS
    )
    toolCalls: list[AgUiToolCall] | None = Field(default=None, max_length=MAX_PARTS)
    toolCallId: str | None = Field(default=None, max_length=MAX_ID)

    @model_validator(mode="after")
    def _has_text(self) -> AgUiMessage:
        if self.role != "user":
            return self
        content = self.content
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [p.text for p in content if p.type == "text" and p.text is not None]
        if any("\x00" in t for t in texts) or not any(t.strip(BLANKS) for t in texts):
            raise PydanticCustomError(
                "no_text", "a user message needs some text (and no NUL character)"
            )
        return self

    @property
    def text(self) -> str:
        """What the message says, as the protocol's ``contentToText`` reads it."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return ""


class AgUiProps(BaseModel):
    """``forwardedProps``: Bosun reads ``agent``, ``model``, ``planner_model`` (as
    ``POST /v1/chat`` does) and ``context`` (a chat request's client context), and ignores
    the rest."""

    model_config = ConfigDict(extra="allow")

    agent: str | None = Field(
        default=None, pattern=HANDLE_PATTERN, description="The agent a new thread talks to."
    )
    model: AnswerModelSpec = None
    planner_model: PlannerModelSpec = None
    context: ClientContextIn | None = Field(
        default=None, description="The client context, as a chat request's `context`."
    )


class AgUiResume(BaseModel):
    """An answer to one interrupt of the previous run."""

    model_config = ConfigDict(extra="allow")

    interruptId: str = Field(min_length=1, max_length=MAX_ID)
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class AgUiRunIn(ProtocolBody):
    """``RunAgentInput``: ``threadId``, ``runId``, ``messages`` (the newest user message is
    read), ``forwardedProps`` (``agent``, ``model``, ``context``), ``context`` (its
    ``{description, value}`` entries join the client context's notes) and ``resume``;
    ``tools`` and ``state`` are accepted and ignored (Bosun's tools are its own).
    ``tools`` is left undeclared: the OpenAPI states an agent profile's ``tools`` by that
    name, and the body's size and depth bound it as they bound every field."""

    threadId: str = Field(pattern=THREAD_ID_PATTERN, description="The thread: a Bosun session.")
    runId: str = Field(min_length=1, max_length=MAX_ID, description="Echoed in the run's events.")
    messages: list[AgUiMessage] = Field(max_length=MAX_MESSAGES)
    context: list[Any] = Field(default_factory=list, max_length=200)
    state: Any = None
    forwardedProps: AgUiProps | None = None
    resume: list[AgUiResume] | None = Field(
        default=None,
        max_length=MAX_RESUME,
        description="Answers to every interrupt the thread's last run ended with.",
    )


class _ConfirmPayload(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    approved: StrictBool
    reason: str | None = Field(default=None, max_length=2_000)


class _PickPayload(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    id: Annotated[str, Field(min_length=1, max_length=200)]


class _AnswerPayload(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    answer: MessageText


@post(
    "/v1/ag-ui",
    status_code=200,
    summary="AG-UI: run the agent on a thread (a message, or resume its interrupts)",
    media_type="text/event-stream",
    response_description="AG-UI events: `data: {event}` frames, RUN_STARTED to RUN_FINISHED",
    request_max_body_size=MAX_BODY_BYTES,
)
async def ag_ui_run(
    data: JSONBody[AgUiRunIn],
    request: AuthedRequest,
    services: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:  # not ``Stream``: the OpenAPI's SSE schema is Bosun's own framing
    from stream._agui_run import Run  # the ag-ui-protocol package, on the first run

    if data.resume:
        session_id, turn_id, after = await _resume(services, request, data)
    else:
        try:
            session_id, turn_id, after = await _start(services, request, data, idempotency_key)
        except ApiError as exc:
            if exc.code != "turn_in_progress":
                raise
            return _refused(exc)
    run = Run(data.threadId, data.runId, session_id, turn_id)
    run.knows(data.messages)
    headers = {**SSE_HEADERS, "X-Session-Id": session_id, "X-Turn-Id": turn_id}
    return Stream(_frames(services, run, after), media_type="text/event-stream", headers=headers)


def _refused(exc: ApiError) -> Response[bytes]:
    """A message the thread's agent refuses while a turn runs (``turn_in_progress``): the
    409 as the protocol says it, ``RUN_ERROR`` with the code; the running turn's id is in
    ``X-Turn-Id``. No run started, so nothing else is sent."""
    from stream._agui_run import refusal

    return Response(
        content=refusal(exc),
        status_code=exc.status,
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **exc.headers},
    )


def agui_context(context: ClientContextIn | None, entries: list[Any]) -> ClientContextIn | None:
    """``forwardedProps.context`` with AG-UI's own ``context`` entries (``{description,
    value}``, what CopilotKit's readables send) added to its notes as ``description:
    value`` lines, cut to the notes' bound; entries of another shape are ignored."""
    lines = [
        f"{entry['description']}: {entry['value']}"
        for entry in entries
        if isinstance(entry, dict)
        and isinstance(entry.get("description"), str)
        and isinstance(entry.get("value"), str)
    ]
    if not lines:
        return context
    base = context or ClientContextIn()
    notes = "\n".join([*([base.notes] if base.notes else []), *lines])
    if len(notes) > MAX_NOTES_CHARS:
        notes = notes[: MAX_NOTES_CHARS - 1] + "…"
    return base.model_copy(update={"notes": notes})


async def _start(
    services: Services, request: AuthedRequest, data: AgUiRunIn, key: str | None
) -> tuple[str, str, int]:
    """Start the turn the newest user message asks for; without one, the thread's running
    turn (a client re-running its thread after a dropped connection re-attaches)."""
    newest = next(
        (m for m in reversed(data.messages) if m.role not in ("system", "developer")), None
    )
    if newest is not None and newest.role == "user":
        props = data.forwardedProps or AgUiProps()
        options = {
            "agent": props.agent, "model": props.model,
            "planner_model": props.planner_model, "idempotency_key": key,
            "context": agui_context(props.context, data.context),
        }  # fmt: skip
        handle = await start_thread_turn(
            services, request, data.threadId, newest.text, options=options
        )
        return handle.session_id, handle.turn_id, handle.after
    record = await thread_session(services, request.user, data.threadId)
    turn = await running_turn(services, record.id) if record is not None else None
    if record is None or turn is None:
        raise ApiError(
            409,
            "nothing_to_answer",
            "Nothing to run: the newest message is not the user's and no turn runs in this "
            "thread; add a user message, or resume the interrupts the last run ended with",
        )
    return record.id, turn.id, 0


async def _resume(
    services: Services, request: AuthedRequest, data: AgUiRunIn
) -> tuple[str, str, int]:
    """Answer every open interrupt of the thread's suspended turn (``resume`` must name
    each once, and nothing else), then stream the turn on from the first answer."""
    record = await thread_session(services, request.user, data.threadId)
    if record is None:
        raise ApiError(404, "not_found", f"No thread {data.threadId!r} with interrupts to resume")
    session_id = record.id
    waiting = await waiting_turn(services.store, session_id)
    calls = await _open_calls(services, waiting)
    entries = data.resume or []
    for entry in entries:
        if entry.interruptId not in calls:  # answered, expired, superseded or unknown
            raise await _not_waiting(services.store, session_id, entry.interruptId)
    named = [e.interruptId for e in entries]
    missing = [i for i in calls if i not in named]
    if missing or len(set(named)) < len(named):
        raise _invalid_resume(
            "resume must answer every open interrupt exactly once (open: "
            f"{', '.join(calls)}; answered: {', '.join(named)})"
        )
    answers = [(calls[e.interruptId], _answer(e, calls[e.interruptId])) for e in entries]
    assert waiting is not None  # there are open calls
    await _may_resume(services, request.user, record, [a for _, a in answers])
    afters: list[int] = []
    turn_id = waiting.turn.id
    for call, answer in answers:  # questions last: answering them resumes the turn
        if not isinstance(answer, str):
            after, turn_id = await answer_call(
                services, request.user, session_id, call.tool_use_id, answer
            )
            afters.append(after)
    said = list(dict.fromkeys(a for _, a in answers if isinstance(a, str)))
    if said:
        handle = await start_thread_turn(services, request, data.threadId, "\n\n".join(said))
        afters.append(handle.after)
        turn_id = handle.turn_id
    return session_id, turn_id, min(afters)


async def _may_resume(
    services: Services,
    principal: Principal,
    record: SessionRecord,
    answers: list[ConfirmIn | PickIn | str],
) -> None:
    """403 ``forbidden_role`` before any answer is recorded when the agent lets the
    caller answer none of them: its confirmations and picks (``access.answer``) or its
    questions, answered as a chat message (``access.chat``)."""
    agent = await session_agent(services, principal.org_id, record.agent)
    if any(not isinstance(a, str) for a in answers):
        require_answer(agent, principal, session_user=record.user_id)
    if any(isinstance(a, str) for a in answers):
        require_chat(agent, principal)


async def _open_calls(services: Services, waiting: Waiting | None) -> dict[str, PendingCall]:
    """The calls the thread's suspended turn still waits for, by tool use id."""
    if waiting is None:
        return {}
    return {
        c.tool_use_id: c
        for c in waiting.asks
        if await is_pending(services.store, c, waiting.turn.id)
    }


def _answer(entry: AgUiResume, call: PendingCall) -> ConfirmIn | PickIn | str:
    """What a resume entry says for ``call``: an approval (``cancelled`` declines: the
    call never runs), a pick, or a question's answer (the text of a user message)."""
    if call.needs == "confirmation":
        if entry.status == "cancelled":
            return ConfirmIn(approved=False)
        return ConfirmIn(approved=_payload(_ConfirmPayload, entry).approved)
    if entry.status == "cancelled":
        what = "one of its candidates" if call.needs == "pick" else "its answer"
        raise _invalid_resume(
            f"Interrupt {call.tool_use_id!r} cannot be cancelled: resolve it with {what} "
            "(the turn goes on only once it has it)"
        )
    if call.needs == "pick":
        picked = _payload(_PickPayload, entry).id
        if picked not in {c.id for c in call.candidates}:
            ids = ", ".join(repr(c.id) for c in call.candidates)
            raise ApiError(422, "invalid_pick", f"{picked!r} is not one of the candidates ({ids})")
        return PickIn(id=picked)
    return _payload(_AnswerPayload, entry).answer


def _payload(model: type[_T], entry: AgUiResume) -> _T:
    try:
        return model.model_validate(entry.payload)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()
        )
        raise _invalid_resume(f"resume payload of {entry.interruptId!r}: {problems}") from None


def _invalid_resume(message: str) -> ApiError:
    """A resume the thread's open interrupts refuse (what they accept is stated in each
    interrupt's ``responseSchema``, not in this route's)."""
    return ApiError(422, "invalid_resume", message)


async def _frames(services: Services, run: Run, after: int) -> AsyncIterator[bytes]:
    """The run: what the log holds already (a resumed turn's earlier suspensions in it are
    not its end), then live events to the turn's ``done``."""
    log = await services.store.log.read(run.session_id, turn_id=run.turn_id)
    run.prime([e for e in log if e.seq <= after])
    yield run.opening()
    backlog = [e for e in log if e.seq > after]
    if backlog:
        last = len(backlog) - 1
        yield await _translate(
            services, run, [e for i, e in enumerate(backlog) if e.type != "done" or i == last]
        )
        if run.ended:
            return
        after = backlog[-1].seq
    async for batch in turn_events(services, run.session_id, turn_id=run.turn_id, after=after):
        frames = KEEPALIVE if batch is None else await _translate(services, run, batch)
        if frames:
            yield frames
        if run.ended:
            return


async def _translate(services: Services, run: Run, events: Sequence[StoredEvent]) -> bytes:
    out: Out = []
    for event in kept_text(events):
        if event.type == "done":
            status = str(event.data.get("status"))
            asked = await _interrupts(services, run) if status == "suspended" else []
            out += run.finish(event, asked)
        else:
            out += run.write(event)
        if run.ended:
            break
    return run.encode(out)


async def _interrupts(services: Services, run: Run) -> list[Interrupt]:
    """What the suspended turn waits for, as the interrupts its run ends with."""
    from stream._agui_run import interrupt  # loaded with the run

    store = services.store
    waiting = await waiting_turn(store, run.session_id)
    if waiting is None or waiting.turn.id != run.turn_id:
        return []
    ended = _utc(waiting.turn.finished_at or datetime.now(UTC))
    deadline = ended + timedelta(seconds=services.config.pending_ttl_s)
    found = []
    for call in (await _open_calls(services, waiting)).values():
        expires = deadline
        if call.needs == "confirmation":
            approval = await store.approvals.for_call(run.turn_id, call.tool_use_id)
            if approval is not None:
                expires = min(expires, _utc(approval.expires_at))
        found.append(interrupt(call, expires))
    return found


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
