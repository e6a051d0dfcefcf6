"""Triage and plan in one cheap-model call, with one repair round and a fallback.

A plan that fails validation is re-asked once with the problems; if it still fails, or
the planner does not answer in time, or (for a turn: ``on_error="fallback"``) the
provider fails, the turn gets the fallback plan: a direct answer with the agent's tools
and the sources the invalid plan picked validly (trainer spec §12.3: the initializer's
errors must not stop the main agent). The reason names the first problem.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import ValidationError

from context import (
    PLANNER_BUDGET,
    BudgetReport,
    ClientContext,
    Item,
    RoleBudget,
    SectionFill,
    TokenCounter,
    client_section,
    fit_growing,
    fit_history,
    fit_section,
    fit_text,
)
from planner._plan import PLAN_SCHEMA, Plan, PlannedStep, SourcePick
from planner._prompt import (
    NAMES_NOTE,
    catalogue_floor,
    catalogue_items,
    instructions,
    render_repair,
    render_request,
)
from planner._validate import PlanLimits, clamp_plan, validate_plan
from providers import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    ResponseSchema,
    SystemBlock,
    TokenUsage,
    call_model,
)

FALLBACK_GOAL_CHARS = 400


@dataclass(frozen=True, kw_only=True, slots=True)
class Catalogue:
    """What the planner may choose from: tool name -> one-line description, and source
    name -> description. ``read_tools`` is no longer read (the fallback plan grants every
    tool since issue 26); it stays optional so callers that pass it keep working."""

    tools: Mapping[str, str]
    read_tools: Sequence[str] = ()
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanOutcome:
    plan: Plan
    attempts: int
    problems: tuple[str, ...] = ()  # what was wrong with the first answer, if anything
    fallback: str | None = None  # why the fallback plan was used
    fallback_code: str | None = None  # the same, as a code: invalid_plan, timeout, provider_*
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd_micros: int = 0
    model: str = ""
    duration_ms: int = 0
    budget: BudgetReport | None = None  # how the planner's prompt fitted its budget

    @property
    def repaired(self) -> bool:
        return self.attempts > 1 and self.fallback is None


@dataclass(frozen=True, kw_only=True, slots=True)
class Planning:
    """What the planner plans with: the ``catalogue`` it picks from, the plan ``limits``,
    its prompt ``budget``, how long it may take, the token ``counter`` for its model
    (one is made from the model's name if none is given), and the agent profile's
    ``identity`` prompt (empty: none), so the plan suits the agent the user talks to."""

    catalogue: Catalogue
    limits: PlanLimits = field(default_factory=PlanLimits)
    timeout_s: float = 30.0
    budget: RoleBudget = PLANNER_BUDGET
    counter: TokenCounter | None = None
    identity: str = ""


async def make_plan(
    model: Model,
    message: str,
    planning: Planning,
    *,
    history: Sequence[Message] = (),
    loaded: Sequence[str] = (),
    user_data: SectionFill | None = None,
    client: ClientContext | None = None,
    on_error: Literal["raise", "fallback"] = "raise",
) -> PlanOutcome:
    """Plan ``message``; never raises for a bad plan or a timeout. A provider failure
    (``ModelError``) raises, or with ``on_error="fallback"`` (a turn's planning) gives the
    fallback plan; anything else (a cap's refusal) always raises.

    The prompt is fitted into ``planning.budget``: the identity, instructions and
    catalogue into ``system``, the conversation into ``conversation``, what the session
    already loaded into ``context``. ``user_data`` is the agent's user-data block (the
    ``profile`` section's fill): its own system block after the static one, carrying
    the cache breakpoint of the per-user tier. ``client`` is the request's client
    context: its block (the ``client`` section) goes with the request, to pick sources.
    """
    started = time.monotonic()
    catalogue, limits = planning.catalogue, planning.limits
    calls, attempt = _prepare(
        model, planning, history=history, loaded=loaded, user_data=user_data, client=client
    )
    try:
        plan = await attempt.run(calls, message)
        if plan is not None:
            return calls.outcome(plan, calls.count, attempt.first, started)
        code, cause = "invalid_plan", "the plan was still invalid after one repair"
    except TimeoutError:
        code = "timeout"
        cause = f"the planner model did not answer within {planning.timeout_s:g} s"
    except ModelError as exc:
        if on_error == "raise":
            raise
        code, cause = exc.code, f"planner failed: {exc.code.removeprefix('provider_')}"
    reason = f"{cause}; the first problem: {attempt.first[0]}" if attempt.first else cause
    plan = fallback_plan(
        message, catalogue, reason,
        sources=attempt.sources, max_tool_calls=limits.max_tool_calls_per_step,
    )  # fmt: skip
    outcome = calls.outcome(plan, calls.count, attempt.first, started, fallback=reason)
    return replace(outcome, fallback_code=code)


def _prepare(
    model: Model,
    planning: Planning,
    *,
    history: Sequence[Message],
    loaded: Sequence[str],
    user_data: SectionFill | None,
    client: ClientContext | None,
) -> tuple[_Calls, _Attempt]:
    """The planner's calls and its plan-and-repair rounds, with the prompt fitted into
    ``planning.budget`` (``make_plan`` says which part goes where) and its report."""
    budget = planning.budget
    counter = planning.counter or TokenCounter(model.name)
    system, static = _system(planning, counter)
    fills = [static]
    if user_data is not None:
        fills.append(user_data)
        if user_data.text:
            system = (*system, SystemBlock(text=user_data.text, cache=True))
    conversation = fit_history(history, budget.tokens("conversation"), counter=counter)
    known = fit_text("context", budget.tokens("context"), "; ".join(loaded), counter=counter)
    fills += [conversation.fill, known]
    budget, about = client_section(client, budget, reply=False, counter=counter)
    fills += [about] if about is not None else []
    calls = _Calls(model, system, conversation.messages, planning.timeout_s)
    calls.report = BudgetReport.build(budget, fills)
    attempt = _Attempt(
        catalogue=planning.catalogue, limits=planning.limits,
        loaded=[known.text] if known.text else [],
        client=about.text if about is not None else "",
    )  # fmt: skip
    return calls, attempt


@dataclass(kw_only=True, slots=True)
class _Attempt:
    """The plan-and-repair rounds, and what they left: the first answer's problems and
    the sources the latest parsed plan picked validly (kept by a fallback)."""

    catalogue: Catalogue
    limits: PlanLimits
    loaded: list[str]
    client: str = ""
    first: tuple[str, ...] = ()
    sources: tuple[SourcePick, ...] = ()

    async def run(self, calls: _Calls, message: str) -> Plan | None:
        """The valid plan (clamped to the limits), or ``None`` if the repair failed too."""
        problems: list[str] = []
        replies: list[str] = []
        for attempt in (1, 2):
            text = await calls.ask(
                render_request(message, self.loaded, self.client), replies, problems
            )
            plan, problems = _check(text, self.catalogue, self.limits)
            if attempt == 1:
                self.first = tuple(problems)
            if plan is not None and not problems:
                return clamp_plan(plan, self.limits)
            if plan is not None:
                known = self.catalogue.sources
                self.sources = tuple(s for s in plan.sources if s.name in known)
            replies.append(text)
        return None


def _system(
    planning: Planning, counter: TokenCounter
) -> tuple[tuple[SystemBlock, ...], SectionFill]:
    """The system blocks and the ``system`` fill that counts them all.

    The identity goes first, uncached, so the static block's mark covers it: it joins the
    cached prefix without a mark of its own (the last non-empty block carries it). It is
    fitted first too: the operator's word outranks the catalogue, which the rest of the
    allocation abbreviates as usual.
    """
    limits, catalogue, identity = planning.limits, planning.catalogue, planning.identity
    rules = instructions(max_steps=limits.max_steps, max_tool_calls=limits.max_tool_calls_per_step)
    items = catalogue_items(rules, catalogue.tools, catalogue.sources)
    total = planning.budget.tokens("system")
    if not identity:
        static = _catalogue(total, items, counter, len(catalogue.tools))
        return (SystemBlock(text=static.text, cache=True),), static
    who = fit_section("system", total, [Item(full=identity, key="identity")], counter=counter)
    static = _catalogue(total - who.used, items, counter, len(catalogue.tools))
    texts = [t for t in (who.text, static.text) if t] or [static.text]
    blocks = tuple(SystemBlock(text=t, cache=i == len(texts) - 1) for i, t in enumerate(texts))
    used, cuts = who.used + static.used, who.cuts + static.cuts
    fill = replace(static, allocated=total, used=used, text="\n\n".join(texts), cuts=cuts)
    return blocks, fill


def _catalogue(
    allocation: int, items: Sequence[Item], counter: TokenCounter, tools: int
) -> SectionFill:
    """The rules, sources and tools in ``allocation``: summaries are cut before names, and
    no tool's name is ever dropped (the section grows, reporting the overrun, instead)."""
    return fit_growing(
        "system", allocation, items, floor=catalogue_floor(items), counter=counter,
        why=f"the names of all {tools} tools are shown", note=NAMES_NOTE,
        separator="\n",
    )  # fmt: skip


def fallback_plan(
    message: str,
    catalogue: Catalogue,
    reason: str,
    *,
    sources: Sequence[SourcePick] = (),
    max_tool_calls: int = 4,
) -> Plan:
    """A direct answer with the agent's tools: one ``tool`` step whose goal is the user's
    message and whose tools are every tool the agent may use (writes still ask for their
    approvals), or a plain answer when it has none; ``sources`` are loaded as planned."""
    tools = list(catalogue.tools)
    steps = [
        PlannedStep(
            id="s1",
            goal=message[:FALLBACK_GOAL_CHARS] or "Answer the user's request",
            tools=tools,
            max_tool_calls=max(max_tool_calls, 1),
        )
    ]
    return Plan(
        strategy="tool" if tools else "simple",
        reasoning=f"Fallback plan: {reason}"[:600],
        sources=list(sources),
        steps=steps if tools else [],
    )


def _check(text: str, catalogue: Catalogue, limits: PlanLimits) -> tuple[Plan | None, list[str]]:
    """The parsed plan (``None``: not a plan at all) and its problems ([]: valid)."""
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()
        )
        return None, [f"the reply is not a valid plan JSON object ({details[:500]})"]
    problems = validate_plan(
        plan, tools=catalogue.tools.keys(), sources=catalogue.sources.keys(), limits=limits
    )
    return plan, problems


class _Calls:
    """The planner's model calls, with their summed usage."""

    def __init__(
        self,
        model: Model,
        system: tuple[SystemBlock, ...],
        history: Sequence[Message],
        timeout_s: float,
    ) -> None:
        self._model = model
        self._system = system
        self._history = tuple(history)
        self._timeout_s = timeout_s
        self.count = 0
        self.report: BudgetReport | None = None
        self.usage = TokenUsage()
        self.cost = 0
        self.model_name = model.name

    async def ask(self, request_text: str, replies: list[str], problems: list[str]) -> str:
        # The tail mark goes on the history's last message: the previous turn's planner
        # call wrote the prefix just before it, so this one reads that and writes its own.
        history = [replace(m, cache=False) for m in self._history]
        if history:
            history[-1] = replace(history[-1], cache=True)
        messages = [*history, Message.user(request_text)]
        for reply in replies:  # the repair round shows the model its invalid answer
            messages += [Message.assistant(reply), Message.user(render_repair(problems))]
        request = ModelRequest(
            messages=tuple(messages),
            system=self._system,
            response_schema=ResponseSchema(name="plan", schema=PLAN_SCHEMA),
            max_tokens=1024,
        )
        self.count += 1
        async with asyncio.timeout(self._timeout_s):
            called = await call_model(self._model, request)
        self.usage = self.usage + called.completion.usage
        self.cost += called.cost_usd_micros
        self.model_name = called.completion.model
        return called.text

    def outcome(
        self,
        plan: Plan,
        attempts: int,
        problems: tuple[str, ...],
        started: float,
        *,
        fallback: str | None = None,
    ) -> PlanOutcome:
        return PlanOutcome(
            plan=plan,
            attempts=attempts,
            problems=problems,
            fallback=fallback,
            usage=self.usage,
            cost_usd_micros=self.cost,
            model=self.model_name,
            duration_ms=int((time.monotonic() - started) * 1000),
            budget=self.report,
        )
