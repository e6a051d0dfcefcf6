"""The merge: one merger-role call that writes the turn's answer from the step results.

It sees its instructions, the recent conversation (so the answer fits the thread) and the
results of every step, including those that failed or were skipped, which it must name.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import assert_never

from context import (
    MERGER_BUDGET,
    BudgetReport,
    History,
    Item,
    PromptParts,
    RoleBudget,
    TokenCounter,
    afit_section,
    fit_history,
    fit_text,
    layout_request,
)
from events import ContextBudget, TextDelta
from executors._config import Emit
from executors._results import StepResult
from planner import Plan
from providers import (
    Completion,
    Message,
    Model,
    StopReason,
    TextChunk,
    TokenUsage,
    ToolCall,
    cost_usd_micros,
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
    """The merged answer (already streamed) and what the call cost."""

    text: str
    stop_reason: StopReason
    usage: TokenUsage
    cost_usd_micros: int
    model: str
    budget: BudgetReport


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


async def merge(
    plan: Plan,
    results: Sequence[StepResult],
    *,
    model: Model,
    counter: TokenCounter,
    user_text: str,
    view: History,
    emit: Emit,
    budget: RoleBudget = MERGER_BUDGET,
) -> MergeResult:
    """Write one answer from ``results`` for a ``complex`` plan, streamed as ``text_delta``
    without ``step_id``; emits the call's ``context_budget`` (role ``merger``) first.

    A provider failure raises ``ModelError``: the turn fails with its code.
    """
    system = fit_text("system", budget.tokens("system"), MERGE_PROMPT, counter=counter)
    section = await afit_section(
        "results", budget.tokens("results"), result_items(plan, results), counter=counter
    )
    conversation = fit_history(
        view, budget.tokens("conversation"), counter=counter, current=Message.user(user_text)
    )
    *older, current = conversation.messages
    request = layout_request(
        PromptParts(
            system=system.text,
            knowledge=(section.text,) if section.text else (),
            history=tuple(older),
            task=current,
        )
    )
    report = BudgetReport.build(budget, [system, section, conversation.fill])
    emit(ContextBudget(role="merger", report=report.to_dict()))
    text: list[str] = []
    completion: Completion | None = None
    async with aclosing(model.stream(request)) as stream:
        async for item in stream:
            match item:
                case TextChunk(text=chunk):
                    if chunk:
                        text.append(chunk)
                        emit(TextDelta(delta=chunk))
                case ToolCall():
                    continue  # no tools are offered to the merge
                case Completion():
                    completion = item
                case _:
                    assert_never(item)
    assert completion is not None, f"model {model.name!r} ended its stream without a Completion"
    return MergeResult(
        text="".join(text),
        stop_reason=completion.stop_reason,
        usage=completion.usage,
        cost_usd_micros=cost_usd_micros(completion.model, completion.usage),
        model=completion.model,
        budget=report,
    )
