"""The answer's writer: one merger-role call that writes what the user reads.

Two variants of one call: ``merge`` writes a ``complex`` plan's answer from its steps'
results (including those that failed or were skipped, which it must name); ``answer``
writes a ``simple`` turn's answer from the session's knowledge. Both see their
instructions, the recent conversation (so the answer fits the thread) and one data
section, fitted into the merger budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from context import (
    KNOWLEDGE,
    MERGER_BUDGET,
    BudgetReport,
    ClientContext,
    History,
    Item,
    PromptParts,
    RoleBudget,
    TokenCounter,
    afit_section,
    client_section,
    fit_history,
    fit_knowledge,
    knowledge_items,
    layout_request,
)
from events import ContextBudget, TextDelta
from executors._config import Emit
from executors._prompt import fit_system, tool_spec
from executors._results import StepResult
from planner import Plan
from providers import (
    Called,
    Message,
    Model,
    ModelRequest,
    StopReason,
    TokenUsage,
    ToolCall,
    ToolResult,
    call_model,
)
from tools import READ_RESULT

ANSWER_PROMPT = (
    "You are Bosun, an assistant for the user's organisation. Answer clearly and concisely. "
    "Use the context provided under 'Context' when it is relevant; if it does not hold what "
    "the user asks for, say what you would need instead of inventing it."
)
MERGE_PROMPT = """\
You write the answer to the user's latest message. Helpers have worked on it in steps; \
their results follow these instructions, one <step> each, with its status.

- Answer the user directly and concisely, in their language, as one reply. Do not mention \
steps, helpers or plans.
- Use only facts from the results and the conversation; never invent names, ids or numbers.
- If a step failed or was skipped, say plainly what could not be done (and why, if the \
result says), and what the user can do about it.
- If results disagree, say so rather than pick one silently."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MergeResult:
    """The written answer (already streamed) and what the call cost."""

    text: str
    stop_reason: StopReason
    usage: TokenUsage
    cost_usd_micros: int
    model: str
    budget: BudgetReport

    @classmethod
    def of(cls, called: Called, budget: BudgetReport) -> MergeResult:
        done = called.completion
        return cls(
            text=called.text, stop_reason=done.stop_reason, usage=done.usage,
            cost_usd_micros=called.cost_usd_micros, model=done.model, budget=budget,
        )  # fmt: skip


def _status(result: StepResult | None) -> str:
    if result is None:
        return "not run"
    if result.ok:
        return "ok"
    return "skipped" if result.ended == "skipped" else "failed"


def result_items(plan: Plan, results: Sequence[StepResult]) -> list[Item]:
    """One item per plan step, in plan order; the short form keeps the status and the
    first line, so a failure is still reported when the section is over budget."""
    by_id = {result.step_id: result for result in results}
    items = []
    for step in plan.steps:
        result = by_id.get(step.id)
        status = _status(result)
        summary = result.summary.strip() if result is not None else ""
        goal = " ".join(step.goal.split()).replace('"', "'")
        head = f'<step id="{step.id}" status="{status}" goal="{goal}">'
        first = summary.split("\n", 1)[0][:200]
        items.append(
            Item(full=f"{head}\n{summary}\n</step>", short=f"{head}{first}</step>", key=step.id)
        )
    return items


@dataclass(frozen=True, kw_only=True, slots=True)
class Writer:
    """Who writes the answer: the ``model``, its token ``counter``, the merger ``budget``
    its prompt is fitted into, the agent profile's ``identity`` prompt and the caller's
    org/user line (``context.caller_block``), each empty when there is none, and the
    request's ``client`` context (it writes to the user: told the language too)."""

    model: Model
    counter: TokenCounter
    budget: RoleBudget = MERGER_BUDGET
    identity: str = ""
    caller: str = ""
    client: ClientContext | None = None


async def merge(
    plan: Plan,
    results: Sequence[StepResult],
    *,
    writer: Writer,
    user_text: str,
    view: History,
    emit: Emit,
    knowledge: Sequence[tuple[str, str]] = (),
) -> MergeResult:
    """Write one answer from ``results`` for a ``complex`` plan, streamed as ``text_delta``
    without ``step_id``; emits the call's ``context_budget`` (role ``merger``) first.
    ``knowledge`` is the session's loaded sources (name and text), sent whole.

    A provider failure raises ``ModelError``: the turn fails with its code.
    """
    items = result_items(plan, results)
    request, report = await _request(MERGE_PROMPT, items, user_text, view, writer, knowledge)
    emit(ContextBudget(role="merger", report=report.to_dict()))
    called = await call_model(
        writer.model, request, on_text=lambda text: emit(TextDelta(delta=text))
    )
    return MergeResult.of(called, report)


async def answer(
    writer: Writer,
    text: str,
    *,
    view: History,
    knowledge: Sequence[tuple[str, str]],
    on_text: Callable[[str], None],
) -> MergeResult:
    """Write a ``simple`` turn's answer from the session's ``knowledge`` (source name and
    text), streamed through ``on_text``; the result's ``budget`` says how its prompt
    fitted (the caller logs it). A provider failure raises ``ModelError``."""
    request, report = await _request(ANSWER_PROMPT, [], text, view, writer, knowledge)
    return MergeResult.of(await call_model(writer.model, request, on_text=on_text), report)


async def _request(
    prompt: str,
    items: list[Item],
    user_text: str,
    view: History,
    writer: Writer,
    knowledge: Sequence[tuple[str, str]],
) -> tuple[ModelRequest, BudgetReport]:
    """The writer's request: the agent's identity and ``prompt``, the caller's org/user
    block, the conversation ending with the user's message, the session's ``knowledge``
    whole, and ``items`` as its results section, each fitted to its share of the
    writer's budget."""
    budget, counter, identity = writer.budget, writer.counter, writer.identity
    system = fit_system(identity, prompt, budget.tokens("system"), counter=counter)
    fills = [system.fill]
    texts: list[str] = []
    if knowledge:
        budget = budget if KNOWLEDGE in budget.names else budget.with_section(KNOWLEDGE, 0)
        known = fit_knowledge(knowledge_items(knowledge), budget.tokens(KNOWLEDGE), counter=counter)
        fills.append(known)
        texts.append(known.text)
    section = await afit_section("results", budget.tokens("results"), items, counter=counter)
    texts.append(section.text)
    conversation = fit_history(
        view, budget.tokens("conversation"), counter=counter, current=Message.user(user_text)
    )
    *older, current = conversation.messages
    budget, client = client_section(writer.client, budget, reply=True, counter=counter)
    if client is not None:
        fills.append(client)
    # A provider refuses tool calls in the history of a request that defines no tools: the
    # writer gets the read tool, off (it answers in text), so its history stays native.
    tools = (tool_spec(READ_RESULT),) if any(_tool_work(m) for m in older) else ()
    request = layout_request(
        PromptParts(
            system=system.prompt,
            identity=system.identity,
            caller=writer.caller,
            tools=tools,
            knowledge=tuple(text for text in texts if text),
            history=tuple(older),
            task=current,
            client=client.text if client is not None else "",
        ),
        tool_choice="none" if tools else "auto",
    )
    return request, BudgetReport.build(budget, [*fills, section, conversation.fill])


def _tool_work(message: Message) -> bool:
    return any(isinstance(part, ToolCall | ToolResult) for part in message.parts)
