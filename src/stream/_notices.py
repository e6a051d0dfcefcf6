"""Org notifications: the org event stream and its outbound webhooks.

``GET /v1/events/stream`` tails the org's notice log (``store.notices``) as SSE: ``id`` is
the notice id, so a client re-attaches with ``Last-Event-ID`` and misses nothing. Without
a cursor it starts live (after the newest notice); ``after=0`` replays them all. An org
sees only its own notices. Webhooks (``/v1/webhooks``) get the same notices as signed
POSTs (``stream._deliveries``); their secrets are shown once, when made.

Owners and staff get every notice, see every webhook, and their webhooks get everything.
A member who parents an agent gets the notices about the agents they parent (filtered in
the query, so a cursor stays exact) and keeps webhooks of their own that get only those;
a member who parents none is refused (403), as before parents existed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlsplit

from litestar import delete, get, post
from litestar.params import FromPath, HeaderParameter, JSONBody
from litestar.response import Stream
from pydantic import BaseModel, Field

from store import (
    NoticeRecord,
    NoticeType,
    SecretsKeyError,
    Store,
    WebhookLimitError,
    WebhookRecord,
    notice_key,
    utcnow,
)
from stream._agents import require_manager as agents_require_manager
from stream._api import AuthedRequest, RequestBody, Services, ServicesDep
from stream._auth import Principal
from stream._bounds import event_cursor, int_query
from stream._errors import ApiError, check_egress
from stream._sse import KEEPALIVE, SSE_HEADERS

MAX_URL_CHARS = 2000
SECRET_BYTES = (24, 64)
"""Standard Webhooks' bounds on a secret's decoded length."""
URL_PATTERN = r"^https?://[^\s\x00/?#@\[\]]+([/?#][^\s\x00]*)?$"
SECRET_PATTERN = r"^whsec_[A-Za-z0-9+/]{32,86}={0,2}$"  # noqa: S105 (a pattern)
URL_RE, SECRET_RE = re.compile(URL_PATTERN), re.compile(SECRET_PATTERN)


async def recipient(services: Services, principal: Principal) -> str | None:
    """Whose notices the caller gets: ``None`` for the whole org's (owners and staff), else
    their own user id (a member who parents an agent); 403 for any other member."""
    if principal.sees_whole_org:
        return None
    if not await services.store.agents.parented(principal.org_id, principal.user_id):
        agents_require_manager(principal, "see notifications and webhooks (or an agent's parent)")
    return principal.user_id


def encode_notice(notice: NoticeRecord) -> bytes:
    data = json.dumps(
        {
            "id": notice.id,
            "type": notice.type,
            "org_id": notice.org_id,
            "created_at": notice.created_at.isoformat(),
            "data": notice.data,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return f"id: {notice.id}\nevent: {notice.type}\ndata: {data}\n\n".encode()


async def notice_tail(
    store: Store, org_id: str, *, after: int, keepalive_s: float, parent: str | None = None
) -> AsyncIterator[bytes]:
    """Frames for the org's notices after ``after`` (``parent``: those about agents that
    user parents), live, until the client leaves. A reader registers before it reads, so
    a notice committed meanwhile still wakes it."""
    cursor, idle_s = after, 0.0
    notifier = store.notices.notifier
    with notifier.listen(notice_key(org_id)) as wake:
        while True:
            wake.clear()
            notices = await store.notices.after(org_id, cursor, limit=500, parent=parent)
            if notices:
                yield b"".join(encode_notice(n) for n in notices)
                cursor, idle_s = notices[-1].id, 0.0
                continue
            wait_s = keepalive_s if notifier.poll_s is None else min(notifier.poll_s, keepalive_s)
            try:
                await asyncio.wait_for(wake.wait(), timeout=wait_s)
            except TimeoutError:
                idle_s += wait_s
                if idle_s >= keepalive_s:
                    idle_s = 0.0
                    yield KEEPALIVE


@get(
    "/v1/events/stream",
    summary="The org's notifications, live (SSE; owner or staff; a parent: their agents')",
)
async def events_stream(
    request: AuthedRequest,
    services: ServicesDep,
    after: Annotated[
        int | None, int_query(ge=0, description="Replay notices after this id (0: all).")
    ] = None,
    last_event_id: Annotated[
        str | None,
        HeaderParameter(name="Last-Event-ID", schema_extra={"pattern": r"^[0-9]{1,19}$"}),
    ] = None,
) -> Stream:
    principal = request.user
    parent = await recipient(services, principal)
    cursor = event_cursor(last_event_id) if last_event_id is not None else after
    if cursor is None:  # no cursor: live from now on
        cursor = await services.store.notices.last_id(principal.org_id)
    frames = notice_tail(
        services.store, principal.org_id, after=cursor, keepalive_s=services.config.keepalive_s,
        parent=parent,
    )  # fmt: skip
    return Stream(frames, media_type="text/event-stream", headers=SSE_HEADERS)


class WebhookIn(RequestBody):
    url: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="An http(s) URL to POST to (else 422 invalid_webhook_url).",
        json_schema_extra={"pattern": URL_PATTERN},  # checked by the route: a 422
    )
    event_types: list[NoticeType] = Field(
        default_factory=list, max_length=20, description="The notice types to send; [] all."
    )
    secret: str | None = Field(
        default=None,
        max_length=200,
        json_schema_extra={"pattern": SECRET_PATTERN},  # checked by the route: a 422
        description="A Standard Webhooks secret (whsec_ and 24-64 bytes in base64); "
        "omit to get a new one.",
    )


class CircuitOut(BaseModel):
    """The webhook's circuit breaker: ``open`` after too many failed attempts in a row."""

    state: Literal["closed", "open"] = Field(
        description="open: its deliveries wait until open_until (none is dropped)"
    )
    open_until: datetime | None = Field(description="When the next attempt may be made.")
    consecutive_failures: int = Field(description="Failed attempts since the last success.")


class WebhookOut(BaseModel):
    id: str
    url: str
    event_types: list[str] = Field(description="The notice types it gets; [] every type.")
    enabled: bool
    created_at: datetime
    circuit: CircuitOut


class WebhookCreated(WebhookOut):
    secret: str = Field(description="The signing secret (whsec_...): shown this once.")


class AttemptOut(BaseModel):
    number: int
    attempted_at: datetime
    status_code: int | None = Field(description="The receiver's HTTP status, if it answered.")
    error: str | None = Field(description="The error class when it did not (a timeout, say).")
    duration_ms: int


class DeliveryOut(BaseModel):
    id: str = Field(description="The webhook-id header of every attempt.")
    notice_id: int
    type: str
    status: str = Field(description="pending, delivered or failed")
    next_attempt_at: datetime | None = Field(description="When it is retried (pending only).")
    created_at: datetime
    attempts: list[AttemptOut]


class DeliveryPage(BaseModel):
    circuit: CircuitOut = Field(description="The webhook's circuit, as its deliveries see it.")
    deliveries: list[DeliveryOut]
    next_before: int | None = Field(
        description="Pass as `before` for the next page; null on the last page."
    )


def _checked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        valid = bool(URL_RE.fullmatch(url)) and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad port or IPv6 literal
        valid = False
    if not valid:
        message = "A webhook URL is http:// or https://, a host, and no credentials or spaces"
        raise ApiError(422, "invalid_webhook_url", message)
    return url


def _checked_secret(secret: str | None) -> str | None:
    """``secret`` if Standard Webhooks' libraries read it as 24-64 bytes, else 422."""
    if secret is None:
        return None
    try:
        size = len(base64.b64decode(secret.removeprefix("whsec_") + "=="))
    except (binascii.Error, ValueError):
        size = 0
    if not SECRET_RE.fullmatch(secret) or not SECRET_BYTES[0] <= size <= SECRET_BYTES[1]:
        message = "A webhook secret is whsec_ and 24-64 random bytes in base64; or omit it"
        raise ApiError(422, "invalid_webhook_secret", message)
    return secret


def _circuit(hook: WebhookRecord) -> CircuitOut:
    is_open = hook.circuit_open(utcnow())
    return CircuitOut(
        state="open" if is_open else "closed",
        open_until=hook.circuit_open_until if is_open else None,
        consecutive_failures=hook.consecutive_failures,
    )


def _out(hook: WebhookRecord) -> WebhookOut:
    return WebhookOut(
        id=hook.id,
        url=hook.url,
        event_types=hook.event_types,
        enabled=hook.enabled,
        created_at=hook.created_at,
        circuit=_circuit(hook),
    )


@post(
    "/v1/webhooks",
    status_code=201,
    summary="Add an outbound webhook (owner or staff; a parent: their own)",
)
async def create_webhook(
    data: JSONBody[WebhookIn], request: AuthedRequest, services: ServicesDep
) -> WebhookCreated:
    principal = request.user
    owner = await recipient(services, principal)
    url, secret = _checked_url(data.url), _checked_secret(data.secret)
    await check_egress(url, services.config.egress)
    try:
        hook, secret = await services.store.webhooks.create(
            principal.org_id,
            url=url,
            event_types=sorted(set(data.event_types)),
            secret=secret,
            by=principal.user_id,
            max_per_org=services.config.webhook_max_per_org,
            user_id=owner,
        )
    except SecretsKeyError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    except WebhookLimitError as exc:
        raise ApiError(409, "webhook_limit", str(exc)) from None
    return WebhookCreated(**_out(hook).model_dump(), secret=secret)


@get("/v1/webhooks", summary="The org's outbound webhooks (a member: their own; no secrets)")
async def list_webhooks(request: AuthedRequest, services: ServicesDep) -> list[WebhookOut]:
    owner = await recipient(services, request.user)
    hooks = await services.store.webhooks.of_org(request.user.org_id, user_id=owner)
    return [_out(h) for h in hooks]


@delete("/v1/webhooks/{webhook_id:str}", summary="Remove a webhook and its pending deliveries")
async def delete_webhook(
    webhook_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> None:
    owner = await recipient(services, request.user)
    if not await services.store.webhooks.delete(request.user.org_id, webhook_id, user_id=owner):
        raise ApiError(404, "not_found", f"No webhook {webhook_id!r}")


@get("/v1/webhooks/{webhook_id:str}/deliveries", summary="A webhook's deliveries and attempts")
async def webhook_deliveries(
    webhook_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    before: Annotated[
        int | None, int_query(ge=1, description="Deliveries of notices below this id.")
    ] = None,
    limit: Annotated[int, int_query(ge=1, le=200, description="At most this many.")] = 50,
) -> DeliveryPage:
    owner = await recipient(services, request.user)
    store = services.store
    hook = await store.webhooks.get(request.user.org_id, webhook_id, user_id=owner)
    if hook is None:
        raise ApiError(404, "not_found", f"No webhook {webhook_id!r}")
    found = await store.webhooks.deliveries(webhook_id, limit=limit, before=before)
    deliveries = [
        DeliveryOut(
            id=d.id,
            notice_id=d.notice_id,
            type=d.notice_type,
            status=d.status,
            next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
            created_at=d.created_at,
            attempts=[AttemptOut(**asdict(a)) for a in d.attempts],
        )
        for d in found
    ]
    return DeliveryPage(
        circuit=_circuit(hook),
        deliveries=deliveries,
        next_before=found[-1].notice_id if len(found) == limit else None,
    )
