"""What an agent knows about itself: the self block that follows its identity prompt.

Harmonic's agents read ``/whoami`` first (their identity, memberships and capability
restrictions); a Bosun agent is told the same in its prompt. The block is facts the server
holds (its handle and name, the person who owns it, the tools it may and may not use, the
subscriptions that start its runs), rendered deterministically (sorted, capped) so it joins
the cached static prefix, and kept under ``SELF_BLOCK_TOKENS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from context import TokenCounter
from tools import Capabilities, ToolRegistry

SELF_BLOCK_TOKENS = 400
"""The most a self block may take (tokens of the identity counter); longer lists are cut
to their first names and "and N more"."""
SHOWN = 30
"""The most names of one list a block shows before it has to shrink."""
_TEXT_CHARS = 120  # a name, a parent's id or one subscription's description, at most


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentSelf:
    """The facts of one agent's self block, each list sorted.

    ``may_use``: granted tools it calls freely; ``needs_approval``: granted tools whose
    calls wait for a person; ``may_not_use``: tools the server blocks; ``not_granted``:
    how many other tools exist here that its profile does not grant (a count: listing
    them would spend tokens on what it cannot do). ``parent``: the user who owns it
    (``None``: the org does)."""

    handle: str
    name: str
    parent: str | None = None
    may_use: tuple[str, ...] = ()
    needs_approval: tuple[str, ...] = ()
    may_not_use: tuple[str, ...] = ()
    not_granted: int = 0
    subscriptions: tuple[str, ...] = ()


def agent_self(
    handle: str,
    name: str,
    *,
    tools: ToolRegistry,
    capabilities: Capabilities,
    parent: str | None = None,
    subscriptions: Sequence[str] = (),
) -> AgentSelf:
    """The facts of ``handle``'s block from what its turns run with: ``tools`` (routers
    already expanded into tools, as the catalogue lists them) under ``capabilities``."""
    usable = list(capabilities.usable(tools))
    asks = {t.name for t in usable if capabilities.needs_approval(t)}
    server = Capabilities(blocked=capabilities.blocked)  # what no profile may grant
    blocked = [t.name for t in tools if not server.permits(t.name)]
    return AgentSelf(
        handle=handle,
        name=name,
        parent=parent,
        may_use=tuple(sorted(t.name for t in usable if t.name not in asks)),
        needs_approval=tuple(sorted(asks)),
        may_not_use=tuple(sorted(blocked)),
        not_granted=len(tools) - len(usable) - len(blocked),
        subscriptions=tuple(sorted(subscriptions)),
    )


def self_block(me: AgentSelf, *, counter: TokenCounter, budget: int = SELF_BLOCK_TOKENS) -> str:
    """``me`` as the prompt's self block, within ``budget`` tokens: every list shows its
    first ``SHOWN`` names, then fewer (halving) until the block fits; at none, a count."""
    shown = SHOWN
    while True:
        text = _render(me, shown)
        if shown == 0 or counter.count(text) <= budget:
            return text
        shown //= 2


def _render(me: AgentSelf, shown: int) -> str:
    owner = (
        f"You belong to the user {_line(me.parent)} (your parent): they set you up and "
        "answer your approvals."
        if me.parent
        else "You belong to the organisation (no person owns you)."
    )
    lines = [
        "<self>",
        f'You are the agent @{me.handle}, "{_line(me.name)}". {owner}',
        f"Tools you may use: {_names(me.may_use, shown, 'tool') or 'none'}.",
    ]
    if me.needs_approval:
        asks = _names(me.needs_approval, shown, "tool")
        lines.append(f"Tools you may use only with a person's approval (a call waits): {asks}.")
    refused = [f"{_names(me.may_not_use, shown, 'tool')} (blocked here)"] if me.may_not_use else []
    if me.not_granted:
        refused.append(f"{_count(me.not_granted, 'other tool')} here, not granted to you")
    if refused:
        lines.append(f"Tools you may not use: {'; '.join(refused)}.")
    subscriptions = _names(tuple(map(_line, me.subscriptions)), shown, "subscription", "; ")
    lines += [f"Your subscriptions (what starts your runs): {subscriptions or 'none'}.", "</self>"]
    return "\n".join(lines)


def _names(items: Sequence[str], shown: int, what: str, separator: str = ", ") -> str:
    """``items`` joined, the first ``shown`` of them and "and N more" when there are more
    (``shown`` 0: only how many ``what``)."""
    if len(items) <= shown:
        return separator.join(items)
    if shown == 0:
        return _count(len(items), what)
    return f"{separator.join(items[:shown])} and {len(items) - shown} more"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _line(text: str) -> str:
    """``text`` on one line, capped and escaped so it cannot close the block."""
    flat = " ".join(text.split())
    flat = flat if len(flat) <= _TEXT_CHARS else flat[: _TEXT_CHARS - 1] + "…"
    return escape(flat, quote=False)
