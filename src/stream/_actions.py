"""User actions on a session outside a turn: undo a tool's write, cancel running turns."""

from __future__ import annotations

from typing import Any

from litestar import post
from litestar.params import FromPath
from pydantic import BaseModel, Field

from events import ToolCompleted, ToolError, ToolStarted
from fleet import AgentNotFoundError
from stream._api import AuthedRequest, Services, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError, ErrorCode
from stream._routes import session_for
from tools import ToolContext, ToolOutcome, ToolRunner
from turn import TurnKit

# Why an undo did not run, by the runner's code: the undo's own refusals keep their code
# (clients tell "already undone" from "cannot be undone"); the gates' become HTTP errors.
_UNDO_REFUSALS: dict[str, ErrorCode] = {
    "not_undoable": "not_undoable",
    "no_inverse": "no_inverse",
    "already_undone": "already_undone",
}
_DENIED = frozenset({"forbidden", "tool_not_allowed"})
_UNRUNNABLE = frozenset({"unknown_tool", "invalid_input", "tool_use_conflict"})


class UndoOut(BaseModel):
    tool_use_id: str = Field(description="The undo's own execution id.")
    undone: str = Field(description="The tool_use_id of the write it undid.")
    ok: bool
    output: Any = Field(default=None, description="The inverse tool's output, when ok.")
    error: dict[str, str | None] | None = Field(
        default=None, description="`code`, `message`, `hint` when the inverse ran and failed."
    )


class CancelOut(BaseModel):
    cancelled: list[str] = Field(description="Ids of the turns stopped; empty if none ran.")


@post(
    "/v1/sessions/{session_id:str}/undo/{tool_use_id:str}",
    status_code=200,
    summary="Run the declared inverse of a succeeded write in this session",
)
async def undo_tool(
    session_id: FromPath[str],
    tool_use_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
) -> UndoOut:
    return await undo_call(services, request.user, session_id, tool_use_id)


async def undo_call(
    services: Services, principal: Principal, session_id: str, tool_use_id: str
) -> UndoOut:
    """Run, as ``principal``, the inverse of the session's write ``tool_use_id`` and log
    it in the session (``ApiError`` when it cannot run)."""
    record = await session_for(services, principal, session_id)
    # An id reused by several turns of the session: the newest write still undoable.
    execution = await services.store.tool_executions.undo_target(tool_use_id, session_id=record.id)
    if execution is None:
        raise ApiError(404, "not_found", f"No tool call {tool_use_id!r} in this session")
    kit = await _session_kit(services, principal.org_id, record.agent)
    if kit.tools is None:
        raise ApiError(503, "agent_disabled", "Tools are not enabled on this server")
    runner = ToolRunner(kit.tools, services.store, capabilities=kit.capabilities)
    ctx = ToolContext(
        store=services.store,
        org_id=principal.org_id,
        user_id=principal.user_id,
        role=principal.role,
    )
    outcome = await runner.undo(tool_use_id, ctx, turn_id=execution.turn_id)
    _refuse_unrun(outcome)
    stored = await services.store.tool_executions.get(
        outcome.tool_use_id, turn_id=execution.turn_id
    )
    await services.store.log.append(
        record.id,
        [
            ToolStarted(
                tool_use_id=outcome.tool_use_id,
                tool=outcome.tool,
                input=stored.input if stored is not None else {},
            ),
            _completed(outcome),
        ],
    )
    error = outcome.error
    return UndoOut(
        tool_use_id=outcome.tool_use_id,
        undone=tool_use_id,
        ok=outcome.ok,
        output=outcome.output if outcome.ok else None,
        error=error.as_dict() if error is not None else None,
    )


async def _session_kit(services: Services, org_id: str, handle: str | None) -> TurnKit:
    """The kit of the session's agent, whose toolsets' writes (an OpenAPI toolset's) an
    undo may reverse; the server's own when the agent is gone."""
    try:
        agent = await services.agents.get(org_id, handle)
    except AgentNotFoundError:
        return services.kit
    return (await services.agents.setup(agent, org_id=org_id)).kit


def _refuse_unrun(outcome: ToolOutcome) -> None:
    """Raise the HTTP error for an undo that did not run (the caller already knows the
    original is in this session, so a ``not_found`` now is the inverse's own failure)."""
    error = outcome.error
    if outcome.ok or error is None:
        return
    if error.code in _UNDO_REFUSALS:
        hint = f". {error.hint}" if error.hint else ""
        raise ApiError(422, _UNDO_REFUSALS[error.code], f"{error.message}{hint}")
    if error.code in _DENIED:
        raise ApiError(403, "forbidden", f"{error.message}; the undo did not run")
    if error.code in _UNRUNNABLE:
        message = f"{error.message}; the recorded undo cannot run ({error.code})"
        raise ApiError(422, "not_undoable", message)


def _completed(outcome: ToolOutcome) -> ToolCompleted:
    error = outcome.error
    return ToolCompleted(
        tool_use_id=outcome.tool_use_id,
        ok=outcome.ok,
        output=outcome.output if outcome.ok else None,
        error=None
        if error is None
        else ToolError(code=error.code, message=error.message, hint=error.hint),
        inverse_available=outcome.inverse_available,
    )


@post(
    "/v1/sessions/{session_id:str}/cancel",
    status_code=200,
    summary="Stop the session's running turn; idempotent",
)
async def cancel_turns(
    session_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> CancelOut:
    record = await session_for(services, request.user, session_id)
    return CancelOut(cancelled=await services.runner.cancel(record.id))
