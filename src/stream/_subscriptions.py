"""An agent's subscriptions to the host app's content: a resource type, optionally one
resource and some event types; a content event that matches starts a run of the agent
(``fleet._triggers``). Members read them like the agent's profile; changing them takes
what changing the profile takes (``PUT /v1/agents/{handle}``'s check).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from litestar import delete, get, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, Field

from store import SubscriptionLimitError, SubscriptionRecord
from stream._agents import require_editor, visible_agent
from stream._api import AuthedRequest, RequestBody, ServicesDep
from stream._errors import ApiError
from stream._triggers import EventType, HostId


class SubscriptionIn(RequestBody):
    resource_type: EventType = Field(description="The host's resource type to watch: note, ...")
    resource_id: HostId | None = Field(default=None, description="One resource; unset: all.")
    event_types: list[EventType] = Field(
        default_factory=list,
        max_length=20,
        description="The event types that start a run (commented, ...); empty: all.",
    )


class SubscriptionOut(BaseModel):
    id: str
    agent: str
    resource_type: str
    resource_id: str | None
    event_types: list[str]
    created_by: str
    created_at: datetime


def _out(sub: SubscriptionRecord) -> SubscriptionOut:
    return SubscriptionOut(**asdict(sub))


@get("/v1/agents/{handle:str}/subscriptions", summary="What the agent watches in the host app")
async def list_subscriptions(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> list[SubscriptionOut]:
    agent = await visible_agent(services, request.user, handle)
    found = await services.store.subscriptions.for_agent(request.user.org_id, agent.handle)
    return [_out(sub) for sub in found]


@post(
    "/v1/agents/{handle:str}/subscriptions",
    status_code=201,
    summary="Subscribe the agent to the host app's events on a resource type",
)
async def add_subscription(
    handle: FromPath[str],
    data: JSONBody[SubscriptionIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> SubscriptionOut:
    principal = request.user
    agent = await visible_agent(services, principal, handle)
    require_editor(principal, agent)  # what PUT /v1/agents/{handle} requires
    try:
        sub = await services.store.subscriptions.add(
            principal.org_id, agent.handle, resource_type=data.resource_type,
            resource_id=data.resource_id, event_types=sorted(set(data.event_types)),
            created_by=principal.user_id,
        )  # fmt: skip
    except SubscriptionLimitError as exc:
        raise ApiError(409, "subscription_limit", str(exc)) from None
    return _out(sub)


@delete(
    "/v1/agents/{handle:str}/subscriptions/{subscription_id:str}",
    summary="Unsubscribe the agent",
)
async def delete_subscription(
    handle: FromPath[str], subscription_id: FromPath[str], request: AuthedRequest,
    services: ServicesDep,
) -> None:  # fmt: skip
    principal = request.user
    require_editor(principal, await visible_agent(services, principal, handle))
    if not await services.store.subscriptions.delete(principal.org_id, handle, subscription_id):
        raise ApiError(404, "not_found", f"The agent {handle!r} has no {subscription_id!r}")
