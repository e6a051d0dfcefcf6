"""The executor's focused prompt: its instructions, the step goal, the step's data and
only the step's tools, each fitted into its section of the executor budget once per step.

Built once per step and never changed, so every request of the loop starts with the same
bytes (``context.executor_request`` appends the loop after them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from context import (
    BudgetReport,
    Item,
    PromptParts,
    RoleBudget,
    SectionFill,
    TokenCounter,
    fit_section,
    fit_text,
    fit_tools,
)
from providers import ToolSpec
from tools import ToolDef

EXECUTOR_PROMPT = """\
You carry out ONE step of a larger plan, for a user of a business app. The step's goal is \
the user message; data from earlier steps and the session may follow these instructions.

- Use only the tools you are given, and only for this goal. Never invent ids, names or \
results: look them up.
- A tool result marked as an error says what went wrong and what to do next; do not repeat \
a call that failed the same way.
- Some tools ask the user to confirm or to pick; call them when the goal needs it.
- When the goal is done, or cannot be done, stop calling tools and answer in a few \
sentences: what you found or changed (names, ids, numbers, dates) and what failed or is \
missing. That answer is the step's result; another model reads it, not the user.
- If you are told the step's budget is nearly spent, answer at once with what you have."""

DATA_NOTE = "Data abbreviated to fit; ask with a tool if you need the details."


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPrompt:
    """The fixed parts of every request of one step's loop, and how they were fitted."""

    parts: PromptParts
    report: BudgetReport
    tools: dict[str, ToolDef]  # callable in this step, by wire name


def tool_spec(tool: ToolDef) -> ToolSpec:
    """What a provider sees of a tool: its wire name, summary and input schema."""
    return ToolSpec(name=tool.wire_name, description=tool.summary, input_schema=tool.input_schema())


def build_prompt(
    *,
    step_id: str,
    goal: str,
    tools: Sequence[ToolDef],
    data: Sequence[Item],
    budget: RoleBudget,
    counter: TokenCounter,
    identity: str = "",
) -> StepPrompt:
    """Fit the agent's ``identity`` and instructions, goal, tools and data into ``budget``
    (system, task, tools, data); tools that do not fit whole are listed by name and
    cannot be called."""
    system = fit_system(identity, EXECUTOR_PROMPT, budget.tokens("system"), counter=counter)
    task = fit_text("task", budget.tokens("task"), goal, counter=counter)
    fills: list[SectionFill] = [system.fill, task]
    specs = [tool_spec(tool) for tool in tools]
    fitted = fit_tools(specs, budget.tokens("tools"), counter=counter) if specs else None
    if fitted is not None:
        fills.append(fitted.fill)
    knowledge: tuple[str, ...] = ()
    if data:
        fill = fit_section(
            "data", budget.tokens("data"), list(data), counter=counter, note=DATA_NOTE
        )
        fills.append(fill)
        knowledge = (fill.text,) if fill.text else ()
    parts = PromptParts(
        system=system.prompt,
        identity=system.identity,
        tools=fitted.specs if fitted else (),
        tool_listing=fitted.listing if fitted else "",
        knowledge=knowledge,
        task=task.text,
    )
    callable_names = {spec.name for spec in parts.tools}
    return StepPrompt(
        parts=parts,
        report=BudgetReport.build(budget, fills, step_id=step_id),
        tools={tool.wire_name: tool for tool in tools if tool.wire_name in callable_names},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SystemFit:
    """The ``system`` section as two blocks: the fitted ``identity`` and ``prompt`` texts,
    and one ``fill`` for the budget report that counts both."""

    identity: str
    prompt: str
    fill: SectionFill


def fit_system(identity: str, prompt: str, allocation: int, *, counter: TokenCounter) -> SystemFit:
    """Fit the agent's ``identity``, then the role's ``prompt`` into what it leaves of the
    ``system`` allocation. The identity goes first because it is the operator's word (it
    may hold rules the agent must keep); an over-long one cuts the prompt's tail, and
    every cut is in the fill. Without an identity this is ``fit_text`` of the prompt."""
    if not identity:
        fill = fit_text("system", allocation, prompt, counter=counter)
        return SystemFit(identity="", prompt=fill.text, fill=fill)
    who = fit_section("system", allocation, [Item(full=identity, key="identity")], counter=counter)
    rest = fit_text("system", allocation - who.used, prompt, counter=counter)
    text = "\n\n".join(t for t in (who.text, rest.text) if t)
    used, cuts = who.used + rest.used, who.cuts + rest.cuts
    fill = replace(rest, allocated=allocation, used=used, text=text, cuts=cuts)
    return SystemFit(identity=who.text, prompt=rest.text, fill=fill)


def dependency_item(step_id: str, goal: str, summary: str) -> Item:
    """A finished dependency as data for a later step (shortened to its first line when
    the data section is over budget)."""
    first = summary.strip().split("\n", 1)[0]
    short = first if len(first) <= 200 else first[:199] + "…"
    return Item(
        full=f'<result step="{step_id}" goal="{_attr(goal)}">\n{summary.strip()}\n</result>',
        short=f'<result step="{step_id}" abbreviated="true">{short}</result>',
        key=step_id,
    )


def _attr(text: str) -> str:
    flat = " ".join(text.split()).replace('"', "'")
    return flat if len(flat) <= 120 else flat[:119] + "…"


def wrap_up_note(
    reasons: Sequence[str],
    *,
    calls_left: int,
    max_calls: int,
    seconds_left: float,
    wall_time_s: float,
) -> str:
    """The message that asks for a wrap-up: why, and what remains of each bound."""
    return (
        f"[Step budget] {'; '.join(reasons)}. Remaining: {max(calls_left, 0)} of {max_calls} "
        f"tool calls and about {round(max(seconds_left, 0), 1):g} s of {wall_time_s:g} s. This is "
        "your last model turn and tools are off: answer now with what you have, saying what "
        "you found or did and what is still missing."
    )
