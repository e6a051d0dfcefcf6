"""The approval inbox: every tool call of the org waiting for a person, and the answers.

Owners and staff see them and answer those their agent's ``access.answer`` lets them.
The parent of a person-owned agent sees and answers that agent's, whatever its
``access.answer`` says; a member who parents no agent has no inbox (403), and to a member
an approval of an agent they do not parent is not there (404).
A deferred call (the run went on with "queued for approval") is answered by the approval
desk: approved runs it in the background, once. A suspended call (a chat turn waits) is
answered through the turn's own path, exactly as ``/confirm`` does, so its turn resumes
and its stream goes on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import get, post
from litestar.params import FromPath, JSONBody, QueryParameter
from pydantic import BaseModel, ConfigDict, Field

from fleet import (
    ApprovalAnsweredError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
)
from store import ApprovalRecord, ApprovalStatus, Decision
from stream._agents import is_parent, require_answer, session_agent
from stream._agents import require_manager as agents_require_manager
from stream._api import AuthedRequest, Services, ServicesDep
from stream._auth import Principal
from stream._bounds import int_query
from stream._errors import ApiError
from stream._resolve import ConfirmIn, answer_call


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None, max_length=2000, description="Why (kept with the approval)."
    )


class ApprovalOut(BaseModel):
    id: str
    agent: str
    tool: str
    input: dict[str, Any] = Field(description="Exactly what runs if it is approved.")
    summary: str = Field(description="What the call is for (the step's goal).")
    mode: Literal["suspend", "defer"] = Field(
        description="suspend: a turn waits for the answer; defer: queued, the run went on."
    )
    status: ApprovalStatus
    requested_at: datetime
    expires_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    reason: str | None
    outcome: dict[str, Any] | None = Field(
        description="How an approved deferred call ran: ok, output or error (null before)."
    )
    session_id: str
    turn_id: str
    tool_use_id: str
    run_id: str | None
    links: dict[str, str] = Field(description="Where the call was made: session, run.")


class ApprovalPage(BaseModel):
    approvals: list[ApprovalOut]
    counts: dict[str, int] = Field(description="The org's approvals per status.")
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null on the last page."
    )


def approval_out(approval: ApprovalRecord) -> ApprovalOut:
    links = {"session": f"/v1/sessions/{approval.session_id}"}
    if approval.run_id is not None:
        links["run"] = f"/v1/runs/{approval.run_id}"
    fields = {name: getattr(approval, name) for name in ApprovalOut.model_fields if name != "links"}
    return ApprovalOut(**fields, links=links)


@get(
    "/v1/approvals",
    summary="The approval inbox, newest first (owner or staff; a parent: their agents')",
)
async def list_approvals(
    request: AuthedRequest,
    services: ServicesDep,
    status: Annotated[
        ApprovalStatus | None, QueryParameter(description="Only approvals in this status.")
    ] = None,
    agent: Annotated[
        str | None, QueryParameter(max_length=64, description="Only this agent's (handle).")
    ] = None,
    limit: Annotated[int, int_query(ge=1, le=200, description="Approvals per page.")] = 50,
    after: Annotated[
        str | None, QueryParameter(max_length=40, description="A page's next_after.")
    ] = None,
) -> ApprovalPage:
    principal = request.user
    parent = await _inbox_of(services, principal)
    store = services.store
    before = None
    if after is not None:
        last = await _approval(services, principal, after)
        before = (last.requested_at, last.id)
    page = await store.approvals.page(
        principal.org_id, status=status, agent=agent, limit=limit, before=before, parent=parent
    )
    return ApprovalPage(
        approvals=[approval_out(a) for a in page],
        counts=await store.approvals.counts(principal.org_id, parent=parent),
        next_after=page[-1].id if len(page) == limit else None,
    )


@get(
    "/v1/approvals/{approval_id:str}",
    summary="One approval (owner or staff; a parent: their agents')",
)
async def approval_detail(
    approval_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> ApprovalOut:
    await _inbox_of(services, request.user)
    return approval_out(await _approval(services, request.user, approval_id))


@post(
    "/v1/approvals/{approval_id:str}/approve",
    status_code=200,
    summary="Approve a waiting call: it runs once (owner, staff or its agent's parent)",
)
async def approve(
    approval_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    data: JSONBody[AnswerIn | None] = None,
) -> ApprovalOut:
    return await _answer(services, request.user, approval_id, "approved", data)


@post(
    "/v1/approvals/{approval_id:str}/reject",
    status_code=200,
    summary="Reject a waiting call: it never runs (owner, staff or its agent's parent)",
)
async def reject(
    approval_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    data: JSONBody[AnswerIn | None] = None,
) -> ApprovalOut:
    return await _answer(services, request.user, approval_id, "rejected", data)


async def _answer(
    services: Services,
    principal: Principal,
    approval_id: str,
    decision: Decision,
    data: AnswerIn | None,
) -> ApprovalOut:
    await _inbox_of(services, principal)
    approval = await _approval(services, principal, approval_id)
    agent = await session_agent(services, principal.org_id, approval.agent)
    if not is_parent(principal, agent):  # its parent answers whatever access.answer says
        require_answer(agent, principal, session_user=approval.user_id)
    reason = data.reason if data is not None else None
    desk = services.approvals
    try:
        if approval.mode == "suspend":
            await desk.check_open(approval)
            confirm = ConfirmIn(approved=decision == "approved")
            await answer_call(
                services, principal, approval.session_id, approval.tool_use_id, confirm
            )
        else:
            await desk.decide(approval, decision, by=principal.user_id, reason=reason)
    except ApprovalExpiredError as exc:
        raise ApiError(410, "expired", str(exc)) from None
    except ApprovalAnsweredError as exc:
        raise ApiError(409, "already_answered", str(exc)) from None
    except ApiError as exc:  # the turn's own path: answered there already, or moot
        if exc.status == 409:
            raise ApiError(409, "already_answered", exc.message) from None
        raise
    return approval_out(await _approval(services, principal, approval_id))


async def _inbox_of(services: Services, principal: Principal) -> str | None:
    """Whose agents' approvals the caller sees: ``None`` for the whole org's (owners and
    staff), else their own user id (a parent); 403 for a member who parents no agent."""
    if principal.sees_whole_org:
        return None
    if not await services.store.agents.parented(principal.org_id, principal.user_id):
        agents_require_manager(principal, "see and answer approvals (or the parent of an agent)")
    return principal.user_id


async def _approval(services: Services, principal: Principal, approval_id: str) -> ApprovalRecord:
    """The approval if the caller sees it (a member: of an agent they parent), else 404."""
    try:
        approval = await services.approvals.get(principal.org_id, approval_id)
    except ApprovalNotFoundError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    if not principal.sees_whole_org:
        agent = await session_agent(services, principal.org_id, approval.agent)
        if not is_parent(principal, agent):
            raise ApiError(404, "not_found", f"No approval {approval_id!r} in this organisation")
    return approval
