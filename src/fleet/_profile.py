"""An agent profile: who the agent is, which models it runs on, what it may do, its limits.

Profiles are data an org's owner or staff write (the API, ``bosun agents apply``); the
server's policy bounds them: tools it always allows, tools no profile may grant, and the
model specs it offers. A profile that breaks the policy is refused whole, with the first
problem as a stable code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from fleet._schedule import schedule_problem
from store import ApprovalMode
from tools import COMMUNICATION_TOOLS, Capabilities, ToolRegistry, UserRole

HANDLE_PATTERN = r"^[a-z][a-z0-9_-]{1,39}$"
MCP_GRANT_PATTERN = r"^[a-z][a-z0-9_]{0,39}\.(\*|[a-z][a-z0-9_]{0,63})$"
"""A grant of an MCP toolset's tools: ``toolset.*`` or ``toolset.tool``."""
_GRANT = re.compile(MCP_GRANT_PATTERN)
DEFAULT_HANDLE = "default"
"""The org's default agent: today's behaviour until an owner saves a profile under it."""
MAX_STEPS = 50
DoubleTexting = Literal["reject", "enqueue", "interrupt"]
"""What a message sent while a turn runs in its session does (one turn runs at a time)."""
ProfileCode = Literal[
    "tool_blocked",
    "unknown_tool",
    "model_not_allowed",
    "invalid_schedule",
    "unknown_source",
    "agent_exists",
    "default_agent",
    "unknown_role",
]


def _whole_number(value: object) -> object:
    """JSON has one number type: ``50.0`` is the integer 50 (strict validation would
    refuse it as a float); any other value is left to the int validator."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]


class ProfileModels(BaseModel):
    """Model specs per role (``provider:model``); unset roles use the server's defaults."""

    model_config = ConfigDict(extra="forbid")

    planner: str | None = None
    executor: str | None = None
    merger: str | None = None
    summariser: str | None = None

    def specs(self) -> dict[str, str]:
        return {role: spec for role, spec in self.model_dump().items() if spec}


class ProfileLimits(BaseModel):
    """Bounds of one run (and of each chat turn) of the agent."""

    model_config = ConfigDict(extra="forbid")

    max_steps: WholeNumber = Field(
        default=30, ge=1, le=MAX_STEPS, description="Model turns per run."
    )
    max_tool_calls: Annotated[int, Field(ge=0, le=500), BeforeValidator(_whole_number)] | None = (
        None
    )
    wall_time_s: float | None = Field(default=None, gt=0, le=3600)
    budget_usd: float | None = Field(default=None, gt=0, le=1000)
    max_iterations: WholeNumber = Field(
        default=10,
        ge=1,
        le=MAX_STEPS,
        description=(
            "A forced_tools loop's model calls before it stops with max_iterations (counted "
            "afresh when the user answers a question)."
        ),
    )


ROLES: tuple[str, ...] = get_args(UserRole)
"""The roles of a user in an org (``tools.UserRole``): owner, staff, member."""
# The schema lists the roles; validation leaves an unknown one to the policy (422).
_Role = Annotated[str, Field(min_length=1, max_length=40, json_schema_extra={"enum": [*ROLES]})]
RoleList = Annotated[list[_Role], Field(max_length=len(ROLES))]


class ProfileAccess(BaseModel):
    """Who may act with the agent, by their role in the org (owner, staff, member)."""

    # Roles are strings, not ``UserRole``: an unknown one is the policy's 422
    # ``unknown_role``, like the other profile problems, not a body validation error.

    model_config = ConfigDict(extra="forbid")

    chat: RoleList = Field(
        default_factory=lambda: list(ROLES),
        description="Roles that may talk to it: chat turns (and the answers to its questions, "
        "which are chat messages) and background runs. Default: every role.",
    )
    answer: RoleList = Field(
        default_factory=lambda: list(ROLES),
        description="Roles that may answer its confirmations and picks (/confirm, /pick, the "
        "chat protocols' answers, the approval inbox). A member only ever answers in their "
        "own sessions (they see no other), so the default is the session's own user, owners "
        "and staff.",
    )

    def may_chat(self, role: str) -> bool:
        return role in self.chat

    def may_answer(self, role: str, *, own_session: bool) -> bool:
        """Whether ``role`` may answer a call in a session; a member only in their own."""
        return role in self.answer and (own_session or role != "member")


class ProfileSchedule(BaseModel):
    """A cron schedule: every tick (UTC) queues one run of ``task``."""

    model_config = ConfigDict(extra="forbid")

    cron: str = Field(
        min_length=9, max_length=100, description="Five cron fields, UTC: '0 9 * * 1-5'."
    )
    task: str = Field(min_length=1, max_length=8000)
    context: dict[str, Any] | None = Field(default=None, max_length=64)


class ProfileCost(BaseModel):
    """What the agent may spend on models per period (UTC), beyond the org's daily cap."""

    model_config = ConfigDict(extra="forbid")

    alert_thresholds_usd: list[Annotated[float, Field(ge=0.000001, le=1_000_000)]] = Field(
        default_factory=lambda: [1.0, 5.0, 10.0, 50.0],
        max_length=20,
        description="Spends (USD) that each fire one cost_alert notification per period.",
    )
    limit_usd: float | None = Field(
        default=None,
        ge=0.000001,  # a micro-dollar: what spend is counted in
        le=1_000_000,
        description="At this spend in the period the agent pauses itself (cost_limit); unset: "
        "never.",
    )
    period: Literal["day", "month"] = Field(
        default="month", description="What the thresholds and the limit count: a UTC day or month."
    )


class ProfileTriggers(BaseModel):
    """How far content events (mentions, replies, subscriptions) may chain runs of it."""

    model_config = ConfigDict(extra="forbid")

    max_hops: WholeNumber = Field(
        default=3,
        ge=1,
        le=10,
        description="Runs between a person's event and a run of this agent, at most: an "
        "agent's event carries its run's hops, and the run it starts one more.",
    )
    cooldown_s: WholeNumber = Field(
        default=60,
        ge=0,
        le=86_400,
        description="After an event on a resource starts a run of it, further events on "
        "that resource start none for this many seconds.",
    )


class AgentProfile(BaseModel):
    """What an org's owner or staff say about one agent (stored as a version)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80)
    identity_prompt: str = Field(default="", max_length=8000)
    models: ProfileModels = Field(default_factory=ProfileModels)
    tools: list[str] | None = Field(
        default=None,
        max_length=200,
        description="Tools it may use (names or router.*); unset: every grantable tool.",
    )
    approvals: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="Tools whose calls wait for a human even where the tool does not ask.",
    )
    approval_modes: dict[str, ApprovalMode] = Field(
        default_factory=dict,
        max_length=200,
        description=(
            "How a call needing approval waits, per tool (or router.*): 'suspend' (the turn "
            "waits for the answer) or 'defer' (queued; the turn goes on). Unset: chats "
            "suspend, background runs defer."
        ),
    )
    approval_ttl_s: float = Field(
        default=86_400.0,
        ge=1,
        le=30 * 86_400,
        description="An approval not answered within this many seconds expires (never runs).",
    )
    limits: ProfileLimits = Field(default_factory=ProfileLimits)
    loop: Literal["default", "forced_tools"] = Field(
        default="default",
        description=(
            "default: tools are optional and the answer is free text. forced_tools: every "
            "model call must call a tool; the agent talks only through message_notify_user "
            "and message_ask_user (always offered) and ends with agent_idle."
        ),
    )
    runs_per_minute: WholeNumber = Field(default=3, ge=1, le=60, description="Trigger rate limit.")
    paused: bool = False
    access: ProfileAccess = Field(
        default_factory=ProfileAccess,
        description="Who may chat with it and who may answer its confirmations and picks, "
        "by role (owner, staff, member); anyone else is refused 403 forbidden_role.",
    )
    cost: ProfileCost = Field(
        default_factory=ProfileCost, description="Cost alerts and the cost limit (auto-pause)."
    )
    schedule: ProfileSchedule | None = Field(
        default=None, description="Queue a run on every tick of a cron expression (UTC)."
    )
    user_data: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list,
        max_length=20,
        description=(
            "Per-user context sources (e.g. members.profile) fetched afresh on every model "
            "call into the user-data block, the prompt's third cache breakpoint."
        ),
    )
    double_texting: DoubleTexting = Field(
        default="reject",
        description=(
            "A message sent while a turn runs in its session: 'reject' (409 "
            "turn_in_progress), 'enqueue' (it runs once that turn ends) or 'interrupt' (that "
            "turn stops, its answer so far kept, and this one runs)."
        ),
    )
    parent: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description=(
            "The user of the org who owns the agent: they see and edit it, answer its "
            "approvals, get its notices, see its runs and costs; other members see none "
            "of it. Unset: the org's agent (owners and staff manage it)."
        ),
    )
    triggers: ProfileTriggers = Field(
        default_factory=ProfileTriggers,
        description="Limits on runs the host app's content events start (no loops).",
    )
    webhook_task: str = Field(
        default="Handle the event in the context.",
        min_length=1,
        max_length=8000,
        description="The task of a run an inbound webhook starts (its payload is the context).",
    )

    def routers(self) -> tuple[str, ...]:
        """The routers its tool grants name (``x`` of ``x.*`` and ``x.y``), in order: of
        the org's MCP toolsets, only these are ever connected to and offered."""
        grants = self.tools or ()
        return tuple(dict.fromkeys(entry.split(".", 1)[0] for entry in grants if "." in entry))


class ProfileError(ValueError):
    """A profile the server's policy refuses: ``code`` is stable, ``message`` says why."""

    def __init__(self, code: ProfileCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    """The server's bounds on every profile: its tools, the always-allowed and
    always-blocked ones, and the model specs it offers."""

    tools: ToolRegistry = field(default_factory=ToolRegistry)
    always_allowed: frozenset[str] = frozenset()
    always_blocked: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    user_data: frozenset[str] = frozenset()  # the server's per-user sources

    def check(self, profile: AgentProfile, toolsets: Iterable[str] = ()) -> None:
        """Raise ``ProfileError`` for the first thing the policy refuses. ``toolsets``: the
        org's MCP toolsets, whose tools (``name.*``, ``name.tool``) a profile may name too
        (what they are is known only once connected)."""
        routers = frozenset(toolsets)
        for entry in [*(profile.tools or ()), *profile.approvals, *profile.approval_modes]:
            mcp = _GRANT.match(entry) and entry.split(".", 1)[0] in routers
            if not mcp:
                self._known(entry)
        for entry in profile.tools or ():
            if covers(self.always_blocked, entry):
                raise ProfileError(
                    "tool_blocked", f"{entry} is blocked on this server: no agent may use it"
                )
        _check_access(profile.access)
        cron = profile.schedule.cron if profile.schedule is not None else None
        if cron is not None and (problem := schedule_problem(cron, datetime.now(UTC))):
            raise ProfileError("invalid_schedule", problem)
        for name in profile.user_data:
            if name not in self.user_data:
                offered = ", ".join(sorted(self.user_data)) or "none"
                raise ProfileError(
                    "unknown_source",
                    f"No per-user source {name!r} here (user-data sources: {offered})",
                )
        for role, spec in profile.models.specs().items():
            if spec not in self.models:
                offered = ", ".join(sorted(self.models)) or "none"
                raise ProfileError(
                    "model_not_allowed",
                    f"The {role} model {spec!r} is not offered here (offered: {offered})",
                )

    def _known(self, entry: str) -> None:
        router = entry.removesuffix(".*")
        names = [*self.tools.names(), *COMMUNICATION_TOOLS]  # offered to forced agents
        if router == entry:
            known = entry in names
        else:
            known = any(n.startswith(f"{router}.") for n in names)
        if not known:
            raise ProfileError("unknown_tool", f"No tool or router named {entry!r} here")

    def capabilities(self, profile: AgentProfile, *, background: bool = False) -> Capabilities:
        """What the profile may do on this server, and how its approvals wait (unless the
        profile says per tool: a chat suspends, a background run defers)."""
        allow = None if profile.tools is None else frozenset(profile.tools) | self.always_allowed
        modes = profile.approval_modes
        return Capabilities(
            allow=allow,
            blocked=self.always_blocked,
            confirm=frozenset(profile.approvals),
            defer=frozenset(t for t, mode in modes.items() if mode == "defer"),
            suspend=frozenset(t for t, mode in modes.items() if mode == "suspend"),
            mode="defer" if background else "suspend",
            approval_ttl_s=profile.approval_ttl_s,
        )


def _check_access(access: ProfileAccess) -> None:
    for kind, roles in (("chat", access.chat), ("answer", access.answer)):
        for role in roles:
            if role not in ROLES:
                known = ", ".join(ROLES)
                message = f"access.{kind} names {role!r}, which is not a role ({known})"
                raise ProfileError("unknown_role", message)


def covers(entries: frozenset[str], entry: str) -> bool:
    """Whether ``entries`` block what ``entry`` grants by name: the tool itself or its
    whole router. (A router grant that includes a blocked tool stays legal: the blocked
    tool stays blocked.)"""
    return entry in entries or f"{entry.split('.', 1)[0]}.*" in entries
