"""The turn events: one typed record per thing that happens in a session.

The same objects are persisted in the append-only log, streamed as SSE frames, replayed
to rebuild a conversation and read by reports, so their names and fields are public API
(see API.md). Each is a frozen, keyword-only dataclass tagged by a literal ``type``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

ModelRole = Literal["planner", "executor", "merger", "summariser"]
"""The part a model plays in a turn (settings pick a model per role; usage is by role)."""
TurnStatus = Literal["completed", "suspended", "failed", "cancelled", "expired", "superseded"]
Unanswered = Literal["expired", "superseded"]
"""How a suspended turn ends without its answers: they came too late, or a newer message
made them moot."""
Strategy = Literal["simple", "tool", "complex"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionStarted:
    session_id: str
    turn_id: str
    type: Literal["session_started"] = "session_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class UserMessage:
    message_id: str
    text: str
    type: Literal["user_message"] = "user_message"


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanStep:
    id: str
    goal: str
    tools: list[str] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    max_tool_calls: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanCreated:
    """The planner's decision; ``fallback`` says why the safe fallback plan was used."""

    strategy: Strategy
    reasoning: str
    steps: list[PlanStep] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    executors: int = 1
    repaired: bool = False
    fallback: str | None = None
    # The model spec each role of the turn runs with (``planner``, when one planned;
    # ``executor``, ``merger``): what a request's ``model`` or ``planner_model`` picked.
    models: dict[str, str] | None = None
    type: Literal["plan_created"] = "plan_created"


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextLoaded:
    """A context source loaded into the session's knowledge (append-only), or failed."""

    source: str
    tokens: int
    truncated: bool
    params: dict[str, Any] = field(default_factory=dict)
    text: str | None = None  # what the model sees of it; later turns reuse it
    error: str | None = None
    budget: int | None = None  # the source's own budget, when it declares one
    cuts: list[dict[str, Any]] | None = None  # what fitting it into that budget cut
    type: Literal["context_loaded"] = "context_loaded"


@dataclass(frozen=True, kw_only=True, slots=True)
class HistorySummarised:
    """Older conversation compressed into ``summary``; replays start from the latest one."""

    summary: str
    up_to_seq: int
    # What the summary stands for (its predecessors' share included): budget reports read
    # them here, since a turn no longer reads the messages before its anchor.
    messages: int | None = None
    tokens: int | None = None
    type: Literal["history_summarised"] = "history_summarised"


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextBudget:
    """How one model call's context was fitted into its role budget (for budget reports;
    chat clients may ignore it)."""

    role: str
    report: dict[str, Any]
    step_id: str | None = None
    type: Literal["context_budget"] = "context_budget"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    step_id: str
    executor_id: str
    type: Literal["step_started"] = "step_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepError:
    """Why a step did not do its work: the provider's ``provider_*`` code when its model
    failed, else ``step_timed_out``, ``step_overran`` or ``step_skipped``."""

    code: str
    message: str
    retry_after_s: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCompleted:
    """A step ended. ``ok`` is false when it could not do its work (``error`` says why);
    ``failed_tool_calls`` of its ``tool_calls`` failed, whether or not it still did."""

    step_id: str
    executor_id: str
    ok: bool
    summary: str
    tool_calls: int
    tokens: int
    duration_ms: int
    failed_tool_calls: int = 0
    error: StepError | None = None
    type: Literal["step_completed"] = "step_completed"


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A piece of streamed text; ``step_id`` is absent for the final answer."""

    delta: str
    step_id: str | None = None
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageReset:
    """Text streamed for the message ``message_id`` (the answer; with ``step_id``, that
    step's text) from the log's ``from_seq`` on was abandoned: the worker streaming it died
    and the turn's new attempt writes that part again, right after this event. A client
    drops those ``text_delta``s (this turn's, of the same ``step_id``, ``seq >= from_seq``)
    so the text is shown once. ``reason`` is ``takeover``, the one way text is re-streamed
    (provider retries happen before a stream starts)."""

    message_id: str
    reason: Literal["takeover"]
    from_seq: int
    step_id: str | None = None
    type: Literal["message_reset"] = "message_reset"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolError:
    code: str
    message: str
    hint: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStarted:
    tool_use_id: str
    tool: str
    input: dict[str, Any]
    step_id: str | None = None
    type: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCompleted:
    tool_use_id: str
    ok: bool
    output: Any = None
    error: ToolError | None = None
    inverse_available: bool = False
    type: Literal["tool_completed"] = "tool_completed"


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactSaved:
    """A tool created an artifact (``version`` 1) or revised one (a new version; the old
    ones stay readable). The payload is not in the event: ``GET
    /v1/sessions/{id}/artifacts/{artifact_id}`` has it, and ``agent_message`` carries it
    when the agent delivers the artifact."""

    artifact_id: str
    version: int
    artifact_type: str
    schema_version: str
    title: str
    summary: str
    tool_use_id: str
    step_id: str | None = None
    type: Literal["artifact"] = "artifact"


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentMessage:
    """The agent spoke to the user through ``message_notify_user``. ``artifact`` is the
    delivered artifact (``id``, ``version``, ``type``, ``schema_version``, ``title``,
    ``summary``, ``payload``) when ``artifact_id`` named one of the session's; an unknown id
    leaves it out and sets ``warning``. ``in_answer``: the text is also streamed as the
    turn's answer (``text_delta``: a forced-tools agent speaks only so), so a client that
    shows the answer need not show it twice."""

    text: str
    tool_use_id: str
    artifact_id: str | None = None
    artifact: dict[str, Any] | None = None
    warning: str | None = None
    step_id: str | None = None
    in_answer: bool | None = None
    type: Literal["agent_message"] = "agent_message"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayViolation:
    """A transcript about to be sent broke the tool-call pairing and was repaired first:
    ``tool_use_ids`` are calls that had no result and got a synthetic error result
    (``replay_integrity_violation``); ``dropped`` are results that answered no call."""

    tool_use_ids: list[str]
    dropped: list[str] = field(default_factory=list)
    step_id: str | None = None
    type: Literal["replay_violation"] = "replay_violation"


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmationPending:
    tool_use_id: str
    tool: str
    input: dict[str, Any]
    confirm: Literal["destructive", "always"]
    type: Literal["confirmation_pending"] = "confirmation_pending"


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    id: str
    label: str
    sublabel: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DisambiguationPending:
    tool_use_id: str
    kind: str
    prompt: str
    candidates: list[Candidate]
    type: Literal["disambiguation_pending"] = "disambiguation_pending"


@dataclass(frozen=True, kw_only=True, slots=True)
class QuestionPending:
    """A forced-tools agent asked the user (``message_ask_user``): the turn waits, and the
    user's next message in the session is the answer (``options`` are suggestions)."""

    tool_use_id: str
    question: str
    options: list[str] = field(default_factory=list)
    type: Literal["question_pending"] = "question_pending"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResolved:
    """A user answered a pending call: ``approved`` or ``rejected`` a confirmation,
    ``picked`` candidate ``picked_id``, or ``answered`` a question with their next message.
    The turn resumes once every pending call is."""

    tool_use_id: str
    decision: Literal["approved", "rejected", "picked", "answered"]
    picked_id: str | None = None
    type: Literal["tool_resolved"] = "tool_resolved"


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalResolved:
    """A queued (deferred) call's approval ended, outside any turn: ``approved`` and run
    (``ok``, with its ``output`` or ``error``), ``rejected`` or ``expired`` (never run).
    ``tool_use_id`` is the call the model made, whose result said it was queued."""

    approval_id: str
    tool_use_id: str
    tool: str
    decision: Literal["approved", "rejected", "expired"]
    ok: bool | None = None
    output: Any = None
    error: ToolError | None = None
    reason: str | None = None
    type: Literal["approval_resolved"] = "approval_resolved"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnSuspended:
    """Operator-only (never streamed): what a suspended turn resumes from. ``plan`` is the
    plan being run, ``results`` its finished steps, ``steps`` the suspended ones (their
    transcripts, pending calls and counters), ``not_started`` the ids of the rest. Written
    and read by ``executors.suspension_event`` / ``executors.restore``."""

    plan: dict[str, Any]
    results: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    not_started: list[str] = field(default_factory=list)
    type: Literal["turn_suspended"] = "turn_suspended"


INTERNAL_EVENTS = frozenset({"turn_suspended"})
"""Event types kept in the log for the server and operators, left out of SSE streams."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageDone:
    message_id: str
    stop_reason: str
    type: Literal["message_done"] = "message_done"


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # the part of cache_write_tokens with a 1-hour TTL
    cost_usd_micros: int = 0
    cache_hit_ratio: float | None = None  # cache_read / (cache_read + input)
    by_role: dict[str, dict[str, int]] = field(default_factory=dict)
    calls: list[dict[str, Any]] | None = None  # per model call, in order, with its ratio
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, kw_only=True, slots=True)
class Error:
    """A classified failure; ``code`` is one of the stable codes in API.md."""

    code: str
    message: str
    trace_id: str
    retry_after_s: float | None = None  # when the provider said how long to wait
    type: Literal["error"] = "error"


@dataclass(frozen=True, kw_only=True, slots=True)
class FailedStep:
    """A step of a partial answer that did not do its work, and why (see ``StepError``)."""

    step_id: str
    code: str
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Done:
    """Always the last event of a turn. A ``completed`` turn whose plan had steps that
    failed is ``partial``: its answer stands on the others, ``failed_steps`` say which."""

    session_id: str
    status: TurnStatus
    partial: bool | None = None
    failed_steps: list[FailedStep] | None = None
    type: Literal["done"] = "done"


Event = Annotated[
    SessionStarted
    | UserMessage
    | PlanCreated
    | ContextLoaded
    | HistorySummarised
    | ContextBudget
    | StepStarted
    | StepCompleted
    | TextDelta
    | MessageReset
    | ToolStarted
    | ToolCompleted
    | ArtifactSaved
    | AgentMessage
    | ReplayViolation
    | ConfirmationPending
    | DisambiguationPending
    | QuestionPending
    | ToolResolved
    | ApprovalResolved
    | TurnSuspended
    | MessageDone
    | Usage
    | Error
    | Done,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def event_data(event: Event) -> dict[str, Any]:
    """The event as a JSON-ready dict, ``type`` included (the log's ``data`` column).

    Top-level fields that are ``None`` are left out: API.md marks them optional (absent).
    This runs for every streamed delta, so scalar fields skip ``asdict``'s deep copy.
    """
    data: dict[str, Any] = {}
    for name in _field_names(type(event)):
        value = getattr(event, name)
        if value is not None:
            data[name] = _plain(value)
    return data


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


_SCALARS = frozenset({str, int, float, bool})


def _plain(value: Any) -> Any:
    """A deep copy of containers and nested dataclasses, as ``asdict`` would make."""
    if type(value) in _SCALARS:  # most values: an exact type test costs a tenth of isinstance
        return value
    if isinstance(value, str | int | float | bool):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def parse_event(data: dict[str, Any]) -> Event:
    """Rebuild a typed event from the log's ``data`` column."""
    return EVENT_ADAPTER.validate_python(data)
