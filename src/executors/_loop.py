"""The executor sub-agent: one bounded tool loop per plan step.

``drive`` is the whole loop: a small function over the tagged next-step union
(``CallModel | WrapUp | RunTools | Suspend | Finish``), each handler a plain async function.
``run_step`` builds the step's fixed prompt, bounds the loop by the wall-time deadline and
turns how it ended into a ``StepResult`` or a ``Suspended``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import assert_never

from context import HistoryFit, Item, SectionFill, executor_request, fit_history
from events import ContextBudget, StepError
from executors._calls import close_in_flight, refuse_all, resume_tools, run_tools
from executors._config import Emit, ExecutorKit, StepShare, TurnScope
from executors._prompt import EXECUTOR_PROMPT, FORCED_PROMPT, Voice, build_prompt, forced_note
from executors._replay import guard_transcript
from executors._results import StepOutcome, StepResult, Suspended
from executors._state import (
    CallModel,
    Finish,
    NextStep,
    RunTools,
    StepEnv,
    StepState,
    Suspend,
    WrapUp,
    next_turn,
    now,
    partial_summary,
)
from planner import PlannedStep
from providers import Message, ModelError, ModelRequest, TextPart, ToolCall
from providers import call_model as stream_reply
from tools import COMMUNICATION_TOOLS, READ_RESULT_TOOL, ToolDef

CONVERSATION = "conversation"


async def run_step(
    step: PlannedStep,
    *,
    kit: ExecutorKit,
    scope: TurnScope,
    emit: Emit,
    data: Sequence[Item] = (),
    final_answer: bool = False,
    share: StepShare | None = None,
) -> StepOutcome:
    """Run one plan step as a bounded tool loop and say how it ended.

    Emits ``context_budget`` (the step's prompt), then ``text_delta`` (with ``step_id``,
    or without it when ``final_answer``: a ``tool`` plan's executor writes the answer),
    ``tool_started``/``tool_completed`` as it goes. A model, tool or bound failure never
    raises: it ends the step ``ok=False`` with a partial summary. ``step.tools`` must be
    registered (a validated plan's are); ``data`` fills the data section, most important
    first.
    """
    user_data = await kit.user_data.load() if kit.user_data is not None else None
    state = _fresh_state(step, kit, data, share, user_data, caller=scope.caller)
    emit(ContextBudget(role="executor", report=state.prompt.report.to_dict(), step_id=step.id))
    env = StepEnv(
        step_id=step.id, kit=kit, scope=scope, emit=emit, final_answer=final_answer, goal=step.goal
    )
    return await _bounded(step.id, state, env, _first_turn(state, env))


async def resume_step(
    step: PlannedStep,
    suspended: Suspended,
    *,
    kit: ExecutorKit,
    scope: TurnScope,
    emit: Emit,
    data: Sequence[Item] = (),
    final_answer: bool = False,
    share: StepShare | None = None,
) -> StepOutcome:
    """Go on with a step that ``suspended`` once the user has answered its pending calls.

    The prompt is rebuilt from the same step and ``data`` (so it is the same prompt), the
    transcript and counters come from ``suspended``; the pending calls then run in message
    order through the runner, which knows from its records what the user approved,
    rejected or picked, and the loop continues. The wall-time bound starts afresh: the
    user's thinking time is not the step's. Usage counts from zero again, so what this
    returns is what the resumed part spent (``tokens`` and ``tool_calls`` are the step's
    totals).
    """
    state = _fresh_state(step, kit, data, share, caller=scope.caller)
    state.messages = list(suspended.messages)
    state.tool_calls = suspended.tool_calls
    state.failed_tool_calls = suspended.failed_tool_calls
    state.model_turns = suspended.model_turns
    state.log = list(suspended.log)
    state.earlier_tokens = suspended.tokens
    env = StepEnv(
        step_id=step.id, kit=kit, scope=scope, emit=emit, final_answer=final_answer, goal=step.goal
    )
    if not suspended.pending:  # a checkpoint between model turns (a takeover): call on
        return await _bounded(step.id, state, env, _first_turn(state, env))
    calls = tuple(ToolCall(id=p.tool_use_id, name=p.tool, input=p.input) for p in suspended.pending)
    return await _bounded(step.id, state, env, resume_tools(state, env, calls, suspended.results))


def _fresh_state(
    step: PlannedStep,
    kit: ExecutorKit,
    data: Sequence[Item],
    share: StepShare | None,
    user_data: SectionFill | None = None,
    *,
    caller: str = "",
) -> StepState:
    prompt = build_prompt(
        step_id=step.id,
        goal=step.goal,
        tools=_step_tools(step, kit),
        data=data,
        budget=kit.budget,
        counter=kit.counter,
        voice=Voice(
            identity=kit.identity,
            instructions=FORCED_PROMPT if kit.forced else EXECUTOR_PROMPT,
            caller=caller,
            user_data=user_data,
            client=kit.client,
            to_user=kit.to_user,
        ),
        knowledge=kit.knowledge,
        history=_history(kit),
    )
    share = share or StepShare()
    started = now()
    wall_s = min(kit.limits.wall_time_s, share.wall_s or kit.limits.wall_time_s)
    calls = min(kit.limits.max_tool_calls, step.max_tool_calls, share.tool_calls or 1 << 30)
    return StepState(
        prompt=prompt, max_calls=calls, started=started, deadline=started + wall_s, share=share
    )


def _history(kit: ExecutorKit) -> HistoryFit | None:
    """The conversation so far, fitted into the budget's ``conversation`` section, for a
    step that continues it (``kit.history``)."""
    if kit.history is None or CONVERSATION not in kit.budget.names:
        return None
    return fit_history(kit.history, kit.budget.tokens(CONVERSATION), counter=kit.counter)


def _step_tools(step: PlannedStep, kit: ExecutorKit) -> list[ToolDef]:
    """The step's tools. A forced loop's communication tools come first, whether its plan
    gave them or not: tools that do not fit the budget are cut from the end, and a loop
    that cannot talk or stop is useless. A step that sees the conversation may also read
    an earlier result whole (``tool_results.read``), when its agent may."""
    tools = [kit.registry.get(name) for name in step.tools]
    if (
        kit.history is not None
        and READ_RESULT_TOOL in kit.registry
        and READ_RESULT_TOOL not in step.tools
    ):
        tools.append(kit.registry.get(READ_RESULT_TOOL))
    if not kit.forced:
        return tools
    talk = [t for t in kit.registry if t.name in COMMUNICATION_TOOLS]
    return [*talk, *(t for t in tools if t.name not in COMMUNICATION_TOOLS)]


async def _bounded(
    step_id: str, state: StepState, env: StepEnv, first: Awaitable[NextStep]
) -> StepOutcome:
    """Run the loop from ``first`` under the wall-time deadline; say how the step ended."""
    deadline = asyncio.timeout_at(state.deadline)
    try:
        async with deadline:
            end = await drive(state, env, await first)
    except TimeoutError:
        if not deadline.expired():
            raise  # not ours: a TimeoutError escaping a handler is a bug to surface
        why = f"the step's wall time of {state.deadline - state.started:.3g} s ran out"
        close_in_flight(state, env, f"Stopped: {why}.")
        error = StepError(code="step_timed_out", message=f"Stopped: {why}")
        end = Finish(False, "timed_out", partial_summary(state, why), error, cut="time_limit")
    except asyncio.CancelledError:
        # The turn was cancelled: a tool cut off mid-run still gets its end, then stop.
        close_in_flight(state, env, "Stopped: the turn was cancelled.", code="cancelled")
        raise
    return _outcome(step_id, state, end, forced=env.kit.forced)


async def _first_turn(state: StepState, env: StepEnv) -> NextStep:
    return next_turn(state, env, now())


async def drive(state: StepState, env: StepEnv, step: NextStep | None = None) -> Suspend | Finish:
    """The loop: dispatch on the next step (by default, a model call) until the step
    suspends or finishes."""
    if step is None:
        step = next_turn(state, env, now())
    while True:
        match step:
            case CallModel() | WrapUp():
                step = await call_model(state, env, step)
            case RunTools():
                step = await run_tools(state, env, step)
            case Suspend() | Finish():
                return step
            case _:
                assert_never(step)


async def call_model(state: StepState, env: StepEnv, step: CallModel | WrapUp) -> RunTools | Finish:
    """One model turn: stream its text out, collect its tool calls, append its message.

    A wrap-up turn first appends the note saying what remains and calls with tools off;
    if the model calls tools even so, the step has overrun its bounds. A forced loop
    calls with ``tool_choice="any"`` instead (``_forced_call``).
    """
    if env.kit.forced:
        return await _forced_call(state, env, step)
    if isinstance(step, WrapUp):
        state.messages.append(Message.user(step.note))
    guard_transcript(state, env)  # every call pairs with a result, or the provider refuses
    await refresh_user_data(state, env)
    request = executor_request(
        state.prompt.parts,
        state.messages,
        tool_choice="none" if isinstance(step, WrapUp) else "auto",
    )
    calls = await _reply(state, env, request)
    if isinstance(calls, Finish):
        return calls
    text = _text_of(state.messages[-1])
    if not calls:
        summary = text.strip() or "(the executor gave no answer text)"
        if isinstance(step, WrapUp):  # an answer, cut short by the bound that asked for it
            return Finish(ok=True, ended="wrapped_up", summary=summary, cut=step.cut)
        return Finish(ok=True, ended="answered", summary=summary)
    if isinstance(step, WrapUp):
        await refuse_all(
            state, env, calls, code="tool_budget_spent",
            message="tools are off: the step was asked to wrap up",
        )  # fmt: skip
        why = f"it kept calling tools after being asked to wrap up ({'; '.join(step.reasons)})"
        error = StepError(code="step_overran", message=f"Stopped: {why}")
        return Finish(False, "overran", partial_summary(state, why), error, cut=step.cut)
    return RunTools(calls=calls)


async def _forced_call(
    state: StepState, env: StepEnv, step: CallModel | WrapUp
) -> RunTools | Finish:
    """One iteration of the forced loop: a model call that must call one tool. A wrap-up
    only adds its note (once): tools cannot be turned off, the model is told to finish."""
    if isinstance(step, WrapUp) and not state.wrap_noted:
        state.messages.append(Message.user(forced_note(step.note)))
        state.wrap_noted = True
    guard_transcript(state, env)
    await refresh_user_data(state, env)
    request = executor_request(state.prompt.parts, state.messages, tool_choice="any")
    # exactly one tool per iteration (trainer spec §12.1); run_tools enforces it as well
    request = replace(request, parallel_tool_calls=False)
    state.iterations += 1
    calls = await _reply(state, env, request)
    if isinstance(calls, Finish):
        return calls
    if calls:
        return RunTools(calls=calls)
    why = "the model replied without calling a tool, which this agent must always do"
    error = StepError(code="no_tool_call", message=f"Stopped: {why}")
    return Finish(False, "no_tool_call", partial_summary(state, why), error)


async def _reply(
    state: StepState, env: StepEnv, request: ModelRequest
) -> tuple[ToolCall, ...] | Finish:
    """Take a step, call the model, append its message: its calls, or how the step ended
    (the agent's step limit ran out, the provider failed)."""
    steps = env.kit.steps
    if steps is not None and not steps.take():
        why = f"the agent reached its limit of {steps.limit} steps"
        error = StepError(code="max_steps", message=f"Stopped: {why}")
        return Finish(False, "max_steps", partial_summary(state, why), error)
    state.model_turns += 1
    try:
        calls = await _stream(state, env, request)
    except ModelError as exc:
        why = f"the model failed ({exc.code}: {exc.message})"
        error = StepError(code=exc.code, message=exc.message, retry_after_s=exc.retry_after_s)
        return Finish(False, "model_failed", partial_summary(state, why), error)
    text, state.text = state.text, ""
    parts = ((TextPart(text=text),) if text else ()) + calls
    state.messages.append(Message(role="assistant", parts=parts))
    if text.strip():
        state.last_text = text
    return calls


def _said(state: StepState) -> bool:
    """Whether the step's model wrote any text (the turn's answer, in a ``tool`` plan):
    in a finished model turn, or in the one cut off."""
    written = (_text_of(m) for m in state.messages if m.role == "assistant")
    return bool(state.text.strip()) or any(text.strip() for text in written)


def _text_of(message: Message) -> str:
    return "".join(part.text for part in message.parts if isinstance(part, TextPart))


async def refresh_user_data(state: StepState, env: StepEnv) -> None:
    """Reload the agent's user-data block before a model call (spec §4.4: fresh on every
    call), except the step's first, whose prompt was built with it a moment ago. Unchanged
    data gives the same bytes, so the block's cache breakpoint still hits."""
    loader = env.kit.user_data
    if loader is None or not (state.model_turns or state.messages):
        return
    fill = await loader.load()
    if fill.text != state.prompt.parts.user_data:
        parts = replace(state.prompt.parts, user_data=fill.text)
        state.prompt = replace(state.prompt, parts=parts)


async def _stream(state: StepState, env: StepEnv, request: ModelRequest) -> tuple[ToolCall, ...]:
    """Stream one reply: text out as it comes (kept in ``state.text``), calls collected."""
    called = await stream_reply(env.kit.model, request, on_text=lambda t: _say(state, env, t))
    state.usage = state.usage + called.completion.usage
    state.cost_usd_micros += called.cost_usd_micros
    state.model = called.completion.model
    return called.calls


def _say(state: StepState, env: StepEnv, text: str) -> None:
    if env.kit.forced:  # its words reach the user only through message_notify_user
        state.text += text
        return
    if env.final_answer and state.streamed and not state.text:
        env.text("\n\n")  # an answer written over several model turns: keep them apart
    env.text(text)
    state.text += text
    state.streamed = True


def _outcome(step_id: str, state: StepState, end: Suspend | Finish, *, forced: bool) -> StepOutcome:
    duration_ms = round((now() - state.started) * 1000)
    match end:
        case Suspend(pending=pending, results=results):
            return Suspended(
                step_id=step_id, pending=pending, results=results,
                tool_calls=state.tool_calls, failed_tool_calls=state.failed_tool_calls,
                model_turns=state.model_turns,
                log=tuple(state.log), tokens=state.tokens, usage=state.usage,
                cost_usd_micros=state.cost_usd_micros, model=state.model,
                duration_ms=duration_ms, messages=tuple(state.messages),
                budget=state.prompt.report,
            )  # fmt: skip
        case Finish(ok=ok, ended=ended, summary=summary, error=error, cut=cut):
            return StepResult(
                step_id=step_id, ok=ok, summary=summary, ended=ended, error=error, cut=cut,
                said=None if forced else _said(state),
                tool_calls=state.tool_calls, failed_tool_calls=state.failed_tool_calls,
                tokens=state.tokens, usage=state.usage,
                cost_usd_micros=state.cost_usd_micros, model=state.model,
                duration_ms=duration_ms, messages=tuple(state.messages),
                budget=state.prompt.report,
            )  # fmt: skip
        case _:
            assert_never(end)
