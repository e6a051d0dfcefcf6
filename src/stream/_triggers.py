"""Content events in: the host app reports what happens in it, and the agents it concerns
run (``fleet._triggers``: mentions, replies, subscriptions, and no loops).

``POST /v1/events`` takes an owner's or staff's token; the host's backend may instead
sign its deliveries (Standard Webhooks, as an agent's inbound webhook is signed) to
``POST /v1/event-hooks/{org}`` with the org's events secret, which ``POST
/v1/events/hook`` makes and shows once. An event is idempotent by its id: a repost
answers with what the first one started, and starts nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Request, delete, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from fleet import HANDLE_PATTERN, EventRouter, Routing
from store import ContentEventRecord
from stream._agents import require_manager
from stream._api import AuthedRequest, HookOut, RequestBody, Services, ServicesDep
from stream._bounds import RUN_ID_PATTERN, check_json_body, check_message_length, parse_utc
from stream._errors import ApiError
from stream._hooks import rotated_secret, verified_body

EVENTS_HOOK = "_events"
"""The org's events secret, kept beside agents' webhook secrets under a key no handle can
be (handles start with a letter)."""
TYPE_PATTERN = r"^[a-z][a-z0-9_.-]{0,39}$"
ID_PATTERN = r"^[!-~]{1,200}$"
"""A host's id: 1-200 printable ASCII characters, no spaces."""
MENTION_PATTERN = r"^@?[a-z][a-z0-9_-]{1,39}$"
_REFUSED = "The event signature does not verify (Standard Webhooks, HMAC-SHA256)"

HostId = Annotated[str, Field(pattern=ID_PATTERN, max_length=200)]
EventType = Annotated[str, Field(pattern=TYPE_PATTERN, max_length=40)]


def _instant(value: object) -> object:
    """An RFC 3339 date-time with its UTC offset, in UTC (the body is validated strictly,
    which would refuse every string)."""
    if not isinstance(value, str):
        return value
    return parse_utc(value.upper())  # RFC 3339 allows a "t" and a "z"


class ResourceIn(RequestBody):
    type: EventType = Field(description="What it is in the host app: note, comment, ...")
    id: HostId
    title: str | None = Field(default=None, max_length=200)


class UserActorIn(RequestBody):
    type: Literal["user"]
    id: HostId = Field(description="The user's id in the host app.")


class AgentActorIn(RequestBody):
    type: Literal["agent"]
    id: str = Field(pattern=HANDLE_PATTERN, max_length=40, description="The agent's handle.")
    run_id: str | None = Field(
        default=None,
        pattern=RUN_ID_PATTERN,
        description="The run (of that agent) that did it: its hops carry on.",
    )


class ReplyToIn(RequestBody):
    type: EventType
    id: HostId


class EventIn(RequestBody):
    """What happened in the host app."""

    id: HostId = Field(description="The host's event id: a repost of it starts nothing.")
    type: EventType = Field(description="created, updated, commented, ...")
    resource: ResourceIn
    actor: UserActorIn | AgentActorIn
    text: str | None = Field(
        default=None, description="The content's text; its @handles mention agents."
    )
    mentions: list[Annotated[str, Field(pattern=MENTION_PATTERN, max_length=41)]] | None = Field(
        default=None, max_length=20, description="Handles mentioned (else read from text)."
    )
    reply_to: ReplyToIn | None = Field(
        default=None, description="The resource it answers (an agent's: that agent runs)."
    )
    at: Annotated[datetime, BeforeValidator(_instant)] = Field(description="When it happened.")


class StartedOut(BaseModel):
    agent: str
    run_id: str
    kind: str = Field(description="mention, reply or subscription")


class SkippedOut(BaseModel):
    agent: str
    kind: str
    reason: str = Field(description="self, hops, cooldown, paused or rate_limited")


class EventOut(BaseModel):
    event_id: str
    duplicate: bool = Field(description="A repost: the first post's runs, none new.")
    runs: list[StartedOut]
    skipped: list[SkippedOut]


def _record(org_id: str, event: EventIn) -> ContentEventRecord:
    reply_to = event.reply_to
    return ContentEventRecord(
        org_id=org_id, id=event.id, type=event.type, resource_type=event.resource.type,
        resource_id=event.resource.id, title=event.resource.title,
        actor_type=event.actor.type, actor_id=event.actor.id,
        actor_run_id=event.actor.run_id if isinstance(event.actor, AgentActorIn) else None,
        text=event.text, mentions=event.mentions,
        reply_to_type=reply_to.type if reply_to else None,
        reply_to_id=reply_to.id if reply_to else None, at=event.at,
    )  # fmt: skip


async def _receive(services: Services, org_id: str, event: EventIn) -> EventOut:
    if event.text is not None:
        check_message_length(event.text, services.config.max_message_chars)
    router = EventRouter(services.store, services.agents, services.runs)
    return _out(await router.receive(_record(org_id, event)))


def _out(routing: Routing) -> EventOut:
    return EventOut(
        event_id=routing.event_id,
        duplicate=routing.duplicate,
        runs=[StartedOut(agent=r.agent, run_id=r.run_id, kind=r.kind) for r in routing.runs],
        skipped=[SkippedOut(agent=s.agent, kind=s.kind, reason=s.reason) for s in routing.skipped],
    )


@post("/v1/events", status_code=202, summary="Report a content event of the host app")
async def post_event(
    data: JSONBody[EventIn], request: AuthedRequest, services: ServicesDep
) -> EventOut:
    require_manager(request.user, "report content events")
    return await _receive(services, request.user.org_id, data)


@post("/v1/events/hook", status_code=201, summary="Make the org's signed events endpoint")
async def make_events_hook(request: AuthedRequest, services: ServicesDep) -> HookOut:
    principal = request.user
    require_manager(principal, "manage the events endpoint")
    secret = await rotated_secret(services, principal.org_id, EVENTS_HOOK)
    return HookOut(path=f"/v1/event-hooks/{principal.org_id}", secret=secret)


@delete("/v1/events/hook", summary="Turn the org's signed events endpoint off")
async def delete_events_hook(request: AuthedRequest, services: ServicesDep) -> None:
    require_manager(request.user, "manage the events endpoint")
    if not await services.store.hooks.delete(request.user.org_id, EVENTS_HOOK):
        raise ApiError(404, "not_found", "The org has no signed events endpoint")


@post("/v1/event-hooks/{org:str}", status_code=202, summary="A signed content event")
async def receive_event_hook(
    org: FromPath[str], request: Request[Any, Any, Any], services: ServicesDep
) -> EventOut:
    body = await verified_body(services, org, EVENTS_HOOK, request, _REFUSED)
    check_json_body(body)  # signed, but held to every body's bounds and text rule
    try:
        event = EventIn.model_validate_json(body, strict=True)  # as the routes validate
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ApiError(400, "invalid_request", f"Invalid request: {problems}") from None
    return await _receive(services, org, event)
