"""The Vercel AI SDK's UI Message Stream (npm ``ai``: ``useChat``, ``DefaultChatTransport``)
as a thin translation of the one event log.

The chat ``id`` is a thread (``_threads``). A POST whose last message is the user's starts
a turn exactly as ``POST /v1/chat/stream`` does; one whose last message is the assistant's
message answers the calls the chat's turn waits for (an ``approval-responded`` tool part,
the output of the client-side tool ``choose_entity``) through the same path as
``/confirm`` and ``/pick``. Either way the reply is the turn's tail of the log as one
assistant message's parts (docs/protocols.md has the mapping). The client validates every
part and, up to ai 6.0.119 and in ai 5, refuses unknown fields too: only parts and fields
that every one of them knows are sent (no approval parts to a client that declares ai 5).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from litestar import Response, get, post
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, JSONBody
from litestar.response import Stream
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fleet import HANDLE_PATTERN
from store import StoredEvent
from stream._api import (
    AnswerModelSpec,
    AuthedRequest,
    PlannerModelSpec,
    ProtocolBody,
    Services,
    ServicesDep,
)
from stream._bounds import BLANKS, THREAD_ID_PATTERN, int_query
from stream._client import ClientContextIn
from stream._errors import ApiError
from stream._questions import is_pending, waiting_turn
from stream._resolve import ConfirmIn, PickIn, answer_call
from stream._routes import IdempotencyKey
from stream._sse import KEEPALIVE, SSE_HEADERS
from stream._threads import (
    MAX_BODY_BYTES,
    MAX_MESSAGES,
    MAX_PARTS,
    NO_NUL,
    TEXT_PART,
    bad_request,
    kept_text,
    running_turn,
    start_thread_turn,
    thread_session,
    turn_events,
)

PICK_TOOL = "choose_entity"
"""The client-side tool a pick is asked with; its output ``{"id"}`` is the answer."""
AI_SDK_HEADERS = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}
DONE_FRAME = b"data: [DONE]\n\n"
STREAM_DESCRIPTION = "UI message stream: `data: {part}` frames, then `data: [DONE]`"
_FINISH_REASONS = {"completed": "stop", "suspended": "tool-calls", "failed": "error"}

Part = dict[str, Any]


class ToolApproval(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(max_length=200)
    approved: StrictBool | None = None
    reason: str | None = Field(default=None, max_length=2_000)


class UIPart(BaseModel):
    """A part of a UI message: Bosun reads text and tool parts' answers, and accepts the
    rest unread."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1, max_length=200)
    text: str | None = Field(default=None, pattern=NO_NUL)
    toolCallId: str | None = Field(default=None, max_length=200)
    state: str | None = Field(default=None, max_length=64)
    approval: ToolApproval | None = None
    output: Any = None


class UIMessage(BaseModel):
    """A UI message; a user's has some text (a ``text`` part that is not only whitespace)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "if": {"properties": {"role": {"const": "user"}}},
            "then": {"properties": {"parts": {"contains": TEXT_PART}}},
        },
    )

    id: str = Field(max_length=200)
    role: Literal["system", "user", "assistant"]
    parts: list[UIPart] = Field(max_length=MAX_PARTS)
    metadata: Any = None

    @model_validator(mode="after")
    def _has_text(self) -> UIMessage:
        if self.role == "user" and not any(
            p.type == "text" and p.text and p.text.strip(BLANKS) for p in self.parts
        ):
            raise PydanticCustomError(
                "no_text", "a user message needs a text part with some text in it"
            )
        return self

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.type == "text" and p.text)


def _one_trigger(trigger: str) -> str:
    if trigger == "regenerate-message":
        raise PydanticCustomError(
            "unsupported_trigger",
            "regenerate-message is not supported: Bosun keeps one history per chat and "
            "cannot take an answer back; send a new message instead",
        )
    if trigger != "submit-message":
        raise PydanticCustomError("unknown_trigger", "must be 'submit-message'")
    return trigger


class AiSdkChatIn(ProtocolBody):
    """``DefaultChatTransport``'s body: ``{id, messages, trigger, messageId}`` and the
    transport's ``body`` fields (``agent``, ``model``, ``planner_model`` and ``context``,
    a chat request's client context, are read, as ``POST /v1/chat`` reads them; others are
    kept out)."""

    id: str = Field(pattern=THREAD_ID_PATTERN, description="The chat: a Bosun session.")
    messages: list[UIMessage] = Field(
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The chat's history; only its last user or assistant message is read.",
    )
    trigger: Annotated[
        str, Field(json_schema_extra={"enum": ["submit-message"]}), AfterValidator(_one_trigger)
    ]
    messageId: str | None = Field(default=None, max_length=200)
    agent: str | None = Field(
        default=None, pattern=HANDLE_PATTERN, description="The agent a new chat talks to."
    )
    model: AnswerModelSpec = None
    planner_model: PlannerModelSpec = None
    context: ClientContextIn | None = Field(
        default=None, description="The client context, as a chat request's `context`."
    )

    @property
    def last(self) -> UIMessage:
        """What the request says: its last message that is not a system message (the
        user's starts a turn; any other answers calls)."""
        return next((m for m in reversed(self.messages) if m.role != "system"), self.messages[-1])


AiSdkVersion = Annotated[
    int | None,
    int_query(
        ge=5,
        le=7,
        description="The client's AI SDK major version (default 6); 5 gets confirmations "
        "as data-confirmation parts, since ai 5 refuses approval parts.",
    ),
]


@post(
    "/v1/ai-sdk/chat",
    status_code=200,
    summary="AI SDK UI Message Stream: send a message or answer a call; stream the reply",
    media_type="text/event-stream",
    response_description=STREAM_DESCRIPTION,
    request_max_body_size=MAX_BODY_BYTES,
)
async def ai_sdk_chat(
    data: JSONBody[AiSdkChatIn],
    request: AuthedRequest,
    services: ServicesDep,
    idempotency_key: IdempotencyKey = None,
    ai_sdk: AiSdkVersion = None,
) -> Response[Any]:
    message = data.last
    if message.role != "user":
        return await _answer(services, request, data.id, message, v5=ai_sdk == 5)
    options = {
        "agent": data.agent, "model": data.model, "planner_model": data.planner_model,
        "context": data.context,
        "idempotency_key": idempotency_key,
    }  # fmt: skip
    try:
        handle = await start_thread_turn(services, request, data.id, message.text, options=options)
    except ApiError as exc:
        if exc.code != "turn_in_progress":
            raise
        return _refused(exc)
    segment = await _segment(services, handle.session_id, handle.turn_id, after=handle.after)
    writer = _Writer(segment.message_id, handle.session_id, handle.turn_id, v5=ai_sdk == 5)
    writer.goals.update(segment.goals)
    return _stream(services, writer, after=segment.after)


@get(
    "/v1/ai-sdk/chat/{chat_id:str}/stream",
    status_code=200,
    summary="AI SDK: resume the chat's running turn (204 when nothing runs)",
    media_type="text/event-stream",
    response_description=STREAM_DESCRIPTION,
    responses={204: ResponseSpec(data_container=None, description="No turn is running")},
)
async def ai_sdk_resume(
    chat_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    ai_sdk: AiSdkVersion = None,
) -> Response[Any]:
    record = await thread_session(services, request.user, chat_id)
    turn = await running_turn(services, record.id) if record is not None else None
    if record is None or turn is None:
        return Response(content=b"", status_code=204)
    session_id = record.id
    segment = await _segment(services, session_id, turn.id, after=None)
    writer = _Writer(segment.message_id, session_id, turn.id, v5=ai_sdk == 5)
    writer.goals.update(segment.goals)
    return _stream(services, writer, after=segment.after)


async def _answer(
    services: Services, request: AuthedRequest, chat_id: str, message: UIMessage, *, v5: bool
) -> Stream:
    """Answer the calls the chat's suspended turn waits for that ``message`` answers, and
    stream the turn on as the continuation of that message."""
    record = await thread_session(services, request.user, chat_id)
    if record is None:
        raise ApiError(404, "not_found", f"No chat {chat_id!r} with a call to answer")
    session_id = record.id
    answers = _answers(message)
    if not answers:
        raise ApiError(
            409,
            "nothing_to_answer",
            "The last message is not the user's, and it answers no tool call (no approval "
            f"response, no {PICK_TOOL} output): send a user message instead",
        )
    waiting = await waiting_turn(services.store, session_id)
    open_ids: set[str] = set()
    if waiting is not None:
        open_ids = {
            c.tool_use_id
            for c in waiting.asks
            if await is_pending(services.store, c, waiting.turn.id)
        }
    # None of them open: answering the first says precisely why (answered, expired...).
    chosen = [a for a in answers if a[0] in open_ids] or answers[:1]
    afters: list[int] = []
    turn_id = ""
    for call, answer in chosen:
        after, turn_id = await answer_call(services, request.user, session_id, call, answer)
        afters.append(after)
    writer = _Writer(message.id, session_id, turn_id, v5=v5)
    writer.known.update(p.toolCallId for p in message.parts if p.toolCallId)
    writer.pickers.update(
        p.toolCallId for p in message.parts if p.toolCallId and p.type == f"tool-{PICK_TOOL}"
    )
    writer.goals.update((await _segment(services, session_id, turn_id, after=min(afters))).goals)
    return _stream(services, writer, after=min(afters))


def _answers(message: UIMessage) -> list[tuple[str, ConfirmIn | PickIn]]:
    """The answers ``message``'s tool parts give: approval responses (ai 6), the
    ``choose_entity`` output ``{id}``, and a dynamic tool's output ``{approved}`` (ai 5)."""
    found: list[tuple[str, ConfirmIn | PickIn]] = []
    for part in message.parts:
        call = part.toolCallId
        answer: ConfirmIn | PickIn | None = None
        if call is None:
            continue
        if part.state == "approval-responded" and part.approval is not None:
            if part.approval.approved is not None:
                answer = ConfirmIn(approved=part.approval.approved)
        elif part.state == "output-available" and isinstance(part.output, dict):
            answer = _output_answer(part.type, part.output)
        if answer is not None:
            found.append((call, answer))
    return found


def _output_answer(part_type: str, output: dict[str, Any]) -> ConfirmIn | PickIn | None:
    if part_type == f"tool-{PICK_TOOL}" and "id" in output:
        try:
            return PickIn.model_validate({"id": output["id"]}, strict=True)
        except ValidationError:
            raise bad_request(
                f"The {PICK_TOOL} output must be {{id}} with one candidate's id (1-200 "
                f"characters), not {output!r:.120}"
            ) from None
    approved = output.get("approved")
    if part_type == "dynamic-tool" and isinstance(approved, bool):
        return ConfirmIn(approved=approved) if output.keys() <= {"approved", "reason"} else None
    return None


@dataclass(frozen=True, slots=True)
class _Segment:
    """The part of a turn one assistant message shows: the log position before it, the
    message's id, and the turn's plan (its steps' goals)."""

    after: int
    message_id: str
    goals: dict[str, str]


async def _segment(
    services: Services, session_id: str, turn_id: str, *, after: int | None
) -> _Segment:
    """The segment a stream from ``after`` shows (``None``: the turn's latest, to resume).

    A turn is one assistant message (its id the turn's), resumed answers included, except
    that each question answered by a user message opens the next message (its id the
    turn's and that user message's seq), which is how the client's history has it.
    """
    log = await services.store.log.read(session_id, turn_id=turn_id)
    goals = {
        str(s["id"]): str(s["goal"])
        for e in log
        if e.type == "plan_created"
        for s in e.data.get("steps") or []
        if isinstance(s, dict) and "id" in s and "goal" in s
    }
    if after is None:
        users = [e.seq for e in log if e.type == "user_message"]
        if len(users) > 1:
            return _Segment(users[-1] - 1, f"{turn_id}:{users[-1]}", goals)
        return _Segment(log[0].seq - 1 if log else 0, turn_id, goals)
    opened = any(e.type == "user_message" and e.seq <= after for e in log)
    return _Segment(after, f"{turn_id}:{after + 1}" if opened else turn_id, goals)


def _refused(exc: ApiError) -> Response[bytes]:
    """A message the chat's agent refuses while a turn runs (``turn_in_progress``): the
    409 as the protocol says it, an ``error`` part (its text leads with the code), so a
    client reading the stream shows why; the running turn's id is in ``X-Turn-Id``."""
    part = {"type": "error", "errorText": f"{exc.code}: {exc.message}"}
    return Response(
        content=_encode([part]) + DONE_FRAME,
        status_code=exc.status,
        media_type="text/event-stream",
        headers={**AI_SDK_HEADERS, **exc.headers},
    )


def _stream(services: Services, writer: _Writer, *, after: int) -> Stream:
    headers = {**AI_SDK_HEADERS, "X-Session-Id": writer.session_id}
    return Stream(_frames(services, writer, after), media_type="text/event-stream", headers=headers)


async def _frames(services: Services, writer: _Writer, after: int) -> AsyncIterator[bytes]:
    """The segment's parts: what the log holds already (a resumed turn's suspension and
    answers in it are not its end), then live ones to the turn's ``done``."""
    yield writer.opening()
    backlog = await services.store.log.read(writer.session_id, after=after, turn_id=writer.turn_id)
    if backlog:
        last = len(backlog) - 1
        yield writer.write([e for i, e in enumerate(backlog) if e.type != "done" or i == last])
        if backlog[-1].type == "done":
            yield DONE_FRAME
            return
        after = backlog[-1].seq
    events = turn_events(services, writer.session_id, turn_id=writer.turn_id, after=after)
    async for batch in events:
        yield KEEPALIVE if batch is None else writer.write(batch)
    yield DONE_FRAME


def _payload(event: StoredEvent) -> dict[str, Any]:
    return {k: v for k, v in event.data.items() if k != "type"}


@dataclass(slots=True)
class _Writer:
    """One response's assistant message: log events in, UI message parts out.

    ``known`` are the tool calls the message has parts for (from the client's copy when
    it is continued); a call answered in this stream (``resolved``) runs again on resume,
    and its second ``tool_started`` is not news. Text parts close before a tool part, and
    the answer's text opens a new step after tools, so the client's "last step is
    complete" checks see the answer, not a finished tool, last.
    """

    message_id: str
    session_id: str
    turn_id: str
    v5: bool = False
    goals: dict[str, str] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    pickers: set[str] = field(default_factory=set)
    resolved: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)
    text_id: str | None = None
    reasoning: dict[str, str] = field(default_factory=dict)
    step_has_tools: bool = False

    def opening(self) -> bytes:
        metadata = {"sessionId": self.session_id, "turnId": self.turn_id}
        start = {"type": "start", "messageId": self.message_id, "messageMetadata": metadata}
        return _encode([start, {"type": "start-step"}])

    def write(self, events: Sequence[StoredEvent]) -> bytes:
        parts: list[Part] = []
        for event in kept_text(events):
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                parts.extend(handler(self, event))
        return _encode(parts)

    def _close_text(self) -> list[Part]:
        if self.text_id is None:
            return []
        part = {"type": "text-end", "id": self.text_id}
        self.text_id = None
        return [part]

    def _close_all(self) -> list[Part]:
        parts = self._close_text()
        parts += [{"type": "reasoning-end", "id": pid} for pid in self.reasoning.values()]
        self.reasoning.clear()
        return parts

    def _open_text(self, seq: int) -> list[Part]:
        """Open the answer's text part, in a new step when this one has tool parts."""
        parts = []
        if self.step_has_tools:
            parts = [*self._close_all(), {"type": "finish-step"}, {"type": "start-step"}]
            self.step_has_tools = False
        self.text_id = f"text-{seq}"
        return [*parts, {"type": "text-start", "id": self.text_id}]

    def _tool(self, call: str, name: str, tool_input: Any, *, server: bool = True) -> list[Part]:
        """A tool part for ``call`` (none when the message has one already)."""
        if call in self.known:
            return []
        self.known.add(call)
        self.step_has_tools = True
        part: Part = {"type": "tool-input-available", "toolCallId": call, "toolName": name}
        part["input"] = tool_input
        if server:  # run by Bosun: the client has nothing to run, nor to answer but approvals
            part |= {"providerExecuted": True, "dynamic": True}
        return [*self._close_text(), part]

    def _data(self, name: str, part_id: str, data: dict[str, Any]) -> list[Part]:
        return [{"type": f"data-{name}", "id": part_id, "data": data}]

    def plan(self, event: StoredEvent) -> list[Part]:
        for step in event.data.get("steps") or []:
            self.goals[str(step["id"])] = str(step["goal"])
        return self._data("plan", "plan", _payload(event))

    def step(self, event: StoredEvent) -> list[Part]:
        step_id = str(event.data["step_id"])
        data = _payload(event)
        if step_id in self.goals:
            data["goal"] = self.goals[step_id]
        parts: list[Part] = []
        if event.type == "step_started":
            data["status"] = "running"
        else:
            data["status"] = "completed" if event.data.get("ok") else "failed"
            reasoning = self.reasoning.pop(step_id, None)
            if reasoning is not None:
                parts.append({"type": "reasoning-end", "id": reasoning})
        return [*parts, *self._data("step", f"step-{step_id}", data)]

    def text(self, event: StoredEvent) -> list[Part]:
        delta, step_id = str(event.data["delta"]), event.data.get("step_id")
        parts: list[Part] = []
        if step_id is None:  # the answer
            if self.text_id is None:
                parts = self._open_text(event.seq)
            return [*parts, {"type": "text-delta", "id": self.text_id, "delta": delta}]
        part_id = self.reasoning.get(str(step_id))  # a step's own text: its reasoning
        if part_id is None:
            part_id = self.reasoning[str(step_id)] = f"reasoning-{step_id}-{event.seq}"
            parts.append({"type": "reasoning-start", "id": part_id})
        return [*parts, {"type": "reasoning-delta", "id": part_id, "delta": delta}]

    def reset(self, event: StoredEvent) -> list[Part]:
        """Text already sent cannot be taken back: what the next attempt streams again goes
        in a part of its own (a resume's replay leaves the abandoned text out)."""
        step_id = event.data.get("step_id")
        if step_id is None:
            return self._close_text()
        part_id = self.reasoning.pop(str(step_id), None)
        return [] if part_id is None else [{"type": "reasoning-end", "id": part_id}]

    def note(self, event: StoredEvent) -> list[Part]:
        """An agent's message to the user (``message_notify_user``) as a text part of its
        own, unless it is streamed as the answer's text too."""
        if event.data.get("in_answer"):
            return []
        parts = [*self._close_text(), *self._open_text(event.seq)]
        parts.append({"type": "text-delta", "id": self.text_id, "delta": str(event.data["text"])})
        return parts + self._close_text()

    def tool_started(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        if call in self.resolved:
            return []
        return self._tool(call, str(event.data["tool"]), event.data.get("input"))

    def tool_completed(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        if call not in self.known or (call in self.denied and not self.v5):
            return []
        server = {} if call in self.pickers else {"providerExecuted": True, "dynamic": True}
        if event.data.get("ok"):
            output = event.data.get("output")
            return [
                {"type": "tool-output-available", "toolCallId": call, "output": output, **server}
            ]
        error = event.data.get("error") or {}
        text = str(error.get("message") or error.get("code") or "The tool failed")
        return [{"type": "tool-output-error", "toolCallId": call, "errorText": text, **server}]

    def confirmation(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        parts = self._tool(call, str(event.data["tool"]), event.data.get("input"))
        if self.v5:
            return parts + self._data("confirmation", f"confirmation-{call}", _payload(event))
        return [*parts, {"type": "tool-approval-request", "approvalId": call, "toolCallId": call}]

    def disambiguation(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        asked = {k: event.data.get(k) for k in ("kind", "prompt", "candidates")}
        self.pickers.add(call)
        return self._tool(call, PICK_TOOL, asked, server=False)

    def question(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        return self._data("question", f"question-{call}", _payload(event))

    def tool_resolved(self, event: StoredEvent) -> list[Part]:
        call = str(event.data["tool_use_id"])
        self.resolved.add(call)
        if event.data.get("decision") != "rejected" or call not in self.known:
            return []
        self.denied.add(call)
        return [] if self.v5 else [{"type": "tool-output-denied", "toolCallId": call}]

    def artifact(self, event: StoredEvent) -> list[Part]:
        return self._data("artifact", f"artifact-{event.data['artifact_id']}", _payload(event))

    def budget(self, event: StoredEvent) -> list[Part]:
        where = event.data.get("step_id") or "turn"
        return self._data("budget", f"budget-{event.data.get('role')}-{where}", _payload(event))

    def usage(self, event: StoredEvent) -> list[Part]:
        return [{"type": "message-metadata", "messageMetadata": {"usage": _payload(event)}}]

    def error(self, event: StoredEvent) -> list[Part]:
        """Why the turn failed, in the message's metadata (its stable ``code``); then the
        ``error`` part that fails the client's request (or ``abort`` for a cancel)."""
        error = _payload(event)
        parts = [
            *self._close_all(),
            {"type": "message-metadata", "messageMetadata": {"error": error}},
        ]
        if error.get("code") in ("cancelled", "interrupted"):  # a newer message cut it
            reason = {} if self.v5 else {"reason": str(error.get("message", "cancelled"))}
            return [*parts, {"type": "abort", **reason}]
        return [*parts, {"type": "error", "errorText": str(error.get("message", "failed"))}]

    def done(self, event: StoredEvent) -> list[Part]:
        status = str(event.data.get("status"))
        metadata: dict[str, Any] = {"status": status}
        if event.data.get("partial"):
            metadata |= {"partial": True, "failedSteps": event.data.get("failed_steps", [])}
        finish: Part = {"type": "finish", "messageMetadata": metadata}
        if not self.v5:
            finish["finishReason"] = _FINISH_REASONS.get(status, "other")
        return [*self._close_all(), {"type": "finish-step"}, finish]


_HANDLERS: dict[str, Callable[[_Writer, StoredEvent], list[Part]]] = {
    "plan_created": _Writer.plan,
    "step_started": _Writer.step,
    "step_completed": _Writer.step,
    "text_delta": _Writer.text,
    "message_reset": _Writer.reset,
    "agent_message": _Writer.note,
    "tool_started": _Writer.tool_started,
    "tool_completed": _Writer.tool_completed,
    "confirmation_pending": _Writer.confirmation,
    "disambiguation_pending": _Writer.disambiguation,
    "question_pending": _Writer.question,
    "tool_resolved": _Writer.tool_resolved,
    "artifact": _Writer.artifact,
    "context_budget": _Writer.budget,
    "usage": _Writer.usage,
    "error": _Writer.error,
    "done": _Writer.done,
}
"""The events a client is shown; any other (``turn_suspended`` and the other operator-only
ones, events added later) is left out."""


def _encode(parts: Sequence[Part]) -> bytes:
    return b"".join(
        f"data: {json.dumps(p, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()
        for p in parts
    )
