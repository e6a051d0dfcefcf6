"""HTTP bodies (pydantic at the edge) and the services every route handler shares."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Request
from litestar.di import NamedDependency
from pydantic import BaseModel, ConfigDict, Field

from context import OUTPUT_CAP_CHARS, CallStatus
from egress import PUBLIC_ONLY, EgressPolicy
from fleet import (
    HANDLE_PATTERN,
    AgentDirectory,
    AgentProfile,
    ApprovalDesk,
    CostGuard,
    RunDispatcher,
)
from store import Store
from stream._auth import Principal, TokenConfig
from stream._bounds import MAX_CONTEXT_KEYS, UUID_PATTERN, MessageText
from stream._client import (
    BUILDOS_FIELDS,
    ENTITY_ID_PATTERN,
    ENTITY_TYPE_PATTERN,
    ClientContextIn,
    ProjectFocus,
    merged_context,
)
from stream._deliveries import DeliveryLimits
from tools import McpPool, OpenApiProvider  # at run time: Litestar reads Services' fields
from turn import ModelResolver, TurnKit, TurnRunner


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamConfig:
    """The HTTP layer's knobs (built from Bosun's settings by the composition root)."""

    tokens: TokenConfig
    max_body_bytes: int = 64 * 1024
    max_message_chars: int = 32_000
    keepalive_s: float = 15.0
    turn_timeout_s: float = 300.0
    sessions_page_size: int = 50
    shutdown_grace_s: float = 5.0
    lease_s: float = 15.0  # a turn's lease: how long a dead worker's turn waits for takeover
    pending_ttl_s: float = 86_400.0  # a suspended turn's questions expire after this
    requests_per_minute: int = 20
    """Turn-starting requests (and plans) per user and minute, across workers; 0: no limit."""
    tokens_per_minute: int = 30_000
    """Model tokens per user in the last minute above which no new turn starts; 0: none."""
    agent_rate_limits: bool = True
    """Hold each agent to its ``runs_per_minute`` (off: ``serve --dev`` with scripts)."""
    metrics: bool = False
    """Serve ``GET /metrics`` (unauthenticated: keep it on a private network); else 404."""
    webhook_retry_s: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
    """Seconds before each retry of a failed webhook delivery; then it is failed."""
    webhook_timeout_s: float = 10.0
    """How long one webhook delivery attempt may take."""
    webhook_deliveries: bool = True
    """Whether this process sends webhook deliveries (other workers may, if it does not)."""
    webhook_max_per_org: int = 20
    """Webhooks one org may have; one more is 409 ``webhook_limit``."""
    webhook_limits: DeliveryLimits = field(default_factory=DeliveryLimits)
    """How much of the delivery worker one org or webhook may take (concurrency, breaker)."""
    mcp_stdio_commands: tuple[str, ...] = ()
    """The programs stdio MCP toolsets may run (run with this server's rights); none: off."""
    mcp_max_tools: int = 500
    """Tools offered per MCP toolset; the rest are skipped."""
    mcp_connect_timeout_s: float = 10.0
    """Connecting to an MCP server and listing its tools."""
    egress: EgressPolicy = PUBLIC_ONLY
    """Which addresses webhooks and MCP servers may reach (public ones only by default)."""


class SessionLocks:
    """One lock per session, so a session's user actions (resolving pending tool calls and
    resuming the turn) happen one at a time in this process. Unused locks are dropped."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock


@dataclass(frozen=True, kw_only=True, slots=True)
class Services:
    store: Store
    runner: TurnRunner
    models: ModelResolver
    config: StreamConfig
    kit: TurnKit
    agents: AgentDirectory
    runs: RunDispatcher
    costs: CostGuard
    approvals: ApprovalDesk
    mcp: McpPool
    openapi: OpenApiProvider
    locks: SessionLocks = field(default_factory=SessionLocks)


AuthedRequest = Request[Principal, Any, Any]
"""A request that passed the bearer-token middleware: ``request.user`` is its principal."""
ServicesDep = NamedDependency[Services]
"""How a route handler asks for the shared services."""


class RequestBody(BaseModel):
    """A JSON request body: unknown fields are refused, and its OpenAPI schema is pydantic's
    own JSON schema (``_openapi``), so what is documented is what is validated."""

    model_config = ConfigDict(extra="forbid")


AnswerModelSpec = Annotated[
    str | None,
    Field(
        max_length=200,
        description="The model of every role that answers (the plan's steps, the merge, a "
        "direct answer), over the agent's: a spec among the server's allowed ones (else 422 "
        "model_not_allowed).",
    ),
]
"""A chat body's ``model`` (the native, AI SDK and AG-UI bodies say it the same way)."""
PlannerModelSpec = Annotated[
    str | None,
    Field(
        max_length=200,
        description="The planner's model, over the agent's and the server's: a spec among the "
        "server's allowed ones (else 422 model_not_allowed); omit to keep the planner's own.",
    ),
]
"""A chat body's ``planner_model``."""


class ProtocolBody(BaseModel):
    """A chat protocol's JSON body (the AI SDK's, AG-UI's): its clients send fields Bosun
    does not read, so unknown fields are accepted (and ignored), but its OpenAPI schema is
    pydantic's own, as a ``RequestBody``'s is."""

    model_config = ConfigDict(extra="allow")


class ChatRequest(RequestBody):
    message: MessageText = Field(description="The user's message.")
    session_id: str | None = Field(
        default=None, pattern=UUID_PATTERN, description="Continue this session; omit to start one."
    )
    context: ClientContextIn | None = Field(
        default=None,
        description="Where the user is (page, entity, focus, notes) and their locale: every "
        "role's prompt carries it, and sources bound to the entity's type load it.",
    )
    model: AnswerModelSpec = None
    planner_model: PlannerModelSpec = None
    agent: str | None = Field(
        default=None,
        pattern=HANDLE_PATTERN,
        description="The agent to talk to (its handle); omit for the org's default. A "
        "session keeps the agent it started with.",
    )
    context_type: str | None = Field(
        default=None, pattern=ENTITY_TYPE_PATTERN, description="BuildOS: as context.context_type."
    )
    entity_id: str | None = Field(
        default=None, pattern=ENTITY_ID_PATTERN, description="BuildOS: as context.entity_id."
    )
    project_focus: ProjectFocus | None = Field(
        default=None, description="BuildOS: as context.project_focus."
    )

    def client_context(self) -> ClientContextIn | None:
        """``context`` with BuildOS's top-level fields moved in (``context`` wins a tie)."""
        top = {name: getattr(self, name) for name in BUILDOS_FIELDS}
        return merged_context(self.context, top)


class PlanRequest(RequestBody):
    message: MessageText = Field(description="The message to plan, as a user would send it.")
    session_id: str | None = Field(
        default=None, pattern=UUID_PATTERN, description="Plan in this session's context."
    )
    context: ClientContextIn | None = Field(
        default=None, description="The client context, as a chat request's: the planner sees it."
    )


class ChatResponse(BaseModel):
    """A finished turn: ``status`` and ``error`` as its ``done`` and ``error`` events say;
    ``partial`` with ``failed_steps`` when the answer stands without some of its steps;
    ``stop_reason`` as its answer's ``message_done`` says (why a cut answer was cut)."""

    session_id: str
    turn_id: str
    status: str
    answer: str
    events: list[dict[str, Any]]
    usage: dict[str, Any] | None
    error: dict[str, Any] | None = None
    partial: bool = False
    failed_steps: list[dict[str, Any]] = Field(default_factory=list)
    stop_reason: str | None = None


class EventOut(BaseModel):
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime


class SessionSummary(BaseModel):
    id: str
    title: str | None
    agent: str | None = Field(default=None, description="The agent's handle; null: default.")
    last_seq: int
    created_at: datetime
    updated_at: datetime


class SessionPage(BaseModel):
    sessions: list[SessionSummary]
    next_before: datetime | None = Field(
        description="Pass as `before` to get the next page; null on the last page."
    )


class ToolErrorOut(BaseModel):
    code: str = Field(description="A stable error code (API.md), e.g. not_found, rejected_by_user.")
    message: str
    hint: str | None = None


class ArtifactRefOut(BaseModel):
    id: str
    version: int
    type: str
    title: str


class ToolCallOut(BaseModel):
    """A tool call of a message, rebuilt from the log (``context.session_messages``)."""

    tool_use_id: str
    tool: str
    input: dict[str, Any]
    status: CallStatus = Field(
        description="running; ok or error (its result); pending_confirmation, pending_pick "
        "or pending_answer (waiting for the user); rejected (by the user or an approver); "
        "queued_for_approval (deferred: runs once approved, then ok or error); undone (a "
        "write reversed by POST .../undo); expired (its wait ran out); cancelled (its turn "
        "ended without a result)."
    )
    output: Any = Field(
        default=None,
        description=f"The result, when its compact JSON is at most {OUTPUT_CAP_CHARS} "
        "characters; else null and output_truncated (the raw log has it whole).",
    )
    output_summary: str | None = Field(
        default=None, description="When output_truncated: the start of the output's JSON."
    )
    output_truncated: bool = False
    output_chars: int = Field(default=0, description="Length of the output's compact JSON.")
    error: ToolErrorOut | None = None
    step_id: str | None = Field(default=None, description="The plan step it ran in.")
    step_goal: str | None = None
    decision: str | None = Field(
        default=None, description="The user's or approver's answer, if it needed one."
    )
    undone_by: str | None = Field(default=None, description="The undo's tool_use_id.")
    artifacts: list[ArtifactRefOut] = Field(
        default_factory=list, description="Artifacts it created or revised."
    )


class StepOut(BaseModel):
    """A plan step of the message's turn (its calls name it by ``step_id``)."""

    step_id: str
    goal: str
    status: Literal["waiting", "running", "ok", "failed"]
    text: str = Field(description="What the step streamed (text_delta with its step_id).")
    summary: str | None = None
    error_code: str | None = Field(default=None, description="Why a failed step failed.")
    depends_on: list[str] = Field(default_factory=list)


class MessageOut(BaseModel):
    role: str
    text: str
    turn_id: str | None = None
    seq: int = Field(
        default=0, description="The log seq that ended it (its answer's message_done)."
    )
    complete: bool = Field(
        default=True,
        description="false: an assistant message whose answer is not (yet) whole: its turn "
        "made tool calls, then waited for the user, failed or still runs.",
    )
    tool_calls: list[ToolCallOut] = Field(default_factory=list)
    steps: list[StepOut] = Field(
        default_factory=list, description="The plan's steps, on the message its plan began."
    )
    stop_reason: str | None = Field(
        default=None,
        description="Why a complete answer ended (its message_done's): end_turn, or why it "
        "was cut short (max_tokens, max_model_turns, time_limit, turn_budget, max_tool_calls).",
    )


class TurnOut(BaseModel):
    id: str
    status: str
    started_at: datetime
    finished_at: datetime | None


class Totals(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd_micros: int


class SessionDetail(SessionSummary):
    status: str = Field(description="idle, running, or the last turn's final status")
    messages: list[MessageOut]
    turns: list[TurnOut]
    totals: Totals


class OrgKeyIn(RequestBody):
    api_key: str = Field(
        min_length=8,
        max_length=512,
        pattern=r"^[!-~]+$",
        description="The provider API key: printable ASCII, no spaces.",
    )


class OrgKeyOut(BaseModel):
    provider: str
    last4: str = Field(description="The key's last four characters; the key is never shown.")
    updated_at: datetime


class EventPage(BaseModel):
    events: list[EventOut]
    last_seq: int


class AgentIn(AgentProfile, RequestBody):
    """An agent profile as written (``PUT`` replaces the whole profile: a new version)."""


class AgentCreate(AgentIn):
    handle: str = Field(pattern=HANDLE_PATTERN, description="Its name in the org and in URLs.")


class AgentToolsetOut(BaseModel):
    name: str
    state: str = Field(description="connected, down, disabled or not_connected (not tried)")
    error: str | None = Field(description="Why it is down.")


class AgentOut(AgentProfile):
    handle: str
    version: int = Field(description="The profile's version; 0: the built-in default.")
    created_at: datetime | None
    updated_at: datetime | None
    paused_at: datetime | None = Field(
        default=None, description="When the server paused it (its cost limit); null: not."
    )
    paused_reason: str | None = Field(
        default=None, description="Why the server paused it: cost_limit; null: not paused."
    )
    toolsets: list[AgentToolsetOut] = Field(
        default_factory=list,
        description="GET /v1/agents/{handle} only: the org's MCP toolsets its profile names, "
        "with their connection state (a toolset that is down offers no tools).",
    )


class HookOut(BaseModel):
    path: str = Field(description="Where to POST events (Standard Webhooks signatures).")
    secret: str = Field(description="The signing secret (whsec_...): shown this once.")


class RunIn(RequestBody):
    task: MessageText = Field(description="What the agent is to do.")
    context: dict[str, Any] | None = Field(
        default=None,
        max_length=MAX_CONTEXT_KEYS,
        description="Data for the task (shown to the agent as JSON).",
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[ -~]+$",
        description="A retry with the same key returns the first run instead of a second.",
    )


class RunOut(BaseModel):
    run_id: str
    agent: str
    agent_version: int
    status: str = Field(
        description="queued, running, suspended, completed, failed, cancelled or expired"
    )
    trigger: str = Field(
        description="What started it: api, schedule, webhook, or a content event's mention, "
        "reply or subscription."
    )
    task: str
    context: dict[str, Any] | None
    session_id: str
    turn_id: str | None
    user_id: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    trigger_event_id: str | None = Field(
        default=None, description="The content event that started it (POST /v1/events)."
    )
    hops: int = Field(
        default=0,
        description="Content-triggered runs from a person's event to this one (0: none).",
    )


class RunRow(RunOut):
    steps: int = Field(default=0, description="Plan steps that ended.")
    tool_calls: int = Field(default=0, description="Tool calls recorded.")
    cost_usd_micros: int = Field(default=0, description="Model cost so far.")


class RunPage(BaseModel):
    runs: list[RunRow]
    next_before: datetime | None = Field(
        description="Pass as `before` to get the next page; null on the last page."
    )


class RunDetail(RunOut):
    steps: list[dict[str, Any]] = Field(default_factory=list, description="step_completed data")
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    resources: list[dict[str, Any]] = Field(
        default_factory=list, description="Audit rows the run's writes made (what it created)."
    )
    answer: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
