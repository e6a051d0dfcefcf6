"""The ``RunTools`` handler: run one assistant message's tool calls through the runner.

Before anything runs, every call is checked (``runner.check``, no side effects): if any
needs the user (a confirmation or a pick), nothing of the message runs and the step
suspends with all its calls pending. Otherwise the calls run in order, each bracketed by
``tool_started``/``tool_completed``; the executor itself refuses calls outside the step's
tools, past the tool-call budget, or to a tool that kept failing the same way. A forced
loop runs one tool per iteration (trainer spec §12.1): only a message's first call runs,
each extra one gets a ``one_tool_per_turn`` result, so every call still has its result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import assert_never

import telemetry
from context import artifact_text, fit_text
from events import AgentMessage, ArtifactSaved, ToolCompleted, ToolStarted
from events import ToolError as ToolErrorEvent
from executors._results import PendingCall, picker_fields
from executors._state import (
    CallModel,
    Finish,
    RunTools,
    StepEnv,
    StepState,
    Suspend,
    WrapUp,
    next_turn,
    now,
)
from providers import Message, ToolCall, ToolResult
from tools import (
    COMMUNICATION_TOOLS,
    IDLE_TOOL,
    NOTIFY_TOOL,
    Needs,
    ToolCallRequest,
    ToolDef,
    ToolFailure,
    ToolOutcome,
)

Verdict = ToolDef | ToolOutcome | None  # None: not one of the step's tools
ONE_TOOL_PER_TURN = "one_tool_per_turn"


async def run_tools(
    state: StepState, env: StepEnv, step: RunTools
) -> CallModel | WrapUp | Suspend | Finish:
    """Run ``step.calls`` (or suspend before any runs), append their results, go on."""
    verdicts = [_check(state, env, call) for call in step.calls]
    if any(_needs(env, v) for i, v in enumerate(verdicts) if not _extra(env, i)):
        return await _suspend(env, step.calls, verdicts)
    return await _in_order(state, env, step.calls, verdicts, [])


def _extra(env: StepEnv, index: int) -> bool:
    """Whether the message's call at ``index`` is one a forced loop never runs (nor asks
    the user about): all but the first."""
    return env.kit.forced and index > 0


async def resume_tools(
    state: StepState, env: StepEnv, calls: Sequence[ToolCall], done: Sequence[ToolResult]
) -> CallModel | WrapUp | Suspend | Finish:
    """Run the calls a suspended message left (``done`` are those that had run), now that
    the user has answered: the runner settles each from its records (an approval runs the
    call, a rejection or a pick is replayed), the rest run as usual; then the loop goes on."""
    verdicts = [_check(state, env, call) for call in calls]
    return await _in_order(state, env, calls, verdicts, list(done))


async def _in_order(
    state: StepState,
    env: StepEnv,
    calls: Sequence[ToolCall],
    verdicts: Sequence[Verdict],
    results: list[ToolResult],
) -> CallModel | WrapUp | Suspend | Finish:
    """Run ``calls`` in order, appending their results after ``results`` as one message."""
    idle = False
    for index, (call, verdict) in enumerate(zip(calls, verdicts, strict=True)):
        if env.kit.forced and results:  # the message's first call has its result
            outcome = _one_per_turn(state, env, call)
        else:
            outcome = await _execute(state, env, call, verdict)
        if outcome.needs is not None:  # the runner asked for the user after all
            first = _pending(call, verdict, outcome.needs)
            rest = zip(calls[index + 1 :], verdicts[index + 1 :], strict=True)
            later = (_pending(c, v, None if env.kit.forced else _needs(env, v)) for c, v in rest)
            return Suspend(pending=(first, *later), results=tuple(results))
        results.append(_result(state, env, outcome))
        if env.kit.forced and outcome.ok:
            idle = idle or outcome.tool == IDLE_TOOL
            _tell(state, env, call, outcome)
    state.messages.append(Message(role="user", parts=tuple(results)))
    if idle:  # the forced loop's normal end
        return Finish(ok=True, ended="idle", summary=_told(state))
    return next_turn(state, env, now())


def _tell(state: StepState, env: StepEnv, call: ToolCall, outcome: ToolOutcome) -> None:
    """A forced loop's message to the user is its answer: stream it as answer text (a
    step's, with its ``step_id``, in a ``complex`` plan) and keep it for the summary."""
    message = call.input.get("message") if outcome.tool == NOTIFY_TOOL else None
    if not isinstance(message, str) or not message.strip():
        return
    env.text(("\n\n" if state.told else "") + message)
    state.told.append(message)


def _told(state: StepState) -> str:
    """What a forced loop that went idle reports: what it told the user."""
    return "\n\n".join(state.told) or "(the agent went idle without a message to the user)"


async def _suspend(env: StepEnv, calls: Sequence[ToolCall], verdicts: Sequence[Verdict]) -> Suspend:
    """Stop before any call of the message runs. The runner records each call that needs
    the user as pending (nothing runs), so it survives a restart; the rest wait their turn."""
    pending = []
    for index, (call, verdict) in enumerate(zip(calls, verdicts, strict=True)):
        needs = None if _extra(env, index) else _needs(env, verdict)
        if needs is not None:
            assert isinstance(verdict, ToolDef)
            with _tool_span(verdict.name, call, verdict) as span:
                outcome = await env.kit.runner.run(_request(env, call, verdict.name), env.scope.ctx)
                traced_outcome(span, outcome)
            needs = outcome.needs
        pending.append(_pending(call, verdict, needs))
    return Suspend(pending=tuple(pending))


async def refuse_all(
    state: StepState, env: StepEnv, calls: Sequence[ToolCall], *, code: str, message: str
) -> None:
    """Answer calls that will not run (events and results), keeping the transcript whole."""
    results = []
    for call in calls:
        outcome = _refusal(call, _tool_name(state, call), code, message, hint=None)
        _started(state, env, call)
        _completed(state, env, outcome)
        results.append(_result(state, env, outcome))
    state.messages.append(Message(role="user", parts=tuple(results)))


def _one_per_turn(state: StepState, env: StepEnv, call: ToolCall) -> ToolOutcome:
    """Answer a forced loop's extra call without running it (events and outcome)."""
    name = _tool_name(state, call)
    outcome = _refusal(
        call, name, ONE_TOOL_PER_TURN,
        f"{name} did not run: this agent runs one tool per turn, and the reply's first "
        "call was the one run",
        hint="Call it again in your next turn if it is still needed.",
    )  # fmt: skip
    _started(state, env, call)
    _completed(state, env, outcome)
    return outcome


def close_in_flight(
    state: StepState, env: StepEnv, message: str, *, code: str = "step_timed_out"
) -> None:
    """Complete a tool call cut off by the step's deadline (or a cancel), so its start has
    an end."""
    if state.in_flight is not None:
        error = ToolErrorEvent(code=code, message=message)
        env.emit(ToolCompleted(tool_use_id=state.in_flight, ok=False, error=error))
        state.in_flight = None
        state.failed_tool_calls += 1


def _request(env: StepEnv, call: ToolCall, name: str) -> ToolCallRequest:
    return ToolCallRequest(
        tool_use_id=call.id,
        name=name,
        input=call.input,
        session_id=env.scope.session_id,
        turn_id=env.scope.turn_id,
        step_id=env.step_id,
        purpose=env.goal,
    )


def _tool_name(state: StepState, call: ToolCall) -> str:
    tool = _tool_of(state, call)
    return tool.name if tool is not None else call.name


def _tool_of(state: StepState, call: ToolCall) -> ToolDef | None:
    """The step's tool a call names (by wire name, or the dotted name a model may echo)."""
    tools = state.prompt.tools
    return tools.get(call.name) or tools.get(call.name.replace(".", "_"))


def _check(state: StepState, env: StepEnv, call: ToolCall) -> Verdict:
    tool = _tool_of(state, call)
    if tool is None:
        return None
    return env.kit.runner.check(_request(env, call, tool.name), env.scope.role)


def _needs(env: StepEnv, verdict: Verdict) -> Needs | None:
    """What the user must do before the call runs; a call whose approval is deferred
    needs nothing now (the runner queues it and the step goes on)."""
    if not isinstance(verdict, ToolDef):
        return None
    if verdict.kind == "user_picker":
        return "pick"
    if verdict.kind == "user_question":
        return "answer"
    if not verdict.needs_confirmation:
        return None
    return None if env.kit.runner.defers(verdict) else "confirmation"


def _pending(call: ToolCall, verdict: Verdict, needs: Needs | None) -> PendingCall:
    name = verdict.name if isinstance(verdict, ToolDef) else call.name
    match needs:
        case "pick":
            kind, prompt, candidates = picker_fields(call.input)
            return PendingCall(
                tool_use_id=call.id, tool=name, input=call.input, needs="pick",
                kind=kind, prompt=prompt, candidates=candidates,
            )  # fmt: skip
        case "answer":
            return PendingCall(
                tool_use_id=call.id, tool=name, input=call.input, needs="answer",
                prompt=str(call.input.get("question", "")), options=_options(call),
            )  # fmt: skip
        case "confirmation":
            always = isinstance(verdict, ToolDef) and verdict.confirm == "always"
            return PendingCall(
                tool_use_id=call.id, tool=name, input=call.input, needs="confirmation",
                confirm="always" if always else "destructive",
            )  # fmt: skip
        case None:
            return PendingCall(tool_use_id=call.id, tool=name, input=call.input)
        case _:
            assert_never(needs)


def _options(call: ToolCall) -> tuple[str, ...]:
    options = call.input.get("options")
    return tuple(str(o) for o in options) if isinstance(options, list) else ()


async def _execute(state: StepState, env: StepEnv, call: ToolCall, verdict: Verdict) -> ToolOutcome:
    """``_one`` in the call's ``execute_tool`` span (when tracing is on): the tool, the call
    id, its category and outcome; a confirmation or pick asked is an event on it."""
    with _tool_span(_tool_name(state, call), call, verdict) as span:
        outcome = await _one(state, env, call, verdict)
        traced_outcome(span, outcome)
        return outcome


@contextlib.contextmanager
def _tool_span(name: str, call: ToolCall, verdict: Verdict) -> Iterator[telemetry.SpanLike]:
    """A call's ``execute_tool`` span, current while it runs (its outbound requests carry
    it); its arguments only when the operator opted in to content capture."""
    if telemetry.STATE.tracer is None:  # off: not even the span's attributes are built
        yield telemetry.NO_SPAN
        return
    attributes: telemetry.Attributes = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
    }  # fmt: skip
    if isinstance(verdict, ToolDef):
        attributes = {**attributes, "bosun.tool.category": verdict.category}
    with telemetry.span(f"execute_tool {name}", attributes) as span:
        if (arguments := telemetry.content(call.input)) is not None:
            span.set_attribute("gen_ai.tool.call.arguments", arguments)
        yield span


async def _one(state: StepState, env: StepEnv, call: ToolCall, verdict: Verdict) -> ToolOutcome:
    """One call: refused by the executor, refused by the runner's check, or run."""
    refusal = _refuse(state, env, call, verdict)
    _started(state, env, call)
    if refusal is not None:
        outcome = refusal
    elif isinstance(verdict, ToolDef):
        state.tool_calls += 1
        outcome = await env.kit.runner.run(_request(env, call, verdict.name), env.scope.ctx)
        if outcome.needs is not None:
            return outcome  # stays in flight: it completes on resume
    else:
        assert verdict is not None, "a call outside the step's tools is always refused"
        state.tool_calls += 1
        outcome = verdict  # the runner's check refused it
    _completed(state, env, outcome)
    if not outcome.ok and refusal is None:
        code = outcome.error.code if outcome.error is not None else "failed"
        state.failures[(outcome.tool, code)] += 1
    return outcome


def _not_allowed(env: StepEnv, call: ToolCall) -> ToolOutcome | None:
    """The runner's refusal of a call outside the step when the agent may not use that tool
    at all (``tool_not_allowed``): the model learns it is no use asking again."""
    checked = env.kit.runner.check(_request(env, call, call.name), env.scope.role)
    if isinstance(checked, ToolOutcome) and checked.error is not None:
        return checked if checked.error.code == "tool_not_allowed" else None
    return None


def _refuse(state: StepState, env: StepEnv, call: ToolCall, verdict: Verdict) -> ToolOutcome | None:
    """The executor's own refusals; such calls do not count against the budget."""
    if verdict is None:
        if (banned := _not_allowed(env, call)) is not None:
            return banned
        names = ", ".join(sorted(state.prompt.tools)) or "none"
        return _refusal(
            call, call.name, "unknown_tool", f"{call.name!r} is not a tool of this step",
            hint=f"The tools of this step are: {names}.",
        )  # fmt: skip
    name = verdict.name if isinstance(verdict, ToolDef) else verdict.tool
    retries = env.kit.limits.retries_per_tool
    for (tool, code), failures in state.failures.items():
        if tool == name and failures > retries:
            return _refusal(
                call, name, "retries_exhausted",
                f"{name} failed {failures} times with code {code!r}; it is not called again "
                "in this step",
                hint="Answer with what you have, or use another tool.",
            )  # fmt: skip
    talks = env.kit.forced and name in COMMUNICATION_TOOLS  # never cut off from the user
    if state.tool_calls >= state.max_calls and not talks:
        return _refusal(
            call, name, "tool_budget_spent",
            f"this step's {state.max_calls} tool calls are used; {name} did not run",
            hint="Answer with what you have.",
        )  # fmt: skip
    return None


def _refusal(
    call: ToolCall, name: str, code: str, message: str, *, hint: str | None
) -> ToolOutcome:
    failure = ToolFailure(code=code, message=message, hint=hint)
    return ToolOutcome(tool_use_id=call.id, tool=name, ok=False, error=failure)


def _started(state: StepState, env: StepEnv, call: ToolCall) -> None:
    state.in_flight = call.id
    env.emit(
        ToolStarted(
            tool_use_id=call.id, tool=_tool_name(state, call), input=call.input, step_id=env.step_id
        )
    )


def _completed(state: StepState, env: StepEnv, outcome: ToolOutcome) -> None:
    error = outcome.error
    env.emit(
        ToolCompleted(
            tool_use_id=outcome.tool_use_id,
            ok=outcome.ok,
            output=outcome.output if outcome.ok else None,
            error=None
            if error is None
            else ToolErrorEvent(code=error.code, message=error.message, hint=error.hint),
            inverse_available=outcome.inverse_available,
        )
    )
    for event in outcome.events:  # what the tool emitted: its artifacts, its message
        if env.kit.forced and isinstance(event, AgentMessage) and event.text.strip():
            # ``_tell`` streams its text as the answer: say so, so it is shown once
            event = replace(event, in_answer=True)
        env.emit(event)
    state.in_flight = None
    state.failed_tool_calls += not outcome.ok
    status = "ok" if outcome.ok else f"failed ({error.code if error else 'error'})"
    state.log.append(f"{outcome.tool} {status}")


def _result(state: StepState, env: StepEnv, outcome: ToolOutcome) -> ToolResult:
    """The outcome as the model sees it, fitted once, now, and never again."""
    limit = env.kit.limits.max_result_tokens
    fitted = fit_text("result", limit, outcome.as_result_text(), counter=env.kit.counter)
    # The artifacts the call made, as the model is shown them (the summary, not the payload).
    tags = [artifact_text(e) for e in outcome.events if isinstance(e, ArtifactSaved)]
    content = "\n".join((fitted.text, *tags))
    return ToolResult(tool_use_id=outcome.tool_use_id, content=content, is_error=not outcome.ok)


def traced_outcome(span: telemetry.SpanLike, outcome: ToolOutcome) -> None:
    """What became of a call, on its span: the outcome, the error code (``error.type``),
    the confirmation or pick it waits for, its output when content capture is on."""
    if not span.is_recording():
        return
    if outcome.needs is not None:
        span.set_attribute("bosun.tool.outcome", f"needs_{outcome.needs}")
        span.add_event(f"bosun.{outcome.needs}_requested", {"gen_ai.tool.name": outcome.tool})
    elif outcome.queued:
        span.set_attribute("bosun.tool.outcome", "queued_for_approval")
        span.add_event("bosun.approval_queued", {"gen_ai.tool.name": outcome.tool})
    elif outcome.ok:
        span.set_attribute("bosun.tool.outcome", "ok")
    else:
        code = outcome.error.code if outcome.error is not None else "failed"
        span.set_attribute("bosun.tool.outcome", code)
        telemetry.fail(span, code)
    if outcome.ok and (result := telemetry.content(outcome.output)) is not None:
        span.set_attribute("gen_ai.tool.call.result", result)
