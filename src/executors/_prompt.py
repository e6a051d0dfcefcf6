"""The executor's focused prompt: its instructions, the step goal, the turn's knowledge,
the step's data and only the step's tools, each fitted into its section of the executor
budget once per step.

Built once per step and never changed, so every request of the loop starts with the same
bytes (``context.executor_request`` appends the loop after them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from context import (
    KNOWLEDGE,
    BudgetReport,
    ClientContext,
    HistoryFit,
    Item,
    PromptParts,
    RoleBudget,
    SectionFill,
    TokenCounter,
    client_section,
    fit_knowledge,
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

FORCED_PROMPT = """\
You carry out a task for a user, and you act ONLY through tool calls: every reply is \
exactly one tool call, never plain text. The task is the user message; data from earlier \
steps and the session may follow these instructions.

- Use only the tools you are given. Never invent ids, names or results: look them up.
- A tool result marked as an error says what went wrong and what to do next; do not repeat \
a call that failed the same way.
- The user sees only what you send with message_notify_user: tell them what you found or \
did (names, ids, numbers, dates) and what failed.
- If you cannot go on without the user, ask with message_ask_user; their reply is its result.
- When the task is done, or cannot be done, and the user has been told, call agent_idle.
- If you are told the budget is nearly spent, tell the user what you have, then call \
agent_idle."""

DATA_NOTE = "Data abbreviated to fit; ask with a tool if you need the details."


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPrompt:
    """The fixed parts of every request of one step's loop, and how they were fitted."""

    parts: PromptParts
    report: BudgetReport
    tools: dict[str, ToolDef]  # every tool the step was granted, by wire name


def tool_spec(tool: ToolDef) -> ToolSpec:
    """What a provider sees of a tool: its wire name, summary and input schema."""
    return ToolSpec(name=tool.wire_name, description=tool.summary, input_schema=tool.input_schema())


@dataclass(frozen=True, kw_only=True, slots=True)
class Voice:
    """Who speaks to whom, the stable head of every request of a step: the agent's
    ``identity`` and the role's ``instructions`` (``FORCED_PROMPT`` for a forced-tools
    loop), then the org/user block: the ``caller`` line (``context.caller_block``) and
    the agent's ``user_data`` block as first loaded (reloaded every call). ``client`` is
    the request's client context, sent with the goal; ``to_user``: the step's text is
    what the user reads (a ``tool`` plan's step, a forced loop), so it is told the
    language to reply in."""

    identity: str = ""
    instructions: str = EXECUTOR_PROMPT
    caller: str = ""
    user_data: SectionFill | None = None
    client: ClientContext | None = None
    to_user: bool = False


def build_prompt(
    *,
    step_id: str,
    goal: str,
    tools: Sequence[ToolDef],
    data: Sequence[Item],
    budget: RoleBudget,
    counter: TokenCounter,
    voice: Voice = Voice(),
    knowledge: Sequence[Item] = (),
    history: HistoryFit | None = None,
) -> StepPrompt:
    """Fit the ``voice``, goal, tools, the turn's ``knowledge`` and the step's ``data`` into
    ``budget``. Every granted tool and every knowledge item is sent whole (their section
    grows, with an ``overrun`` cut, when they do not fit); only ``data`` is abbreviated.
    ``history`` is the fitted conversation before the goal (a step that continues the
    conversation)."""
    user_data, instructions = voice.user_data, voice.instructions
    system = fit_system(voice.identity, instructions, budget.tokens("system"), counter=counter)
    task = fit_text("task", budget.tokens("task"), goal, counter=counter)
    fills: list[SectionFill] = [system.fill, task]
    if user_data is not None:
        fills.append(user_data)
    specs = [tool_spec(tool) for tool in tools]
    fitted = fit_tools(specs, budget.tokens("tools"), counter=counter) if specs else None
    if fitted is not None:
        fills.append(fitted.fill)
    texts: list[str] = []
    if knowledge:
        budget = budget if KNOWLEDGE in budget.names else budget.with_section(KNOWLEDGE, 0)
        known = fit_knowledge(knowledge, budget.tokens(KNOWLEDGE), counter=counter)
        fills.append(known)
        texts.append(known.text)
    if data:
        fill = fit_section(
            "data", budget.tokens("data"), list(data), counter=counter, note=DATA_NOTE
        )
        fills.append(fill)
        texts.append(fill.text)
    if history is not None:
        fills.append(history.fill)
    budget, client = client_section(voice.client, budget, reply=voice.to_user, counter=counter)
    if client is not None:
        fills.append(client)
    parts = PromptParts(
        system=system.prompt,
        identity=system.identity,
        tools=fitted.specs if fitted else (),
        caller=voice.caller,
        user_data=user_data.text if user_data is not None else "",
        knowledge=tuple(text for text in texts if text),
        history=history.messages if history is not None else (),
        task=task.text,
        client=client.text if client is not None else "",
    )
    return StepPrompt(
        parts=parts,
        report=BudgetReport.build(budget, fills, step_id=step_id),
        tools={tool.wire_name: tool for tool in tools},
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


def forced_note(note: str) -> str:
    """A wrap-up note for a forced loop: tools stay on, so it asks the model to finish
    through them instead of answering in text."""
    head = note.split(" This is your last model turn", 1)[0]
    return (
        f"{head} Finish now: tell the user what you found or did, and what is still missing, "
        "with message_notify_user, then call agent_idle."
    )


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
