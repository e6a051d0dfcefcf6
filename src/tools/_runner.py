"""The tool runner: the one place where a model's tool call becomes an action.

Every call passes the same gates whatever the model asks (a registered tool, the caller's
role, the agent profile's capabilities, a valid input), then either waits for a human
(pickers, confirmations) or runs under a timeout with its execution recorded before and
after, so a resumed turn never repeats a write. Tool problems come back as typed
outcomes the model can act on; they never crash the turn.
"""

from __future__ import annotations

import asyncio
import difflib
import re
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from events import Event
from store import ApprovalMode, ApprovalRecord, Store, ToolExecutionRecord
from tools._executions import (
    MAX_RESULT_CHARS,
    Needs,
    ToolCallRequest,
    ToolFailure,
    ToolOutcome,
    describe_errors,
    inverse_of,
    invoke,
    logged,
    output_of,
    refused,
    rejection,
    replayed,
    row_of,
    settled_outcome,
    undo_id_of,
)
from tools._registry import ToolDef, ToolRegistry, UnknownToolError, UserRole
from tools._runtime import ToolContext, ToolError

__all__ = [
    "MAX_RESULT_CHARS",
    "Capabilities",
    "Needs",
    "ToolCallRequest",
    "ToolFailure",
    "ToolOutcome",
    "ToolRunner",
]

_CAPABILITY = re.compile(r"^[a-z][a-z0-9_]*\.(\*|[a-z][a-z0-9_]*)$")
_DO_NOT_RETRY = "Tell the user you cannot do this here; do not retry"
SUMMARY_CHARS = 500
"""How much of a call's purpose an approval keeps, to show whoever answers it."""

_log = structlog.get_logger("bosun.tools")


@dataclass(frozen=True, kw_only=True, slots=True)
class Capabilities:
    """An agent profile's allow-list and always-blocked actions, enforced server-side.

    Entries are tool names (``members.search``) or whole routers (``members.*``).
    ``allow=None`` allows every registered tool; ``blocked`` always wins over ``allow``.
    ``confirm``: tools whose calls wait for a human's approval even where the tool does
    not ask for it (the profile's approval policy). How a call waits: ``defer``/``suspend``
    name the tools that always do so, the rest wait the ``mode`` way (chats suspend,
    background runs defer); an approval not answered within ``approval_ttl_s`` expires.
    """

    allow: frozenset[str] | None = None
    blocked: frozenset[str] = frozenset()
    confirm: frozenset[str] = frozenset()
    defer: frozenset[str] = frozenset()
    suspend: frozenset[str] = frozenset()
    mode: ApprovalMode = "suspend"
    approval_ttl_s: float = 86_400.0

    def __post_init__(self) -> None:
        entries = (
            (self.allow or frozenset()) | self.blocked | self.confirm | self.defer | self.suspend
        )
        bad = sorted(e for e in entries if not _CAPABILITY.match(e))
        if bad:
            raise ValueError(
                f"Capability entries must be tool names or 'router.*', not {bad}; "
                "use registry names ('members.search'), not wire names"
            )

    def permits(self, name: str) -> bool:
        """Whether the tool called ``name`` (its registry name) may run under this profile."""
        if _names(name, self.blocked):
            return False
        return self.allow is None or _names(name, self.allow)

    def needs_approval(self, tool: ToolDef) -> bool:
        """Whether a call of ``tool`` waits for a human: the tool asks, or the profile does."""
        return tool.needs_confirmation or _names(tool.name, self.confirm)

    def approval_mode(self, tool: ToolDef) -> ApprovalMode:
        """How a call of ``tool`` waits for its approval: the turn ``suspend``s until a
        person answers, or the call is ``defer``red (queued) and the turn goes on."""
        for key in (tool.name, f"{tool.name.split('.', 1)[0]}.*"):  # the tool, then its router
            if key in self.defer:
                return "defer"
            if key in self.suspend:
                return "suspend"
        return self.mode

    def shown(self, tool: ToolDef) -> ToolDef:
        """``tool`` as this profile uses it: marked ``confirm='always'`` where the profile's
        approval policy asks for it, so every listing and pre-flight says so."""
        if tool.needs_confirmation or tool.kind != "normal":
            return tool
        if not _names(tool.name, self.confirm):
            return tool
        return replace(tool, confirm="always")

    def usable(self, registry: ToolRegistry) -> ToolRegistry:
        """The tools of ``registry`` this profile may use, as it uses them: what its planner
        and executors are shown (the others never are)."""
        return ToolRegistry(self.shown(tool) for tool in registry if self.permits(tool.name))


def _names(name: str, entries: frozenset[str]) -> bool:
    """Whether ``entries`` (tool names and ``router.*``) name the tool ``name``."""
    return name in entries or f"{name.split('.', 1)[0]}.*" in entries


class ToolRunner:
    """Checks, runs, records, undoes and rejects tool calls for one registry and store."""

    def __init__(
        self,
        registry: ToolRegistry,
        store: Store,
        *,
        timeout_s: float = 30.0,
        capabilities: Capabilities = Capabilities(),
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
        self.registry = registry
        self.store = store
        self.timeout_s = timeout_s
        self.capabilities = capabilities
        self._recording: set[asyncio.Future[None]] = set()

    # gates

    def check(self, call: ToolCallRequest, role: UserRole) -> ToolDef | ToolOutcome:
        """The policy gates and input validation, without I/O: the tool, or the refusal
        (``unknown_tool``, ``forbidden``, ``tool_not_allowed``, ``invalid_input``)."""
        admitted = self._admit(call, role)
        return admitted if isinstance(admitted, ToolOutcome) else admitted[0]

    def defers(self, tool: ToolDef) -> bool:
        """Whether a call of ``tool`` needing approval is queued (``defer``) rather than
        waited for: the step goes on instead of suspending."""
        return self.capabilities.approval_mode(tool) == "defer"

    def _admit(
        self, call: ToolCallRequest, role: UserRole
    ) -> tuple[ToolDef, BaseModel] | ToolOutcome:
        try:
            tool = self.registry.get(call.name)
        except UnknownToolError:
            hint = self._close_names(call.name, role)
            return refused(call, call.name, "unknown_tool", f"No tool named {call.name!r}", hint)
        if role not in tool.roles:
            message = (
                f"The {role} role may not use {tool.name} (only {', '.join(sorted(tool.roles))})"
            )
            return refused(call, tool.name, "forbidden", message, _DO_NOT_RETRY)
        if not self.capabilities.permits(tool.name):
            message = f"{tool.name} is not enabled for this agent"
            return refused(call, tool.name, "tool_not_allowed", message, _DO_NOT_RETRY)
        tool = self.capabilities.shown(tool)
        try:
            args = tool.input_model.model_validate(call.input)
        except ValidationError as exc:
            message = f"Invalid input for {tool.name}: {describe_errors(exc)}"
            hint = "Fix these fields and call it again; its schema lists every field"
            return refused(call, tool.name, "invalid_input", message, hint)
        return tool, args

    def _close_names(self, name: str, role: UserRole) -> str:
        usable = [t for t in self.registry if role in t.roles and self.capabilities.permits(t.name)]
        names = {t.name: t.name for t in usable} | {t.wire_name: t.name for t in usable}
        close = difflib.get_close_matches(name, list(names), n=6)
        suggestions = list(dict.fromkeys(names[c] for c in close))[:3]
        if not suggestions:
            return "Call only the tools you were given"
        return f"Did you mean {' or '.join(map(repr, suggestions))}?"

    # running

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        """Check the call, then wait for a human, replay a recorded result, or run it.

        A call is its ``tool_use_id`` in its turn. One already recorded as succeeded (or
        rejected) is not run again: its stored outcome is returned, so a resumed turn
        never repeats a write; another tool or input under the recorded id is a
        ``tool_use_conflict``. The same id in another turn is another call.

        A call that waits for a human is recorded ``pending``, so it survives a restart; a
        recorded approval (``ToolExecutions.resolve``), or ``approved=True`` (the caller is
        the user's own request, as undo is), lets a confirmed tool run.
        """
        admitted = self._admit(call, ctx.role)
        if isinstance(admitted, ToolOutcome):
            return logged(call, admitted)
        tool, args = admitted
        if _first_read(tool, call, ctx, self.capabilities):
            return logged(call, await self._run_read(tool, args, call, ctx))
        executions = self.store.tool_executions
        # Record the call first: a new call is one insert; one recorded before (a retry, a
        # resume, a takeover) comes back from the same statement instead of a pre-read.
        existing = await executions.start(**row_of(call, tool))
        if existing is not None and (settled := settled_outcome(existing, call, tool)):
            return logged(call, settled)
        # A recorded approval is bound to this exact call (``settled_outcome`` checked it).
        approved = approved or (existing is not None and existing.status == "approved")
        needs = _needs(tool, self.capabilities, approved=approved)
        if needs == "confirmation":
            return logged(call, await self._ask(tool, call, ctx))
        if needs is not None:
            pending = ToolOutcome(
                tool_use_id=call.tool_use_id, tool=tool.name, ok=False, needs=needs
            )
            return logged(call, pending)
        if existing is not None and existing.status == "failed":
            await executions.reopen(call.tool_use_id, turn_id=call.turn_id)
        return logged(call, await self._execute(tool, args, call, ctx))

    async def _ask(self, tool: ToolDef, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        """Put the call in the org's approval inbox (once, however often the turn asks).
        Suspended: the turn waits for the answer. Deferred: the model learns the call is
        queued and the turn goes on; an approval runs it later (``fleet.ApprovalDesk``)."""
        mode = self.capabilities.approval_mode(tool)
        approval, created = await self.store.approvals.request(
            ttl_s=self.capabilities.approval_ttl_s,
            org_id=ctx.org_id, session_id=call.session_id, turn_id=call.turn_id,
            tool_use_id=call.tool_use_id, tool=tool.name, input=to_jsonable_python(call.input),
            summary=call.purpose[:SUMMARY_CHARS], mode=mode, user_id=ctx.user_id, role=ctx.role,
        )  # fmt: skip
        if created:
            await self.store.notices.publish(
                ctx.org_id, "approval_requested", approval_notice(approval)
            )
        if mode == "suspend":
            return ToolOutcome(
                tool_use_id=call.tool_use_id, tool=tool.name, ok=False, needs="confirmation"
            )
        return _queued(approval)

    async def _run_read(
        self, tool: ToolDef, args: BaseModel, call: ToolCallRequest, ctx: ToolContext
    ) -> ToolOutcome:
        """Run a read, then record it in one insert (one commit per read step).

        Where the store commits writes in the order they are queued, the step goes on
        without waiting for that commit: the result reaches the log (so a client or a
        resume) only in a later append, which commits with or after the row. A row already
        there can only be a concurrent attempt's (a first read's id is new to its turn):
        a takeover, which fences this attempt off the log, so the clash is only logged.
        Otherwise such a row decides as it would have before the read: a different call
        is a conflict, a success stands."""
        ran = await self._invoke(tool, args, call, ctx)
        recorded = self.store.tool_executions.record_soon(
            **row_of(call, tool), status=ran.status, output=ran.output, error=ran.error
        )
        if self.store.db.writes_in_order:
            recording = asyncio.ensure_future(_check_recorded(recorded, call))
            self._recording.add(recording)  # kept alive until it commits
            recording.add_done_callback(self._recorded)
            return ran.outcome(call, tool)
        existing = await recorded
        if existing is None:
            return ran.outcome(call, tool)
        if settled := settled_outcome(existing, call, tool):
            return settled
        return await self._finish(ran, call, tool)  # an earlier attempt's row, unsettled

    async def settled(self) -> None:
        """Wait until the reads this runner recorded without waiting have committed."""
        while self._recording:
            await asyncio.gather(*self._recording, return_exceptions=True)

    def _recorded(self, recording: asyncio.Future[None]) -> None:
        self._recording.discard(recording)
        if not recording.cancelled() and (exc := recording.exception()) is not None:
            _log.error("tool.record_failed", error_type=type(exc).__name__)

    async def _execute(
        self, tool: ToolDef, args: BaseModel, call: ToolCallRequest, ctx: ToolContext
    ) -> ToolOutcome:
        """Run a recorded, pending call and record how it ended."""
        return await self._finish(await self._invoke(tool, args, call, ctx), call, tool)

    async def _invoke(
        self, tool: ToolDef, args: BaseModel, call: ToolCallRequest, ctx: ToolContext
    ) -> _Ran:
        """Run the handler under the runner's timeout; a ``ToolError`` is a failed run."""
        started = time.perf_counter()
        emitted: list[Event] = []
        scoped = replace(
            ctx, tool_use_id=call.tool_use_id, session_id=call.session_id,
            turn_id=call.turn_id, step_id=call.step_id, events=emitted,
        )  # fmt: skip
        try:
            result = await invoke(tool, args, scoped, timeout_s=tool.timeout_s or self.timeout_s)
            value, output = output_of(tool, result)
            inverse = inverse_of(tool, args, value)
        except ToolError as exc:
            failure = ToolFailure(code=exc.code, message=exc.message, hint=exc.hint)
            return _Ran(None, None, failure, _ms_since(started), tuple(emitted))
        return _Ran(output, inverse, None, _ms_since(started), tuple(emitted))

    async def _finish(self, ran: _Ran, call: ToolCallRequest, tool: ToolDef) -> ToolOutcome:
        """Settle the call's recorded row with how it ran (the stored result stands if
        someone else settled it first)."""
        executions = self.store.tool_executions
        finished = await executions.finish(
            call.tool_use_id,
            turn_id=call.turn_id,
            status=ran.status,
            output=ran.output,
            error=ran.error,
            inverse=ran.inverse,
        )
        if finished is None:  # settled elsewhere while this ran: the stored result stands
            stored = await executions.get(call.tool_use_id, turn_id=call.turn_id)
            assert stored is not None, f"execution {call.tool_use_id!r} vanished while running"
            return replayed(stored)
        return ran.outcome(call, tool)

    # human decisions

    async def undo(self, tool_use_id: str, ctx: ToolContext, *, turn_id: str) -> ToolOutcome:
        """Run the stored inverse of the succeeded write ``tool_use_id`` of ``turn_id``,
        without confirmation (the user asked for it), as a new execution
        ``{tool_use_id}-undo`` of the same turn; the original then links to it
        (``inverse.undone_by``), and the audit rows carry both ids. (The undo route picks
        the turn: ``ToolExecutions.undo_target``.)

        Refusals: ``not_found``, ``not_undoable`` (it did not succeed), ``no_inverse``,
        ``already_undone``; the inverse itself still passes the role and capability gates.
        """
        undo_id = undo_id_of(tool_use_id)
        original = await self.store.tool_executions.get(tool_use_id, turn_id=turn_id)
        refusal = await self._undo_refusal(tool_use_id, original, ctx)
        if refusal is not None:
            code, message, hint = refusal
            failure = ToolFailure(code=code, message=message, hint=hint)
            tool = original.tool if original else ""
            return ToolOutcome(tool_use_id=undo_id, tool=tool, ok=False, error=failure)
        assert original is not None and original.inverse is not None
        call = ToolCallRequest(
            tool_use_id=undo_id,
            name=str(original.inverse["tool"]),
            input=dict(original.inverse["input"]),
            session_id=original.session_id,
            turn_id=original.turn_id,
        )
        outcome = await self.run(call, ctx, approved=True)
        if outcome.ok:
            await self.store.tool_executions.mark_undone(
                tool_use_id, turn_id=turn_id, undone_by=undo_id
            )
        return outcome

    async def _undo_refusal(
        self, tool_use_id: str, original: ToolExecutionRecord | None, ctx: ToolContext
    ) -> tuple[str, str, str] | None:
        """Why ``original`` cannot be undone by ``ctx``'s user, as (code, message, hint)."""
        session = None if original is None else await self.store.sessions.get(original.session_id)
        if original is None or session is None or session.org_id != ctx.org_id:
            # Another org's execution does not exist, as far as this caller can tell.
            message = f"No tool execution {tool_use_id!r} in this org"
            return "not_found", message, "Undo takes the tool_use_id of a completed tool call"
        if original.status != "succeeded":
            message = (
                f"{original.tool} call {tool_use_id!r} is {original.status}: it changed nothing"
            )
            return "not_undoable", message, "Only a succeeded write can be undone"
        if original.inverse is None:
            message = f"{original.tool} declares no way to undo it"
            return "no_inverse", message, "Make the opposite change with another tool, if any"
        if original.undone_by:
            message = f"{original.tool} call {tool_use_id!r} was undone by {original.undone_by!r}"
            return "already_undone", message, "Nothing left to do"
        return None

    async def reject(self, call: ToolCallRequest) -> ToolOutcome:
        """Record that the user declined a pending call; the model gets ``rejected_by_user``.
        A call that already ran keeps (and returns) its real outcome."""
        name = self.registry.get(call.name).name if call.name in self.registry else call.name
        failure = rejection(name)
        row = await self.store.tool_executions.mark_rejected(
            tool_use_id=call.tool_use_id,
            session_id=call.session_id,
            turn_id=call.turn_id,
            tool=name,
            input=to_jsonable_python(call.input),
            error=failure.as_dict(),
        )
        return logged(call, replayed(row))


@dataclass(frozen=True, slots=True)
class _Ran:
    """How a handler ran: its output and inverse, or its failure."""

    output: Any
    inverse: dict[str, Any] | None
    failure: ToolFailure | None
    duration_ms: int
    events: tuple[Event, ...] = ()  # what the handler emitted (artifacts, messages)

    @property
    def status(self) -> Literal["succeeded", "failed"]:
        return "failed" if self.failure else "succeeded"

    @property
    def error(self) -> dict[str, Any] | None:
        return self.failure.as_dict() if self.failure else None

    def outcome(self, call: ToolCallRequest, tool: ToolDef) -> ToolOutcome:
        return ToolOutcome(
            tool_use_id=call.tool_use_id,
            tool=tool.name,
            ok=self.failure is None,
            output=self.output,
            error=self.failure,
            inverse_available=self.inverse is not None,
            duration_ms=self.duration_ms,
            events=self.events,
        )


def _first_read(tool: ToolDef, call: ToolCallRequest, ctx: ToolContext, caps: Capabilities) -> bool:
    """Whether ``call`` is a read that needs no human, in a turn's first attempt, under an
    id the turn has not used yet: nothing can be recorded under it, so no pre-read."""
    if ctx.calls_run is None or call.tool_use_id in ctx.calls_run:
        return False
    ctx.calls_run.add(call.tool_use_id)
    return tool.category == "read" and _needs(tool, caps, approved=False) is None


def approval_notice(approval: ApprovalRecord) -> dict[str, Any]:
    """What the org's notifications say of an approval (``approval_requested`` and
    ``approval_resolved``)."""
    return {
        "approval_id": approval.id,
        "agent": approval.agent,
        "tool": approval.tool,
        "mode": approval.mode,
        "status": approval.status,
        "session_id": approval.session_id,
        "run_id": approval.run_id,
        "summary": approval.summary,
        "expires_at": approval.expires_at.isoformat(),
    }


async def _check_recorded(
    recorded: Awaitable[ToolExecutionRecord | None], call: ToolCallRequest
) -> None:
    """Await a read's row recorded without waiting; log a concurrent attempt's row."""
    if await recorded is not None:
        _log.warning("tool.record_clash", tool_use_id=call.tool_use_id, turn_id=call.turn_id)


def _queued(approval: ApprovalRecord) -> ToolOutcome:
    """A deferred call's result: queued, not run; the model must not call it again."""
    output = {
        "status": "queued_for_approval",
        "approval_id": approval.id,
        "message": (
            f"{approval.tool} needs a person's approval: it is queued and runs once they "
            "approve it. Do not call it again; tell the user it waits for approval."
        ),
    }
    return ToolOutcome(
        tool_use_id=approval.tool_use_id, tool=approval.tool, ok=True, output=output, queued=True
    )


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _needs(tool: ToolDef, caps: Capabilities, *, approved: bool) -> Needs | None:
    """What a human must do before ``tool`` may run: pickers always wait for a pick and
    questions for the user's next message (either is their output); confirmed tools (by
    the tool or by the profile's approval policy) wait unless already approved."""
    if tool.kind == "user_picker":
        return "pick"
    if tool.kind == "user_question":
        return "answer"
    if caps.needs_approval(tool) and not approved:
        return "confirmation"
    return None
