"""Inbound webhooks: a signed POST starts a run of an agent, its payload the run's context.

Signatures follow Standard Webhooks (the ``standardwebhooks`` package): the sender signs
``webhook-id.webhook-timestamp.body`` with the agent's secret (HMAC-SHA256) and sends the
three ``webhook-*`` headers; a delivery more than 5 minutes off is refused, and a
redelivered ``webhook-id`` returns the run it started the first time. Anything that does
not verify is 401 and starts nothing; a verified payload is then held to the bounds of a
run API's context (``run_context``: size, nesting, keys). The route takes no bearer
token: the signature is the credential. Owners and staff make (and remake) an agent's secret with
``POST /v1/agents/{handle}/webhook``; it is shown once.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, post
from litestar.params import FromPath
from standardwebhooks.webhooks import Webhook

from fleet import AgentNotFoundError, AgentPausedError, AgentRateLimitedError, RunRequest
from store import SecretsKeyError
from stream._agents import agent_or_404, require_manager
from stream._api import AuthedRequest, HookOut, RunOut, Services, ServicesDep
from stream._bounds import run_context
from stream._errors import ApiError
from stream._runs import limited, run_out

_REFUSED = "The webhook signature does not verify (Standard Webhooks, HMAC-SHA256)"


async def verified_body(
    services: Services, org: str, key: str, request: Request[Any, Any, Any], refused: str
) -> bytes:
    """The body of a delivery signed with the org's secret under ``key`` (an agent's
    handle, or the events endpoint's): a missing, malformed, stale or wrong signature,
    or no secret at all, is the same 401, which starts nothing."""
    secret = await services.store.hooks.secret(org, key)
    body = await request.body()
    try:
        if secret is None:
            raise ValueError("no secret")
        Webhook(secret).verify(body, dict(request.headers), json_parse=False)
    except Exception:
        raise ApiError(401, "unauthorized", refused) from None
    return body


async def rotated_secret(services: Services, org: str, key: str) -> str:
    """A new signing secret for the org's endpoint under ``key`` (shown once); 400 when
    the server has no secrets key to keep it with."""
    try:
        return await services.store.hooks.rotate(org, key)
    except SecretsKeyError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None


@post("/v1/agents/{handle:str}/webhook", status_code=201, summary="Make the agent's webhook secret")
async def make_hook(
    handle: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> HookOut:
    principal = request.user
    require_manager(principal)
    agent = await agent_or_404(services, principal.org_id, handle)
    secret = await rotated_secret(services, principal.org_id, agent.handle)
    return HookOut(path=f"/v1/hooks/{principal.org_id}/{agent.handle}", secret=secret)


@delete("/v1/agents/{handle:str}/webhook", summary="Turn the agent's webhook off")
async def delete_hook(handle: FromPath[str], request: AuthedRequest, services: ServicesDep) -> None:
    require_manager(request.user)
    if not await services.store.hooks.delete(request.user.org_id, handle):
        raise ApiError(404, "not_found", f"The agent {handle!r} has no webhook")


@post("/v1/hooks/{org:str}/{handle:str}", status_code=202, summary="A signed event starts a run")
async def receive_hook(
    org: FromPath[str],
    handle: FromPath[str],
    request: Request[Any, Any, Any],
    services: ServicesDep,
) -> RunOut:
    body = await verified_body(services, org, handle, request, _REFUSED)
    context = run_context(body)  # signed, but held to the run API's bounds and text rule
    try:
        agent = await services.agents.get(org, handle)
        user_id, role = agent.acting_user("webhook")
        run, _ = await services.runs.submit(
            RunRequest(
                org_id=org, user_id=user_id, role=role, agent=agent.handle,
                task=agent.profile.webhook_task,
                context=context,
                idempotency_key=f"webhook:{request.headers['webhook-id'][:180]}",
                trigger="webhook",
            )
        )  # fmt: skip
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except AgentPausedError as exc:
        raise ApiError(409, "agent_paused", str(exc)) from None
    except AgentRateLimitedError as exc:
        raise limited(exc) from None
    return run_out(run)
