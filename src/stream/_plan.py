"""``POST /v1/plan``: a planner-only dry run. No tool runs, nothing is written."""

from __future__ import annotations

from typing import Any

from litestar import Request, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from context import history, loads_from_log
from planner import dry_run
from stream._api import PlanRequest, Services
from stream._auth import Principal
from stream._errors import ApiError
from stream._limits import enforce_rate_limits
from stream._routes import session_for
from stream._turn import AGENT_DISABLED

AuthedRequest = Request[Principal, Any, Any]
ServicesDep = NamedDependency[Services]


@post("/v1/plan", status_code=200, summary="Planner-only dry run: plan, sources, budgets, cost")
async def plan_dry_run(
    data: JSONBody[PlanRequest], request: AuthedRequest, services: ServicesDep
) -> dict[str, Any]:
    principal = request.user
    models = await services.models.resolve(org_id=principal.org_id, requested=None)
    if models.planner is None:
        raise ApiError(503, "agent_disabled", AGENT_DISABLED)
    events = []
    if data.session_id is not None:
        session = await session_for(services, principal, data.session_id)
        events = await services.store.log.read(session.id)
    await enforce_rate_limits(services, principal)
    kit = services.kit
    result = await dry_run(
        models.planner,
        data.message,
        catalogue=kit.catalogue(principal.role),
        budgets=kit.budgets,
        executor_model=(models.answer or models.planner).name,
        merger_model=(models.answer or models.planner).name,
        history=history(events).messages,
        loaded=loads_from_log(events),
        limits=kit.plan_limits,
        timeout_s=kit.planner_timeout_s,
        counter=kit.counter(models.planner),
    )
    return result.to_dict()
