"""What a handler gets and gives besides its input: the caller, typed failures, audit rows."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from events import Event
from store import Store
from tools._registry import UserRole

Signer = Callable[[dict[str, Any], str], str]
"""Signs JWT claims with a key (HS256) for an OpenAPI toolset's calls: injected by the
composition root, since only the HTTP edge knows JWTs."""
caller_token: ContextVar[str | None] = ContextVar("bosun_caller_token", default=None)
"""The bearer token of the request a turn started from (set by the HTTP edge), which
``forward`` OpenAPI toolsets send; a background run has none."""


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Who runs a tool and where: handlers scope every query by ``org_id``.

    ``tool_use_id`` (set by the runner per call) links the audit row a write records to the
    tool execution that made it. ``calls_run`` is set only for a turn's first attempt: the
    ids of the calls it ran so far (shared by its executors). A read whose id is not in it
    cannot have been recorded before, so it runs without a look at the records first;
    ``None`` (a resumed or taken-over turn, an undo) means every call looks first.

    The runner sets ``session_id``, ``turn_id``, ``step_id`` and a fresh ``events`` list
    per call: what ``emit`` queues (an ``artifact`` event, an ``agent_message``) comes back
    on the outcome (``ToolOutcome.events``) for the executor to log.
    """

    store: Store
    org_id: str
    user_id: str
    role: UserRole
    tool_use_id: str | None = None
    calls_run: set[str] | None = None
    session_id: str | None = None
    turn_id: str | None = None
    step_id: str | None = None
    events: list[Event] | None = field(default=None, compare=False)

    def emit(self, event: Event) -> None:
        """Queue ``event`` for the executor to log after this call's ``tool_completed``
        (handlers never write the log themselves); outside a runner call it is dropped."""
        if self.events is not None:
            self.events.append(event)


class ToolError(Exception):
    """A failure the model should see and can act on: a stable ``code``, a message naming
    the value, and a ``hint`` saying what to do next (the runner turns it into a result)."""

    def __init__(self, code: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint

    def as_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


async def record_audit(
    conn: AsyncConnection,
    ctx: ToolContext,
    action: str,
    *,
    target: str,
    detail: dict[str, Any],
    agent: bool = True,
) -> str:
    """Append an audit row (the store's ``audit_log``) in the caller's transaction, so the
    change and its record commit together; returns the row's id."""
    return await ctx.store.audit.record(
        conn,
        org_id=ctx.org_id,
        user_id=ctx.user_id,
        action=action,
        target=target,
        detail=detail,
        agent=agent,
        tool_use_id=ctx.tool_use_id,
    )
