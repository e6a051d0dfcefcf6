"""The answer: one model call that sees the conversation and the session's knowledge.

It is the merger role's call, fitted into the merger budget (system, conversation,
results). Until executors run plan steps with tools, every strategy is answered this way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from context import (
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
from providers import Completion, Message, Model, TextChunk, ToolCall

ANSWER_PROMPT = (
    "You are Bosun, an assistant for the user's organisation. Answer clearly and concisely. "
    "Use the context provided under 'Context' when it is relevant; if it does not hold what "
    "the user asks for, say what you would need instead of inventing it."
)


@dataclass(frozen=True, slots=True)
class Answer:
    completion: Completion
    report: BudgetReport


async def answer(
    model: Model,
    text: str,
    *,
    view: History,
    knowledge: Sequence[tuple[str, str]],
    budget: RoleBudget,
    counter: TokenCounter,
    on_text: Callable[[str], None],
) -> Answer:
    """Stream one reply through ``on_text``; return its completion and budget report."""
    system = fit_text("system", budget.tokens("system"), ANSWER_PROMPT, counter=counter)
    results = await afit_section(
        "results",
        budget.tokens("results"),
        [Item(full=f"Context ({name}):\n{body}", key=name) for name, body in knowledge],
        counter=counter,
    )
    conversation = fit_history(
        view, budget.tokens("conversation"), counter=counter, current=Message.user(text)
    )
    *older, current = conversation.messages
    request = layout_request(
        PromptParts(
            system=system.text,
            knowledge=(results.text,) if results.text else (),
            history=tuple(older),
            task=current,
        )
    )
    completion: Completion | None = None
    async with aclosing(model.stream(request)) as stream:
        async for item in stream:
            if isinstance(item, TextChunk):
                if item.text:
                    on_text(item.text)
            elif isinstance(item, ToolCall):
                continue  # no tools are offered to this call
            else:
                completion = item
    assert completion is not None, f"model {model.name!r} ended its stream without a Completion"
    report = BudgetReport.build(budget, [system, results, conversation.fill])
    return Answer(completion=completion, report=report)
