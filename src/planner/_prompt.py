"""The planner's prompt. Documented in docs/planner.md; keep the two in step.

The static instructions and the catalogue (tools and sources of this deployment) come
first and are marked as cacheable; the conversation and the request come last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from context import Item

PLANNER_INSTRUCTIONS = """\
You are the planner of an assistant that gets work done with tools. You do not answer the
user and you do not call tools. You read the request and reply with ONE JSON object, a
plan, matching the given schema.

Choose the cheapest strategy that can fully handle the request:
- "simple": a greeting, chit-chat, or a question answerable from the conversation and
  general knowledge. No steps.
- "tool": one focused job that needs tools (look something up, make one change, or a
  short sequence of closely related calls). Exactly one step.
- "complex": two or more distinct jobs, e.g. gather facts from different places and then
  act on them. 2 to {max_steps} steps; give each step an id (s1, s2, ...), a goal
  that a helper can carry out alone, the tools it needs, and depends_on for steps that
  need another step's result. Steps without dependencies run in parallel.

Rules:
- Use only tool and source names listed below, spelled exactly.
- Give a step only the tools it needs; max_tool_calls is its budget (1 to
  {max_tool_calls}), small lookups need 1-3.
- Preload a source only when the request needs it, saying why. Do not pick a source
  already loaded in this session unless you need a wider range (e.g. larger days_back).
- "reasoning" is one or two short sentences. Reply with the JSON object only."""


def instructions(*, max_steps: int, max_tool_calls: int) -> str:
    return PLANNER_INSTRUCTIONS.format(max_steps=max_steps, max_tool_calls=max_tool_calls)


NAMES_NOTE = (
    "Some tools are listed by name only (their summaries did not fit); the names are exact "
    "and usable in plans."
)


def catalogue_items(rules: str, tools: Mapping[str, str], sources: Mapping[str, str]) -> list[Item]:
    """The planner's static prompt as fitting items, most important first: the rules, the
    sources, then one line per tool (``name: summary``, abbreviated to the bare name when
    the section is over budget: progressive disclosure). Tools get summaries, not schemas:
    the planner only picks; executors see the full schemas of their step's tools."""
    source_lines = "\n".join(f"- {name}: {about}" for name, about in sources.items())
    return [
        Item(full=rules, key="instructions"),
        Item(full=f"Context sources:\n{source_lines or '- (none)'}", key="sources"),
        Item(full="Tools:" if tools else "Tools:\n- (none)", key="tools"),
        *(Item(full=f"- {line}", short=f"- {name}", key=name) for name, line in tools.items()),
    ]


def render_request(message: str, loaded: Sequence[str], client: str = "") -> str:
    """The planner's user message: what the session holds, the client's context block
    (where the user is: it may call for an entity's source), then the request."""
    parts = []
    if loaded:
        parts.append("Already loaded in this session: " + "; ".join(loaded))
    if client:
        parts.append(client)
    parts.append(f"User request:\n{message}")
    return "\n\n".join(parts)


def render_repair(problems: Sequence[str]) -> str:
    listed = "\n".join(f"- {p}" for p in problems)
    return f"Your previous plan was invalid:\n{listed}\nReply with a corrected plan (JSON only)."


def catalogue_floor(items: Sequence[Item]) -> str:
    """The least the catalogue may show: every item in its short form, with the note. A
    tool's name is never dropped (the planner could not grant it); the section grows to
    this when even the names exceed it."""
    shorts = [item.short or item.full for item in items]
    if any(item.short for item in items):
        shorts.insert(0, NAMES_NOTE)
    return "\n".join(shorts)
