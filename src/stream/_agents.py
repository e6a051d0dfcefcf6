"""Agent profiles: members read them, owners and staff write them.

``PUT`` replaces a whole profile and saves it as the next version; turns and runs record
the version they ran with. A profile the server's policy refuses is 422 with the code of
its first problem (``tool_blocked``, ``unknown_tool``, ``model_not_allowed``).
"""

from __future__ import annotations

import re

from litestar import delete, get, post, put
from litestar.params import FromPath, JSONBody

from fleet import HANDLE_PATTERN, Agent, AgentNotFoundError, AgentProfile, ProfileError
from store import AgentExistsError
from stream._api import AgentCreate, AgentIn, AgentOut, AuthedRequest, Services, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError

_MANAGERS = ("owner", "staff")
_HANDLE = re.compile(HANDLE_PATTERN)


def _handle(handle: str) -> str:
    if not _HANDLE.match(handle):
        raise ApiError(
            422, "invalid_request", "A handle is 2-40 of a-z, 0-9, _ and -, starting with a letter"
        )
    return handle


def require_manager(principal: Principal) -> None:
    if principal.role not in _MANAGERS:
        raise ApiError(403, "forbidden", "Only owner or staff may change agents")


def _out(agent: Agent) -> AgentOut:
    return AgentOut(
        **agent.profile.model_dump(),
        handle=agent.handle,
        version=agent.version,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
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
    require_manager(principal)
    try:
        return await services.agents.save(
            principal.org_id, handle, profile, by=principal.user_id, create=create
        )
    except ProfileError as exc:
        status = 409 if exc.code == "agent_exists" else 422
        raise ApiError(status, exc.code, exc.message) from None
    except AgentExistsError:
        raise ApiError(409, "agent_exists", f"The org already has an agent {handle!r}") from None


@get("/v1/agents", summary="The org's agents (the default among them)")
async def list_agents(request: AuthedRequest, services: ServicesDep) -> list[AgentOut]:
    return [_out(agent) for agent in await services.agents.list(request.user.org_id)]


@post("/v1/agents", summary="Create an agent (owner or staff)", status_code=201)
async def create_agent(
    data: JSONBody[AgentCreate], request: AuthedRequest, services: ServicesDep
) -> AgentOut:
    profile = AgentProfile.model_validate(data.model_dump(exclude={"handle"}))
    return _out(await _save(services, request.user, data.handle, profile, create=True))


@get("/v1/agents/{handle:str}", summary="One agent's current profile")
async def get_agent(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> AgentOut:
    return _out(await agent_or_404(services, request.user.org_id, handle))


@put("/v1/agents/{handle:str}", summary="Replace an agent's profile: its next version")
async def put_agent(
    handle: FromPath[str],
    data: JSONBody[AgentIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> AgentOut:
    profile = AgentProfile.model_validate(data.model_dump())
    return _out(await _save(services, request.user, _handle(handle), profile, create=False))


@delete("/v1/agents/{handle:str}", summary="Delete an agent (its versions stay on record)")
async def delete_agent(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> None:
    require_manager(request.user)
    try:
        await services.agents.delete(request.user.org_id, handle)
    except ProfileError as exc:
        raise ApiError(409, exc.code, exc.message) from None
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
