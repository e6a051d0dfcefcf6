"""The user-data block: the per-user sources an agent declares, as one cached system block.

Spec §4.4/§9.3: profile-like data (who the user is, their units, their settings) is
fetched afresh on every model call and sent as ``<user_data>…</user_data>``, a system
block of its own after the static prompt, carrying cache breakpoint 3. It changes only
when the data does, so within a session it is read from the cache; when it does change
the model sees the new value at once, which a once-per-session load could not give.

Each source is fitted into its own budget first (``Source.budget_tokens``), then the block
into the role's ``profile`` section; both kinds of cut land in the section's fill, so the
call's budget report shows them. A source that fails is left out (logged), never fatal.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from context._fit import fit_section
from context._sections import Cut, Item, SectionFill
from context._sources import SourceRegistry, SourceScope, _format, own_budget
from context._tokens import TokenCounter

PROFILE_SECTION = "profile"
_OPEN, _CLOSE = "<user_data>", "</user_data>"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")
log = structlog.get_logger(__name__)


def user_data_tag(name: str) -> str:
    """The XML element a source's data goes in: ``members.profile`` → ``members_profile``."""
    return _NOT_NAME.sub("_", name).strip("_") or "data"


@dataclass(frozen=True, kw_only=True, slots=True)
class UserData:
    """Loads one user's data block for every model call of a turn.

    ``names`` are the sources the agent declared (each must be a per-user source of
    ``registry``); ``allocation`` is the role's ``profile`` section. ``load`` fetches them
    all in parallel, each under ``timeout_s``.
    """

    registry: SourceRegistry
    names: tuple[str, ...]
    scope: SourceScope
    counter: TokenCounter
    allocation: int
    timeout_s: float = 5.0
    section: str = PROFILE_SECTION

    def with_allocation(self, allocation: int, counter: TokenCounter | None = None) -> UserData:
        """The same sources for another role's ``profile`` section (and model's counter)."""
        return replace(self, allocation=allocation, counter=counter or self.counter)

    async def load(self) -> SectionFill:
        """The block as the ``profile`` section's fill (empty text when nothing loaded)."""
        fetched = await asyncio.gather(*(self._one(name) for name in self.names))
        items: list[Item] = []
        cuts: list[Cut] = []
        for item, own in fetched:
            if item is not None:
                items.append(item)
                cuts += own
        return self._fit(items, tuple(cuts))

    async def _one(self, name: str) -> tuple[Item | None, tuple[Cut, ...]]:
        try:
            source = self.registry.get(name)
            async with asyncio.timeout(self.timeout_s):
                data = await source.fetch(self.scope.request({}))
            body = _format(source, data)
            short = None if source.summarise is None else source.summarise(data)
        except Exception as exc:  # a broken source is left out, never fatal
            error = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            log.warning("context.user_data_failed", source=name, error=error)
            return None, ()
        tag = user_data_tag(name)

        def wrap(text: str, brief: bool) -> str:
            attrs = ' abbreviated="true"' if brief else ""
            return f"<{tag}{attrs}>\n{text}\n</{tag}>"

        return own_budget(source, body, short, wrap, section=self.section, counter=self.counter)

    def _fit(self, items: Sequence[Item], own: tuple[Cut, ...]) -> SectionFill:
        if not items:
            return SectionFill(name=self.section, allocated=self.allocation, used=0, text="")
        frame = self.counter.count(f"{_OPEN}\n\n{_CLOSE}")
        for slack in (0, 4, 16):  # joining can merge tokens at the seams: re-fit tighter
            room = max(self.allocation - frame - slack, 0)
            inner = fit_section(self.section, room, list(items), counter=self.counter)
            text = f"{_OPEN}\n{inner.text}\n{_CLOSE}" if inner.text else ""
            used = self.counter.count(text) if text else 0
            if used <= self.allocation:
                break
        else:
            text, used = "", 0
        return replace(
            inner, allocated=self.allocation, used=used, text=text, cuts=own + inner.cuts
        )
