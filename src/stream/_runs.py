"""Background runs over HTTP: trigger one, list an agent's history, read one, follow it,
cancel it. Any member of the org may trigger a run. A run follows its session's rule:
the one who triggered it, owners and staff see, follow and cancel it; to anyone else it
is a 404 (ids of others never leak), and a member's list holds their own runs only. A
schedule's or a webhook's run has no person behind it: owners and staff only. The parent
of a person-owned agent sees all of its runs, however started; to other members that
agent and its runs are not there, even runs they started before it had a parent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import get, post
from litestar.openapi.spec import OpenAPIFormat
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream

from context import conversation
from fleet import (
    AgentNotFoundError,
    AgentPausedError,
    AgentRateLimitedError,
    RunRequest,
)
from store import (
    USER_TRIGGER,
    AuditEntry,
    RunFigures,
    RunRecord,
    StoredEvent,
    ToolExecutionRecord,
)
from stream._agents import is_parent, require_chat, sees_agent, visible_agent
from stream._api import (
    AuthedRequest,
    RunDetail,
    RunIn,
    RunOut,
    RunPage,
    RunRow,
    Services,
    ServicesDep,
)
from stream._auth import Principal
from stream._bounds import check_message_length, event_cursor, int_query, utc_instant
from stream._errors import ApiError
from stream._limits import retry_after_s
from stream._sse import KEEPALIVE, SSE_HEADERS, tail

QUEUED_POLL_S = 0.25
"""How often a stream of a queued run looks for the turn that picked it up."""


def run_out(run: RunRecord) -> RunOut:
    return RunOut(
        run_id=run.id, agent=run.agent, agent_version=run.agent_version, status=run.status,
        trigger=run.trigger, task=run.task, context=run.context, session_id=run.session_id,
        turn_id=run.turn_id, user_id=run.user_id, created_at=run.created_at,
        started_at=run.started_at, finished_at=run.finished_at,
        trigger_event_id=run.trigger_event_id, hops=run.hops,
    )  # fmt: skip


def limited(exc: AgentRateLimitedError) -> ApiError:
    """429 ``agent_rate_limited`` with the seconds until the agent's window frees up."""
    wait_s = retry_after_s(exc.resets_at, datetime.now(UTC))
    return ApiError(
        429, "agent_rate_limited", f"{exc}; retry in {wait_s} s",
        headers={"Retry-After": str(wait_s)},
    )  # fmt: skip


_EVERY = None
"""A viewer who sees all of an agent's runs (owners, staff, its parent)."""
_NOBODY = ""
"""A viewer who sees none (another member's agent): no run's user id is empty."""


async def _viewer(services: Services, principal: Principal, handle: str) -> str | None:
    """Whose runs of agent ``handle`` the caller sees: ``_EVERY`` (owners, staff, its
    parent), ``_NOBODY`` (another member's agent), else their own user id."""
    if principal.sees_whole_org:
        return _EVERY
    try:
        agent = await services.agents.get(principal.org_id, handle)
    except AgentNotFoundError:  # deleted: its history, as before parents
        return principal.user_id
    if not sees_agent(principal, agent):
        return _NOBODY
    return _EVERY if is_parent(principal, agent) else principal.user_id


async def _run_or_404(services: Services, principal: Principal, run_id: str) -> RunRecord:
    """The run if the caller may see it; otherwise 404, as ``session_for`` does."""
    run = await services.store.runs.get(principal.org_id, run_id)
    viewer = _NOBODY if run is None else await _viewer(services, principal, run.agent)
    if run is None or not (
        viewer is _EVERY or (run.user_id == viewer and run.trigger == USER_TRIGGER)
    ):
        raise ApiError(404, "not_found", f"No run {run_id!r}")
    return run


@post(
    "/v1/agents/{handle:str}/runs",
    status_code=202,
    summary="Queue a background run of the agent; answers at once",
)
async def create_run(
    handle: FromPath[str], data: JSONBody[RunIn], request: AuthedRequest, services: ServicesDep
) -> RunOut:
    principal = request.user
    check_message_length(data.task, services.config.max_message_chars)
    require_chat(await visible_agent(services, principal, handle), principal)
    ask = RunRequest(
        org_id=principal.org_id, user_id=principal.user_id, role=principal.role, agent=handle,
        task=data.task, context=data.context, idempotency_key=data.idempotency_key,
    )  # fmt: skip
    try:
        run, _ = await services.runs.submit(ask)
    except AgentNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except AgentPausedError as exc:
        raise ApiError(409, "agent_paused", str(exc)) from None
    except AgentRateLimitedError as exc:
        raise limited(exc) from None
    return run_out(run)


@get("/v1/agents/{handle:str}/runs", summary="The agent's runs, newest first (paged)")
async def list_runs(
    handle: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    limit: Annotated[int, int_query(ge=1, le=200, description="Runs per page.")] = 50,
    before: Annotated[
        str | None,
        QueryParameter(
            format=OpenAPIFormat.DATE_TIME,
            max_length=64,
            description="Runs created before this instant (a page's next_before).",
        ),
    ] = None,
) -> RunPage:
    until = utc_instant(before, name="before") if before is not None else None
    store = services.store
    viewer = await _viewer(services, request.user, handle)
    if viewer == _NOBODY:
        raise ApiError(404, "not_found", f"No agent {handle!r} in this organisation")
    runs = await store.runs.history(
        request.user.org_id, handle, limit=limit, before=until, triggered_by=viewer
    )
    figures = await store.runs.figures(runs)
    rows = [
        RunRow(**run_out(run).model_dump(), **asdict(figures.get(run.id, RunFigures())))
        for run in runs
    ]
    last = runs[-1].created_at if len(runs) == limit else None
    return RunPage(runs=rows, next_before=last)


@get("/v1/runs/{run_id:str}", summary="A run: its steps, tool calls, resources and answer")
async def run_detail(
    run_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> RunDetail:
    run = await _run_or_404(services, request.user, run_id)
    if run.turn_id is None:
        return RunDetail(**run_out(run).model_dump())
    store = services.store
    events = await store.log.read(run.session_id, turn_id=run.turn_id)
    executions = await store.tool_executions.list_for_turn(run.turn_id)
    resources = await store.audit.for_calls(
        run.org_id, [e.tool_use_id for e in executions],
        since=run.started_at or run.created_at, until=run.finished_at or datetime.now(UTC),
    )  # fmt: skip
    return RunDetail(
        **run_out(run).model_dump(),
        steps=[e.data for e in events if e.type == "step_completed"],
        tool_calls=[_call(e) for e in executions],
        resources=[_resource(r) for r in resources],
        answer=_answer(events),
        usage=next((e.data for e in reversed(events) if e.type == "usage"), None),
        error=next((e.data for e in reversed(events) if e.type == "error"), None),
    )


def _resource(entry: AuditEntry) -> dict[str, Any]:
    """A write's audit row: what the run created or changed, by which call."""
    return {
        "action": entry.action, "target": entry.target, "tool_use_id": entry.tool_use_id,
        "detail": entry.detail, "created_at": entry.created_at.isoformat(),
    }  # fmt: skip


def _call(execution: ToolExecutionRecord) -> dict[str, Any]:
    return {
        "tool_use_id": execution.tool_use_id, "tool": execution.tool,
        "status": execution.status, "input": execution.input, "output": execution.output,
        "error": execution.error,
    }  # fmt: skip


def _answer(events: list[StoredEvent]) -> str | None:
    said = [m.text for m in conversation(events) if m.role == "assistant"]
    return said[-1] if said else None


@get("/v1/runs/{run_id:str}/stream", summary="Follow a run's events (SSE; Last-Event-ID)")
async def run_stream(
    run_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    last_event_id: Annotated[
        str | None,
        HeaderParameter(name="Last-Event-ID", schema_extra={"pattern": r"^[0-9]{1,19}$"}),
    ] = None,
) -> Stream:
    run = await _run_or_404(services, request.user, run_id)
    after = 0 if last_event_id is None else event_cursor(last_event_id)
    return Stream(
        _follow(services, run, after),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, "X-Session-Id": run.session_id},
    )


async def _follow(services: Services, run: RunRecord, after: int) -> AsyncIterator[bytes]:
    """Wait (with keep-alives) for a queued run's turn, then tail it to its ``done``."""
    waited = 0.0
    while run.turn_id is None and run.status == "queued":
        await asyncio.sleep(QUEUED_POLL_S)
        waited += QUEUED_POLL_S
        if waited >= services.config.keepalive_s:
            waited = 0.0
            yield KEEPALIVE
        fresh = await services.store.runs.get(run.org_id, run.id)
        if fresh is None:
            return
        run = fresh
    if run.turn_id is None:  # cancelled before it started
        return
    async for frames in tail(
        services.store, run.session_id, after=after, turn_id=run.turn_id,
        keepalive_s=services.config.keepalive_s,
    ):  # fmt: skip
        yield frames


@post("/v1/runs/{run_id:str}/cancel", status_code=200, summary="Cancel a queued or running run")
async def cancel_run(
    run_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> RunOut:
    principal = request.user
    run = await _run_or_404(services, principal, run_id)
    if run.turn_id is None:
        await services.store.runs.cancel_queued(principal.org_id, run.id)
    else:
        await services.runner.cancel(run.session_id)
    return run_out(await _run_or_404(services, principal, run.id))
