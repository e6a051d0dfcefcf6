"""Agent profiles: members read them, owners and staff write them; a person-owned
agent (``parent``) is its parent's too, and no other member's.

``PUT`` replaces a whole profile and saves it as the next version; turns and runs record
the version they ran with. A profile the server's policy refuses is 422 with the code of
its first problem (``tool_blocked``, ``unknown_tool``, ``model_not_allowed``).

Who may see, edit and answer for an agent is decided here alone (``sees_agent``,
``is_parent``, ``require_editor``, ``visible_agent``): owners and staff every agent; a
member the org's agents (to read and use) and the agents they parent (to edit too); an
agent another member parents is not there for them (404, never 403: handles do not leak).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from litestar import delete, get, post, put
from litestar.params import FromPath, JSONBody, PathParameter
from pydantic import BaseModel, Field

from fleet import (
    DEFAULT_HANDLE,
    HANDLE_PATTERN,
    Agent,
    AgentNotFoundError,
    AgentProfile,
    AgentUsage,
    ProfileError,
)
from store import AgentExistsError, DayUsage
from stream._api import (
    AgentCreate,
    AgentIn,
    AgentOut,
    AgentToolsetOut,
    AuthedRequest,
    Services,
    ServicesDep,
)
from stream._auth import Principal
from stream._bounds import int_query
from stream._errors import ApiError
from stream._mcp import agent_toolsets

_MANAGERS = ("owner", "staff")
_HANDLE = re.compile(HANDLE_PATTERN)


def _handle(handle: str) -> str:
    if not _HANDLE.match(handle):
        raise ApiError(
            422, "invalid_request", "A handle is 2-40 of a-z, 0-9, _ and -, starting with a letter"
        )
    return handle


def require_manager(principal: Principal, what: str = "change agents") -> None:
    """403 unless the caller is the org's owner or staff (``what``: what they may do)."""
    if principal.role not in _MANAGERS:
        raise ApiError(403, "forbidden", f"Only owner or staff may {what}")


def is_parent(principal: Principal, agent: Agent) -> bool:
    """Whether the caller owns ``agent`` (its ``parent``)."""
    return agent.parent is not None and agent.parent == principal.user_id


def sees_agent(principal: Principal, agent: Agent) -> bool:
    """Whether ``agent`` is there for the caller: owners and staff see every agent, anyone
    the org's agents and those they parent; another member's agent is invisible."""
    return principal.sees_whole_org or agent.parent is None or is_parent(principal, agent)


def require_editor(principal: Principal, agent: Agent) -> None:
    """404 ``not_found`` unless the caller sees ``agent``; 403 ``forbidden`` unless they
    may change it (owner, staff, or its parent)."""
    if not sees_agent(principal, agent):
        raise _absent(agent.handle)
    if not (principal.sees_whole_org or is_parent(principal, agent)):
        raise ApiError(403, "forbidden", "Only owner or staff (or its parent) may change an agent")


async def require_profile_writer(services: Services, principal: Principal, what: str) -> None:
    """403 unless the caller may write some agent's profile: owner or staff, a member who
    parents one of the org's agents, or any member where the org lets members create
    agents (``members_create_agents``)."""
    if principal.sees_whole_org:
        return
    if any(is_parent(principal, agent) for agent in await services.agents.list(principal.org_id)):
        return
    if await _members_create(services, principal.org_id):
        return
    raise ApiError(
        403, "forbidden",
        f"Only owner or staff, or a member who owns an agent or may create one, may {what}",
    )  # fmt: skip


async def _members_create(services: Services, org_id: str) -> bool:
    """Whether the org lets members create agents (``members_create_agents``)."""
    return (await services.store.orgs.settings(org_id)).members_create_agents


def _absent(handle: str) -> ApiError:
    return ApiError(404, "not_found", f"No agent {handle!r} in this organisation")


async def visible_agent(services: Services, principal: Principal, handle: str | None) -> Agent:
    """The org's agent ``handle`` (``None``: its default) if the caller sees it, else 404."""
    agent = await agent_or_404(services, principal.org_id, handle)
    if not sees_agent(principal, agent):
        raise _absent(agent.handle)
    return agent


async def _existing(services: Services, org_id: str, handle: str) -> Agent | None:
    try:
        return await services.agents.get(org_id, handle)
    except AgentNotFoundError:
        return None


async def _owned(
    services: Services, principal: Principal, profile: AgentProfile, current: Agent | None
) -> AgentProfile:
    """``profile`` as the caller may save it: owners and staff set any parent or none; a
    member edits the agents they parent, creates one only when the org lets members
    (``members_create_agents``), and their agent always has them as its parent."""
    if current is not None:
        require_editor(principal, current)
    if principal.sees_whole_org:
        return profile
    if current is None and not await _members_create(services, principal.org_id):
        raise ApiError(
            403, "forbidden",
            "Members may not create agents in this organisation; an owner may allow it "
            "(PUT /v1/org/settings members_create_agents)",
        )  # fmt: skip
    if profile.parent not in (None, principal.user_id):
        raise ApiError(
            403, "forbidden_parent",
            f"A member's agent has that member as its parent: set parent to "
            f"{principal.user_id!r} or leave it out (owners and staff may set another)",
        )  # fmt: skip
    return profile.model_copy(update={"parent": principal.user_id})


def require_chat(agent: Agent, principal: Principal) -> None:
    """403 ``forbidden_role`` unless the agent's profile lets the caller's role talk to it
    (checked before anything is stored, counted or sent to a model)."""
    if not agent.profile.access.may_chat(principal.role):
        roles = " or ".join(agent.profile.access.chat) or "no one"
        raise ApiError(
            403,
            "forbidden_role",
            f"The agent {agent.handle!r} talks only to {roles} (your role: {principal.role}); "
            "an owner or staff may change its access",
        )


def require_answer(agent: Agent, principal: Principal, *, session_user: str) -> None:
    """403 ``forbidden_role`` unless the caller may answer the agent's confirmations and
    picks in ``session_user``'s session (a member: only in their own)."""
    own = principal.user_id == session_user
    if not agent.profile.access.may_answer(principal.role, own_session=own):
        roles = " or ".join(agent.profile.access.answer) or "no one"
        raise ApiError(
            403,
            "forbidden_role",
            f"Only {roles} may answer the confirmations and picks of agent {agent.handle!r} "
            f"(a member only in their own sessions; your role: {principal.role})",
        )


async def session_agent(services: Services, org_id: str, handle: str | None) -> Agent:
    """The agent a session talks to, for its access rules: one deleted since answers by
    the built-in defaults' rules (its calls still wait for someone)."""
    try:
        return await services.agents.get(org_id, handle)
    except AgentNotFoundError:
        return Agent(handle or DEFAULT_HANDLE, 0, AgentProfile(name=handle or DEFAULT_HANDLE))


def _out(agent: Agent, toolsets: list[AgentToolsetOut] | None = None) -> AgentOut:
    return AgentOut(
        **agent.profile.model_dump(),
        handle=agent.handle,
        version=agent.version,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
        paused_at=agent.paused_at,
        paused_reason=agent.paused_reason,
        toolsets=toolsets or [],
    )


async def agent_or_404(services: Services, org_id: str, handle: str | None) -> Agent:
    """The org's agent ``handle`` (``None``: its default), or 404."""
    try:
        return await services.agents.get(org_id, handle)
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None


async def _save(
    services: Services, principal: Principal, handle: str, profile: AgentProfile, *, create: bool
) -> Agent:
    current = None if create else await _existing(services, principal.org_id, handle)
    profile = await _owned(services, principal, profile, current)
    try:
        return await services.agents.save(
            principal.org_id, handle, profile, by=principal.user_id, create=create
        )
    except ProfileError as exc:
        status = 409 if exc.code == "agent_exists" else 422
        raise ApiError(status, exc.code, exc.message) from None
    except AgentExistsError:
        raise ApiError(409, "agent_exists", f"The org already has an agent {handle!r}") from None


@get("/v1/agents", summary="The org's agents the caller sees (the default among them)")
async def list_agents(request: AuthedRequest, services: ServicesDep) -> list[AgentOut]:
    agents = await services.agents.list(request.user.org_id)
    return [_out(agent) for agent in agents if sees_agent(request.user, agent)]


@post(
    "/v1/agents",
    summary="Create an agent (owner or staff; a member when the org allows it)",
    status_code=201,
)
async def create_agent(
    data: JSONBody[AgentCreate], request: AuthedRequest, services: ServicesDep
) -> AgentOut:
    profile = AgentProfile.model_validate(data.model_dump(exclude={"handle"}))
    return _out(await _save(services, request.user, data.handle, profile, create=True))


@get("/v1/agents/{handle:str}", summary="One agent's current profile")
async def get_agent(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> AgentOut:
    agent = await visible_agent(services, request.user, handle)
    return _out(agent, await agent_toolsets(services, request.user.org_id, agent.profile))


@put("/v1/agents/{handle:str}", summary="Replace an agent's profile: its next version")
async def put_agent(
    handle: FromPath[str],
    data: JSONBody[AgentIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> AgentOut:
    profile = AgentProfile.model_validate(data.model_dump())
    return _out(await _save(services, request.user, _handle(handle), profile, create=False))


_MAX_VERSION = 2**31 - 1  # the column's range: a larger number would fail in PostgreSQL
_VERSION = PathParameter(
    ge=0,
    le=_MAX_VERSION,
    description="A version the agent was saved as (0: the built-in default).",
    schema_extra={"minimum": 0, "maximum": _MAX_VERSION},  # exact integers (see int_query)
)


@get(
    "/v1/agents/{handle:str}/versions/{version:int}",
    summary="One saved version of an agent's profile (kept after later saves and deletion)",
)
async def get_agent_version(
    handle: FromPath[str],
    version: Annotated[int, _VERSION],
    request: AuthedRequest,
    services: ServicesDep,
) -> AgentOut:
    """What a version said, so an editor can show what the next one changed."""
    try:
        agent = await services.agents.at_version(request.user.org_id, handle, version)
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    if not sees_agent(request.user, agent):
        raise _absent(handle)
    return _out(agent)


@delete("/v1/agents/{handle:str}", summary="Delete an agent (its versions stay on record)")
async def delete_agent(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> None:
    require_editor(request.user, await agent_or_404(services, request.user.org_id, handle))
    try:
        await services.agents.delete(request.user.org_id, handle)
    except ProfileError as exc:
        raise ApiError(409, exc.code, exc.message) from None
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None


@post(
    "/v1/agents/{handle:str}/resume",
    summary="Unpause an agent (owner, staff or its parent)",
    status_code=200,
)
async def resume_agent(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> AgentOut:
    """Clears the server's pause (its cost limit's) and a profile's ``paused: true`` (by
    saving the next version with ``paused: false``). Publishes no notice."""
    principal = request.user
    if not principal.sees_whole_org:
        require_editor(principal, await agent_or_404(services, principal.org_id, handle))
    try:
        agent = await services.costs.resume(principal.org_id, handle, by=principal.user_id)
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except ProfileError as exc:
        raise ApiError(422, exc.code, exc.message) from None
    return _out(agent)


class UsageDay(BaseModel):
    day: str = Field(description="A UTC day (YYYY-MM-DD), or the month (YYYY-MM) for totals.")
    calls: int = Field(description="Model calls.")
    input_tokens: int
    output_tokens: int
    cost_usd_micros: int


class CostAlertOut(BaseModel):
    threshold_usd: float
    spent_usd: float = Field(description="The period's spend when it fired.")
    fired_at: datetime


class UsageRun(BaseModel):
    run_id: str
    status: str
    created_at: datetime
    steps: int
    tool_calls: int
    cost_usd_micros: int


class AgentUsageOut(BaseModel):
    agent: str
    days: list[UsageDay] = Field(description="Per UTC day, oldest first, days without calls as 0.")
    today: UsageDay
    month: UsageDay = Field(description="This UTC month so far.")
    period: str = Field(description="What the thresholds and the limit count: day or month.")
    period_key: str = Field(description="The current period: YYYY-MM-DD or YYYY-MM.")
    period_spent_usd: float
    alert_thresholds_usd: list[float]
    limit_usd: float | None
    alerts: list[CostAlertOut] = Field(description="The thresholds crossed this period.")
    paused: bool = Field(description="Paused by its profile or by the server.")
    paused_at: datetime | None
    paused_reason: str | None
    runs: list[UsageRun] = Field(description="The most recent runs with their figures.")


def _day(day: DayUsage) -> UsageDay:
    return UsageDay(
        day=day.day, calls=day.calls, input_tokens=day.input_tokens,
        output_tokens=day.output_tokens, cost_usd_micros=day.cost_usd_micros,
    )  # fmt: skip


def _usage_out(usage: AgentUsage) -> AgentUsageOut:
    agent, cost = usage.agent, usage.agent.profile.cost
    return AgentUsageOut(
        agent=agent.handle, days=[_day(d) for d in usage.days], today=_day(usage.today),
        month=_day(usage.month), period=usage.period.kind, period_key=usage.period.key,
        period_spent_usd=round(usage.period_spent_usd_micros / 1_000_000, 6),
        alert_thresholds_usd=cost.alert_thresholds_usd, limit_usd=cost.limit_usd,
        alerts=[
            CostAlertOut(threshold_usd=a.threshold_usd_micros / 1_000_000,
                         spent_usd=a.spent_usd_micros / 1_000_000, fired_at=a.fired_at)
            for a in usage.alerts
        ],
        paused=agent.paused, paused_at=agent.paused_at, paused_reason=agent.paused_reason,
        runs=[
            UsageRun(run_id=run.id, status=run.status, created_at=run.created_at,
                     steps=f.steps, tool_calls=f.tool_calls, cost_usd_micros=f.cost_usd_micros)
            for run, f in usage.runs
        ],
    )  # fmt: skip


@get(
    "/v1/agents/{handle:str}/usage",
    summary="An agent's model usage and costs (owner, staff or its parent)",
)
async def agent_usage(
    handle: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    days: Annotated[int, int_query(ge=1, le=92, description="Days in the series (UTC).")] = 14,
) -> AgentUsageOut:
    principal = request.user
    if not principal.sees_whole_org and not is_parent(
        principal, await visible_agent(services, principal, handle)
    ):
        raise ApiError(
            403, "forbidden", "Only owner, staff or its parent may read an agent's costs"
        )
    try:
        usage = await services.costs.usage(principal.org_id, handle, days)
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return _usage_out(usage)
