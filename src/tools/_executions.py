"""One tool execution: the call, its outcome, and how an admitted call runs (the handler
on the loop, or in a thread if sync, under a timeout; its output held to the declared
model; the inverse that undo will need) or is replayed from its recorded row.

Every failure while running leaves ``invoke``/``output_of`` as a ``ToolError``, so the
runner has one path for a tool's own errors, timeouts and crashes alike. Nothing here
logs a tool's input or an exception's message (either may carry user data): only names,
codes and types.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from events import Event
from store import ToolExecutionRecord
from tools._registry import ToolDef
from tools._runtime import ToolContext, ToolError

_log = structlog.get_logger("bosun.tools")

MAX_RESULT_CHARS = 4_000
MAX_LISTED_ERRORS = 8
MAX_TOOL_USE_ID = 64  # the tool_executions.tool_use_id column

Needs = Literal["confirmation", "pick", "answer"]
"""What a call waits for: an approval, a pick among candidates, or the user's answer
(a ``user_question`` tool: the next message in the session)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRequest:
    """One tool call the model made, and where it belongs."""

    tool_use_id: str
    name: str  # registry name ("members.search") or wire name ("members_search")
    input: dict[str, Any]
    session_id: str
    turn_id: str
    step_id: str | None = None
    purpose: str = ""  # what the call is for (its step's goal): shown to whoever approves it


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolFailure:
    """Why a call did not succeed: a stable ``code``, a message naming the value, and a
    hint saying what to do next."""

    code: str
    message: str
    hint: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutcome:
    """What became of one call. ``needs`` is set when it must wait for a human (nothing
    ran); otherwise ``ok`` with a JSON-ready ``output``, or an ``error``. ``queued``: the
    call was deferred to the approval inbox (nothing ran; ``output`` says so). ``events``:
    what the handler emitted on this run (``ToolContext.emit``: ``artifact``,
    ``agent_message``), for the executor to log after ``tool_completed``; a replayed
    outcome has none (they were logged when it ran)."""

    tool_use_id: str
    tool: str  # the registry name (the name as called when no such tool exists)
    ok: bool
    output: Any = None
    error: ToolFailure | None = None
    inverse_available: bool = False
    duration_ms: int = 0
    needs: Needs | None = None
    queued: bool = False
    events: tuple[Event, ...] = ()  # what the handler emitted: logged after tool_completed

    def as_result_text(self, *, limit: int = MAX_RESULT_CHARS) -> str:
        """Compact JSON for the ``tool_result`` the model sees: the output (``{"ok":true}``
        when there is none) or ``{"error": {...}}``; cut to ``limit`` characters with a
        marker, since one large result must not eat the executor's input budget."""
        payload: Any
        if self.error is not None:
            payload = {"error": {k: v for k, v in self.error.as_dict().items() if v is not None}}
        elif self.needs is not None:
            payload = {"pending": self.needs}
        elif self.output is None:
            payload = {"ok": self.ok}
        else:
            payload = self.output
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
        if len(text) <= limit:
            return text
        marker = f"…[truncated: {len(text)} characters in all]"
        assert limit > len(marker), f"a limit of {limit} leaves no room for the result"
        return text[: limit - len(marker)] + marker


async def invoke(tool: ToolDef, args: BaseModel, ctx: ToolContext, *, timeout_s: float) -> Any:
    """Call ``tool``'s handler with ``args`` and ``ctx``; any failure becomes a ``ToolError``.

    A sync handler runs in a worker thread so it cannot stall the loop; on timeout the
    thread cannot be stopped and finishes in the background (its result is dropped).
    """
    handler = tool.handler
    assert handler is not None, f"{tool.name} has no handler; pickers never reach invoke"
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            if inspect.iscoroutinefunction(handler):
                return await handler(args, ctx)
            result = await asyncio.to_thread(handler, args, ctx)
            return await result if inspect.isawaitable(result) else result
    except ToolError:
        raise
    except TimeoutError as exc:
        if deadline.expired():
            raise _timed_out(tool, timeout_s) from None
        raise _crashed(tool, ctx, exc) from None  # the handler's own timeout, not ours
    except Exception as exc:
        raise _crashed(tool, ctx, exc) from None


def _timed_out(tool: ToolDef, timeout_s: float) -> ToolError:
    hint = (
        "Try once more, perhaps with a narrower input"
        if tool.category == "read"
        else "It may still have taken effect: check with a read tool before trying again"
    )
    return ToolError(
        "tool_timeout", f"{tool.name} did not finish within {timeout_s:g} s", hint=hint
    )


def _crashed(tool: ToolDef, ctx: ToolContext, exc: BaseException) -> ToolError:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else None
    # The type and the line are enough to find the bug; the message may quote the input.
    _log.warning(
        "tool.crashed",
        tool=tool.name,
        tool_use_id=ctx.tool_use_id,
        exc_type=type(exc).__qualname__,
        where=where,
    )
    return ToolError(
        "tool_failed",
        f"{tool.name} failed with an unexpected {type(exc).__name__}",
        hint="Tell the user it could not be done; retrying the same call is unlikely to help",
    )


def output_of(tool: ToolDef, result: Any) -> tuple[Any, Any]:
    """The handler's result as (value for ``Inverse.build``, JSON-ready output).

    With a declared output model the result must match it: a handler that returns
    something else has a bug, and the model must not be handed a malformed result.
    """
    if tool.output_model is not None:
        try:
            value = (
                result
                if isinstance(result, tool.output_model)
                else tool.output_model.model_validate(result)
            )
        except ValidationError as exc:
            _log.warning("tool.bad_output", tool=tool.name, errors=exc.error_count())
            raise _bad_output(tool) from None
        return value, value.model_dump(mode="json")
    if isinstance(result, BaseModel):
        return result, result.model_dump(mode="json")
    try:
        return result, to_jsonable_python(result)
    except PydanticSerializationError:
        _log.warning("tool.bad_output", tool=tool.name, output_type=type(result).__qualname__)
        raise _bad_output(tool) from None


def _bad_output(tool: ToolDef) -> ToolError:
    return ToolError(
        "tool_failed",
        f"{tool.name} returned a result that does not match its declared output",
        hint="Tell the user it could not be done; retrying the same call is unlikely to help",
    )


def inverse_of(tool: ToolDef, args: BaseModel, value: Any) -> dict[str, Any] | None:
    """The stored undo of a succeeded write: ``{"tool": name, "input": {...}}``, or
    ``None`` when it declares none. A broken ``build`` loses the undo, not the write."""
    if tool.inverse is None:
        return None
    try:
        built = tool.inverse.build(args, value)
        return {"tool": tool.inverse.tool, "input": to_jsonable_python(built)}
    except Exception as exc:
        _log.warning("tool.inverse_failed", tool=tool.name, exc_type=type(exc).__qualname__)
        return None


def describe_errors(exc: ValidationError) -> str:
    """``field: problem`` for each validation error, without the offending values (the
    model has them; logs and results should not repeat them)."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    parts = [
        f"{'.'.join(map(str, err['loc'])) or '(input)'}: {err['msg']}"
        for err in errors[:MAX_LISTED_ERRORS]
    ]
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return "; ".join(parts)


# recorded executions


def row_of(call: ToolCallRequest, tool: ToolDef) -> dict[str, Any]:
    """The columns ``ToolExecutions.start`` records for ``call``."""
    return {
        "tool_use_id": call.tool_use_id,
        "session_id": call.session_id,
        "turn_id": call.turn_id,
        "tool": tool.name,
        "input": to_jsonable_python(call.input),
    }


def settled_outcome(
    row: ToolExecutionRecord, call: ToolCallRequest, tool: ToolDef
) -> ToolOutcome | None:
    """The outcome to return instead of running, if the recorded row (this turn's, under
    the call's id) decides it: a different call under the same id, or one already
    succeeded or rejected."""
    same = (
        row.tool_use_id == call.tool_use_id
        and row.turn_id == call.turn_id
        and row.tool == tool.name
        and row.input == to_jsonable_python(call.input)
    )
    if not same:
        # An approval is bound to the exact call shown; never run another under its id.
        message = (
            f"tool_use_id {call.tool_use_id!r} is already recorded for a different call "
            "in this turn"
        )
        return refused(call, tool.name, "tool_use_conflict", message, "Use a new tool_use_id")
    if row.status in ("succeeded", "rejected_by_user"):
        return replayed(row)
    return None


def rejection(tool: str) -> ToolFailure:
    """What the model sees for a call the user declined."""
    return ToolFailure(
        code="rejected_by_user",
        message=f"The user declined to run {tool}; nothing was done",
        hint="Do not retry it; ask the user what they would like instead",
    )


def replayed(row: ToolExecutionRecord) -> ToolOutcome:
    """The outcome a recorded, settled execution stands for (nothing runs)."""
    error = None
    if row.error and row.status != "succeeded":
        error = ToolFailure(
            code=str(row.error["code"]),
            message=str(row.error.get("message", "")),
            hint=row.error.get("hint"),
        )
    return ToolOutcome(
        tool_use_id=row.tool_use_id,
        tool=row.tool,
        ok=row.status == "succeeded",
        output=row.output if row.status == "succeeded" else None,
        error=error,
        inverse_available=row.undoable,
    )


def refused(
    call: ToolCallRequest, tool: str, code: str, message: str, hint: str | None
) -> ToolOutcome:
    return ToolOutcome(
        tool_use_id=call.tool_use_id,
        tool=tool,
        ok=False,
        error=ToolFailure(code=code, message=message, hint=hint),
    )


def undo_id_of(tool_use_id: str) -> str:
    """The tool_use_id of the execution that undoes ``tool_use_id``: derived, not random,
    so a repeated undo finds the first one's row."""
    undo_id = f"{tool_use_id}-undo"
    if len(undo_id) <= MAX_TOOL_USE_ID:
        return undo_id
    # Too long for the column: hash it, still derived from the original.
    return f"undo-{hashlib.sha256(tool_use_id.encode()).hexdigest()[:40]}"


def logged(call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
    """Log one outcome as ``tool.executed`` (names, ids, codes, timing: never input or
    output) and return it. ``router``/``action`` split the registry name at its first
    dot; ``outcome`` is ``ok``, the error code, ``needs_confirmation``, ``needs_pick`` or
    ``queued_for_approval``.
    Inside a turn the trace, org and session ids come from structlog's context variables
    (bound by the turn); the stream layer counts these lines as tool metrics."""
    router, _, action = outcome.tool.partition(".")
    if outcome.needs is not None:
        result = f"needs_{outcome.needs}"
    elif outcome.queued:
        result = "queued_for_approval"
    elif outcome.error is not None:
        result = outcome.error.code
    else:
        result = "ok" if outcome.ok else "failed"
    _log.info(
        "tool.executed",
        tool=outcome.tool,
        router=router,
        action=action,
        tool_use_id=call.tool_use_id,
        session_id=call.session_id,
        turn_id=call.turn_id,
        step_id=call.step_id,
        outcome=result,
        duration_ms=outcome.duration_ms,
    )
    return outcome
