"""Answers to a suspended turn: confirm or reject a pending tool call, pick a candidate.

Each answer is recorded on the call's execution row in one conditional update (so a
second answer is a 409, whoever sends it) and logged as ``tool_resolved``. While other
calls still wait, the turn is closed ``suspended`` again; the answer to the last one
marks it running and resumes it from its ``turn_suspended`` log event, in this process or
after a restart. Either way the response is the turn's SSE stream from the answer on.
"""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import post
from litestar.params import FromPath, JSONBody
from litestar.response import Stream
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from events import Done, Event, ToolResolved
from executors import PendingCall
from store import Store
from stream._agents import require_answer, session_agent
from stream._api import AuthedRequest, Services, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError
from stream._questions import is_pending, waiting_turn
from stream._routes import session_for, sse_stream
from tools import approval_notice, rejection


class ConfirmIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approved: StrictBool = Field(description="true runs the call as shown; false declines it.")


class PickIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Annotated[
        str, Field(min_length=1, max_length=200, description="The chosen candidate's id.")
    ]


@post(
    "/v1/sessions/{session_id:str}/confirm/{tool_use_id:str}",
    status_code=200,
    summary="Approve or decline a tool call waiting for confirmation; stream the turn on",
)
async def confirm_tool(
    session_id: FromPath[str],
    tool_use_id: FromPath[str],
    data: JSONBody[ConfirmIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> Stream:
    return await _answer(services, request, session_id, tool_use_id, data)


@post(
    "/v1/sessions/{session_id:str}/pick/{tool_use_id:str}",
    status_code=200,
    summary="Choose one of a disambiguation's candidates; stream the turn on",
)
async def pick_candidate(
    session_id: FromPath[str],
    tool_use_id: FromPath[str],
    data: JSONBody[PickIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> Stream:
    return await _answer(services, request, session_id, tool_use_id, data)


async def _answer(
    services: Services,
    request: AuthedRequest,
    session_id: str,
    tool_use_id: str,
    answer: ConfirmIn | PickIn,
) -> Stream:
    after, turn_id = await answer_call(services, request.user, session_id, tool_use_id, answer)
    return sse_stream(services, session_id, after=after, turn_id=turn_id)


async def answer_call(
    services: Services,
    principal: Principal,
    session_id: str,
    tool_use_id: str,
    answer: ConfirmIn | PickIn,
) -> tuple[int, str]:
    """Record ``principal``'s answer to a call the session's suspended turn waits for,
    and resume the turn once nothing else waits: where its stream goes on from (the log
    position before the answer) and the turn's id. The inbox answers suspended calls so.
    A role the agent's ``access.answer`` leaves out is refused before anything is recorded.
    """
    record = await session_for(services, principal, session_id)
    agent = await session_agent(services, principal.org_id, record.agent)
    require_answer(agent, principal, session_user=record.user_id)
    store = services.store
    async with services.locks(record.id):
        waiting = await waiting_turn(store, record.id)
        call = waiting.call(tool_use_id) if waiting is not None else None
        if waiting is None or call is None:
            raise await _not_waiting(store, record.id, tool_use_id)
        turn = waiting.turn
        event = await _record(store, record.id, call, answer, turn_id=turn.id, by=principal)
        await _announce(store, turn.id, call)
        still = [c.tool_use_id for c in waiting.asks if await is_pending(store, c, turn.id)]
        if still:
            closing: list[Event] = [event, Done(session_id=record.id, status="suspended")]
            stored = await store.log.append(record.id, closing, turn_id=turn.id, finish="suspended")
        else:
            # The lock makes this ours; the conditional update keeps a second process out.
            runner = services.runner
            held = (runner.worker_id, runner.lease_until())
            if not await store.sessions.resume_turn(
                turn.id, worker_id=held[0], lease_until=held[1]
            ):
                raise ApiError(409, "tool_already_resolved", "This turn is already resuming")
            stored = await store.log.append(record.id, [event], turn_id=turn.id)
            models = await services.models.resolve(org_id=principal.org_id, requested=None)
            await services.runner.resume(
                turn,
                opening=waiting.opening,
                org_id=principal.org_id,
                user_id=principal.user_id,
                role=principal.role,
                models=models,
                suspended=(waiting.plan, waiting.paused),
            )
    return stored[0].seq - 1, turn.id


async def _not_waiting(store: Store, session_id: str, tool_use_id: str) -> ApiError:
    """Why ``tool_use_id`` takes no answer now: answered already, moot, or unknown (of
    the session's calls with that id, the most recent turn's is the one meant)."""
    row = await store.tool_executions.latest(tool_use_id, session_id=session_id)
    if row is None:
        return ApiError(404, "not_found", f"No tool call {tool_use_id!r} waits in this session")
    if row.status == "expired":
        return ApiError(
            409,
            "tool_expired",
            f"Tool call {tool_use_id!r} waited too long for an answer and expired "
            f"(at {row.completed_at:%Y-%m-%d %H:%M} UTC); send a new message to do it now",
        )
    if row.status in ("pending", "superseded"):
        return ApiError(
            409,
            "tool_superseded",
            f"Tool call {tool_use_id!r} no longer waits: the conversation has moved on since it "
            "was asked (send a new message to do it now)",
        )
    return _resolved(tool_use_id, row.status)


def _resolved(tool_use_id: str, status: str) -> ApiError:
    return ApiError(
        409, "tool_already_resolved", f"Tool call {tool_use_id!r} was already answered ({status})"
    )


async def _record(
    store: Store,
    session_id: str,
    call: PendingCall,
    answer: ConfirmIn | PickIn,
    *,
    turn_id: str,
    by: Principal,
) -> ToolResolved:
    """Record the answer on the call's row in the waiting turn (a 409 if it is not pending
    any more)."""
    decision: Literal["approved", "rejected", "picked"]
    match answer, call.needs:
        case ConfirmIn(approved=True), "confirmation":
            decision = "approved"
            won = await store.tool_executions.resolve(
                call.tool_use_id,
                turn_id=turn_id,
                session_id=session_id,
                status="approved",
                by=by.user_id,
            )
        case ConfirmIn(approved=False), "confirmation":
            decision = "rejected"
            won = await store.tool_executions.resolve(
                call.tool_use_id,
                turn_id=turn_id,
                session_id=session_id,
                status="rejected_by_user",
                error=rejection(call.tool).as_dict(),
                by=by.user_id,
            )
        case PickIn(id=picked), "pick":
            chosen = next((c for c in call.candidates if c.id == picked), None)
            if chosen is None:
                ids = ", ".join(repr(c.id) for c in call.candidates)
                message = f"{picked!r} is not one of the candidates ({ids})"
                raise ApiError(422, "invalid_pick", message)
            decision = "picked"
            output = {"id": chosen.id, "label": chosen.label, "kind": call.kind or "item"}
            won = await store.tool_executions.resolve(
                call.tool_use_id,
                turn_id=turn_id,
                session_id=session_id,
                status="succeeded",
                output=output,
            )
        case _:
            route = "pick" if call.needs == "pick" else "confirm"
            message = (
                f"Tool call {call.tool_use_id!r} waits for a {call.needs}: "
                f"POST .../{route}/{call.tool_use_id}"
            )
            if call.needs == "answer":
                message = (
                    f"Tool call {call.tool_use_id!r} is a question: answer it with your next "
                    "message in the session (POST /v1/chat/stream with its session_id)"
                )
            raise ApiError(400, "invalid_request", message)
    if not won:
        row = await store.tool_executions.get(call.tool_use_id, turn_id=turn_id)
        raise _resolved(call.tool_use_id, row.status if row is not None else "unknown")
    picked_id = answer.id if isinstance(answer, PickIn) else None
    return ToolResolved(tool_use_id=call.tool_use_id, decision=decision, picked_id=picked_id)


async def _announce(store: Store, turn_id: str, call: PendingCall) -> None:
    """Tell the org a confirmation in its inbox was answered (here or from the inbox)."""
    approval = await store.approvals.for_call(turn_id, call.tool_use_id)
    if approval is not None and call.needs == "confirmation":
        await store.notices.publish(approval.org_id, "approval_resolved", approval_notice(approval))
