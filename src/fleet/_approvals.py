"""The approval desk: answers to deferred calls, their background runs, and expiry.

A deferred call (``defer`` mode) was queued by the tool runner and its turn went on. Here
an owner's answer is recorded once (a conditional update), an approval runs the recorded
input through the runner of the agent's current profile (so a tool revoked since is
refused), once (``Approvals.claim``), and every ending (ran, rejected, expired) is logged in
the call's session as ``approval_resolved`` and published to the org's notifications.
Suspended calls (``suspend`` mode) are answered through the turn's own path (the HTTP
layer's); the desk only expires them, closing their turn.

Every worker sweeps: pending approvals past their deadline expire; approved calls that no
worker claimed (the one that took the answer died) run; approved calls whose worker died
while running them become ``interrupted`` (whether the write happened is unknown, so they
are shown to a person, never run again).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from events import ApprovalResolved, ToolError
from fleet._directory import AgentDirectory, AgentNotFoundError
from store import ApprovalRecord, Decision, Store, utcnow
from tools import (
    ToolCallRequest,
    ToolContext,
    ToolFailure,
    ToolOutcome,
    ToolRunner,
    approval_notice,
    rejection,
)

UNCLAIMED_S = 30.0
"""An approved call still unclaimed after this long lost its worker: the sweep runs it."""
INTERRUPTED_S = 900.0
"""An approved call claimed this long ago with no outcome lost its worker mid-run (no
call runs longer: an MCP toolset's timeout is at most 600 s): the sweep marks it
``interrupted``, for a person to check, and never runs it again."""
_log = structlog.get_logger("bosun.approvals")


class ApprovalNotFoundError(LookupError):
    """No approval with that id in the org."""


class ApprovalAnsweredError(Exception):
    """The approval was answered (or ended) already: ``status`` says how."""

    def __init__(self, approval: ApprovalRecord) -> None:
        super().__init__(f"Approval {approval.id!r} was already answered ({approval.status})")
        self.approval = approval


class ApprovalExpiredError(Exception):
    """The approval passed its deadline unanswered: it never runs."""

    def __init__(self, approval: ApprovalRecord) -> None:
        at = f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC"
        super().__init__(f"Approval {approval.id!r} expired at {at}; it will not run")
        self.approval = approval


class ApprovalDesk:
    """Answers, runs and expires an org's deferred calls; sweeps on every worker."""

    def __init__(
        self,
        store: Store,
        agents: AgentDirectory,
        *,
        poll_s: float = 1.0,
        interrupted_s: float = INTERRUPTED_S,
    ) -> None:
        self._store = store
        self._agents = agents
        self.poll_s = poll_s
        self.interrupted_s = interrupted_s
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def get(self, org_id: str, approval_id: str) -> ApprovalRecord:
        approval = await self._store.approvals.get(org_id, approval_id)
        if approval is None:
            raise ApprovalNotFoundError(f"No approval {approval_id!r} in this organisation")
        return approval

    async def check_open(self, approval: ApprovalRecord) -> None:
        """Raise unless ``approval`` still takes an answer (expiring it if it is due)."""
        if approval.expired_at(utcnow()):
            await self._expire(approval)
            raise ApprovalExpiredError(approval)
        if approval.status == "expired":
            raise ApprovalExpiredError(approval)
        if approval.status != "pending":
            raise ApprovalAnsweredError(approval)

    async def decide(
        self, approval: ApprovalRecord, decision: Decision, *, by: str, reason: str | None
    ) -> ApprovalRecord:
        """Answer a deferred call: a rejection is logged at once (it never runs); an
        approval runs it in the background. Raises ``ApprovalAnsweredError`` or
        ``ApprovalExpiredError`` when the call takes no answer any more."""
        await self.check_open(approval)
        store = self._store
        if not await store.approvals.decide(approval.id, decision, by=by, reason=reason):
            await self.check_open(await self.get(approval.org_id, approval.id))
        decided = await self.get(approval.org_id, approval.id)
        if decision == "rejected":
            await store.tool_executions.resolve(
                approval.tool_use_id, turn_id=approval.turn_id, session_id=approval.session_id,
                status="rejected_by_user", error=rejection(approval.tool).as_dict(),
            )  # fmt: skip
            await self._ended(decided, ApprovalResolved(**_ids(decided), decision="rejected"))
        else:
            self._spawn(self.execute(decided))
        return decided

    async def execute(self, approval: ApprovalRecord) -> None:
        """Run an approved call with its recorded input, unless another worker does."""
        if not await self._store.approvals.claim(approval.id):
            return
        outcome = await self._run(approval)
        result: dict[str, Any] = {"ok": outcome.ok}
        error = None
        if outcome.ok:
            result["output"] = outcome.output
        elif outcome.error is not None:
            result["error"] = outcome.error.as_dict()
            error = ToolError(
                code=outcome.error.code, message=outcome.error.message, hint=outcome.error.hint
            )
        event = ApprovalResolved(
            **_ids(approval), decision="approved", ok=outcome.ok,
            output=outcome.output if outcome.ok else None, error=error,
        )  # fmt: skip
        # The session's log first, then the outcome: whoever sees the outcome finds the event.
        await self._store.log.append(approval.session_id, [event])
        await self._store.approvals.finish(approval.id, result)
        _log.info("approval.ran", approval_id=approval.id, tool=approval.tool, ok=outcome.ok)
        await self._ended(await self.get(approval.org_id, approval.id), None)

    async def _run(self, approval: ApprovalRecord) -> ToolOutcome:
        """The call through the runner of its agent's current profile (approved: it does
        not ask again); an agent deleted since runs it no more."""
        call = ToolCallRequest(
            tool_use_id=approval.tool_use_id, name=approval.tool, input=approval.input,
            session_id=approval.session_id, turn_id=approval.turn_id,
        )  # fmt: skip
        try:
            agent = await self._agents.get(approval.org_id, approval.agent)
        except AgentNotFoundError:
            return _refused(approval, "agent_deleted", f"The agent {approval.agent!r} is gone")
        kit = (await self._agents.setup(agent, org_id=approval.org_id, background=True)).kit
        if kit.tools is None:
            return _refused(approval, "agent_disabled", "Tools are not enabled on this server")
        runner = ToolRunner(kit.tools, self._store, capabilities=kit.capabilities)
        ctx = ToolContext(
            store=self._store, org_id=approval.org_id, user_id=approval.user_id,
            role=approval.role,  # type: ignore[arg-type]  # recorded from a UserRole
        )  # fmt: skip
        return await runner.run(call, ctx, approved=True)

    async def _expire(self, approval: ApprovalRecord) -> None:
        """End an approval past its deadline: a deferred call never runs; a suspended
        call's turn ends ``expired``."""
        if not await self._store.approvals.expire(approval.id):
            return
        store = self._store
        if approval.mode == "suspend":
            await store.log.close_unanswered(approval.session_id, approval.turn_id, "expired")
        else:
            await store.tool_executions.resolve(
                approval.tool_use_id, turn_id=approval.turn_id, session_id=approval.session_id,
                status="expired",
            )  # fmt: skip
        ended = await self.get(approval.org_id, approval.id)
        _log.info("approval.expired", approval_id=approval.id, mode=approval.mode)
        event = ApprovalResolved(**_ids(ended), decision="expired")
        await self._ended(ended, event if approval.mode == "defer" else None)

    async def _ended(self, approval: ApprovalRecord, event: ApprovalResolved | None) -> None:
        """Log how a deferred call ended in its session (unless logged already), and tell
        the org."""
        if event is not None:
            await self._store.log.append(approval.session_id, [event])
        notice = approval_notice(approval)
        if approval.outcome is not None:
            notice["ok"] = approval.outcome.get("ok")
        await self._store.notices.publish(approval.org_id, "approval_resolved", notice)

    async def sweep(self) -> None:
        """Expire what is due; run approved calls whose worker died before claiming them;
        mark ``interrupted`` those whose worker died while running them."""
        for approval in await self._store.approvals.due():
            await self._expire(approval)
        for approval in await self._store.approvals.unrun(older_than_s=UNCLAIMED_S):
            await self.execute(approval)
        for approval in await self._store.approvals.interrupt(older_than_s=self.interrupted_s):
            _log.warning("approval.interrupted", approval_id=approval.id, tool=approval.tool)
            await self._ended(approval, None)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work, name="bosun-approval")
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            _log.error("approval.run_failed", error_type=type(exc).__name__, exc_info=exc)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="bosun-approval-sweep")

    async def stop(self) -> None:
        """Stop sweeping and let approved calls that are running finish."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # a database hiccup must not stop the sweep
                _log.error("approvals.sweep_failed", error_type=type(exc).__name__, exc_info=exc)
            await asyncio.sleep(self.poll_s)


def _ids(approval: ApprovalRecord) -> dict[str, Any]:
    return {
        "approval_id": approval.id,
        "tool_use_id": approval.tool_use_id,
        "tool": approval.tool,
        "reason": approval.reason,
    }


def _refused(approval: ApprovalRecord, code: str, message: str) -> ToolOutcome:
    failure = ToolFailure(code=code, message=message, hint=None)
    return ToolOutcome(
        tool_use_id=approval.tool_use_id, tool=approval.tool, ok=False, error=failure
    )
