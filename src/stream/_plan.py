"""``POST /v1/plan``: a planner-only dry run. No tool runs, nothing is written."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from typing import Any

from litestar import post
from litestar.params import JSONBody

from context import compact_messages, history, loads_from_log
from planner import DryRun, dry_run
from providers import ModelError
from store import StoredEvent
from stream._agents import require_chat, session_agent
from stream._api import AuthedRequest, PlanRequest, Services, ServicesDep
from stream._auth import Principal
from stream._bounds import check_message_length
from stream._errors import ApiError, provider_error
from stream._limits import enforce_rate_limits
from stream._routes import session_for
from turn import AGENT_DISABLED, BudgetExceededError, TurnMeter, TurnRoleModels


@post("/v1/plan", status_code=200, summary="Planner-only dry run: plan, sources, budgets, cost")
async def plan_dry_run(
    data: JSONBody[PlanRequest], request: AuthedRequest, services: ServicesDep
) -> dict[str, Any]:
    principal = request.user
    check_message_length(data.message, services.config.max_message_chars)
    models = await services.models.resolve(org_id=principal.org_id, requested=None)
    if models.planner is None:
        raise ApiError(503, "agent_disabled", AGENT_DISABLED)
    events: list[StoredEvent] = []
    session = None
    if data.session_id is not None:
        session = await session_for(services, principal, data.session_id)
    # A dry run is a chat without its execution: the agent's chat roles apply.
    handle = session.agent if session is not None else None
    require_chat(await session_agent(services, principal.org_id, handle), principal)
    if session is not None:
        events = await services.store.log.read(session.id)
    await enforce_rate_limits(services, principal)
    kit = services.kit
    # A dry run's planner call costs like any other: it counts against the org's cap.
    meter = TurnMeter(
        services.store, kit.caps, org_id=principal.org_id, user_id=principal.user_id,
        session_id=None, turn_id=f"plan-{uuid.uuid4()}",
    )  # fmt: skip
    try:
        await meter.check()
        result = await _dry_run(services, data, principal, models, meter, events)
    except BudgetExceededError as exc:
        wait_s = max(1, math.ceil((exc.resets_at - datetime.now(UTC)).total_seconds()))
        retry = {"Retry-After": str(wait_s)}
        raise ApiError(429, "budget_exceeded", exc.message, headers=retry) from None
    except ModelError as exc:  # an outage is not a plan: no fallback plan is shown for it
        raise provider_error(exc) from None
    return result.to_dict()


async def _dry_run(
    services: Services,
    data: PlanRequest,
    principal: Principal,
    models: TurnRoleModels,
    meter: TurnMeter,
    events: list[StoredEvent],
) -> DryRun:
    kit = services.kit
    assert models.planner is not None
    answer = (models.answer or models.planner).name
    return await dry_run(
        meter.wrap(models.planner, "planner"),
        data.message,
        kit.planning(principal.role, models.planner),
        budgets=kit.budgets,
        priced_for=(answer, answer),
        history=compact_messages(history(events).messages),
        loaded=loads_from_log(events),
        client=data.context.to_client(None) if data.context is not None else None,
    )
