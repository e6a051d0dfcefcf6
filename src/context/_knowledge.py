"""Append-only session knowledge: which requested source loads are actually needed, and
the knowledge section every call that needs it carries whole.

Loaded knowledge stays in the session and is never replaced: replacing it would change
the prompt prefix and throw away the provider's prompt cache, and the model reads the
newest of two loads naturally. So a load already covered by an earlier one is skipped,
and a wider one is appended next to the old.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from context._grow import fit_whole
from context._sections import Item, SectionFill
from context._sources import SourceLoad
from context._tokens import TokenCounter
from store import StoredEvent

# Numeric parameters where a larger value is a wider load of the same data.
RANGE_PARAMS = frozenset({"days_back", "days_ahead"})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def covers(loaded: SourceLoad, wanted: SourceLoad) -> bool:
    """Whether ``loaded`` already holds everything ``wanted`` asks for.

    Same source and the same parameter names; each range parameter at least as wide,
    every other parameter equal. Anything else loads again.
    """
    if loaded.name != wanted.name or set(loaded.params) != set(wanted.params):
        return False
    for key, value in wanted.params.items():
        have = loaded.params[key]
        if key in RANGE_PARAMS and _number(value) and _number(have):
            if have < value:
                return False
        elif type(have) is not type(value) or have != value:  # True is not days_back=1
            return False
    return True


def loads_needed(requested: Sequence[SourceLoad], loaded: Sequence[SourceLoad]) -> list[SourceLoad]:
    """The requested loads not covered by a load already in the session (or earlier in
    ``requested``), in request order. Pure: the caller appends what it then loads."""
    needed: list[SourceLoad] = []
    for wanted in requested:
        if not any(covers(have, wanted) for have in (*loaded, *needed)):
            needed.append(wanted)
    return needed


def loads_from_log(events: Iterable[StoredEvent]) -> list[SourceLoad]:
    """The loads recorded in a session's log, oldest first.

    Reads ``context_loaded`` events (``source``, and ``params`` when the event carries
    them); a load that took no tokens (dropped to fit) is not knowledge the model has.
    """
    loads: list[SourceLoad] = []
    for stored in events:
        if stored.type != "context_loaded" or stored.data.get("tokens", 1) == 0:
            continue
        loads.append(SourceLoad(name=stored.data["source"], params=stored.data.get("params") or {}))
    return loads


KNOWLEDGE = "knowledge"
"""The section of the executor's and the writer's prompts that holds the turn's knowledge."""

KNOWLEDGE_SOURCE_TOKENS = 4_000
"""The default per-source cap: a loaded source is kept whole up to it (setting
``limits.knowledge_source_tokens``); a longer one is cut once, when it loads, and says so."""


def knowledge_items(knowledge: Sequence[tuple[str, str]]) -> list[Item]:
    """The session's loaded sources (name and text, oldest first) as prompt items."""
    return [Item(full=f"Context ({name}):\n{body}", key=name) for name, body in knowledge]


def fit_knowledge(items: Sequence[Item], allocation: int, *, counter: TokenCounter) -> SectionFill:
    """The knowledge section: every loaded source whole, as it was loaded (each within the
    per-source cap, its cut noted in its text then). A section too small for them grows
    for the call and reports the overrun, rather than cut what the turn relies on."""
    why = f"{len(items)} loaded sources are sent whole"
    return fit_whole(KNOWLEDGE, allocation, items, why=why, counter=counter)
