"""Fit content into a section's token allocation: abbreviate, then truncate, and record.

Progressive disclosure: the caller gives each item a full form and, where it can, a short
one (a tool as ``name: summary`` rather than its schema, a source as its summary) plus a
note telling the model how to drill down. Over budget, items are abbreviated from the
least important end, then whole items are dropped from that end, and a last oversize item
is cut at a token boundary. Every cut is recorded, so a budget report can show what the
model did not see. ``used <= allocated`` always holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial

from context._sections import Cut, CutAction, DropFrom, Item, ItemForm, SectionFill
from context._tokens import LARGE_TEXT_CHARS, TokenCounter

TRUNCATION_MARKER = "[… truncated {tokens:,} tokens]"
OMITTED_MARKER = "[… {count} more omitted]"
_DETAIL_KEYS = 8  # item keys named in a cut's detail before "and N more"


def fit_section(
    name: str,
    allocation: int,
    items: Sequence[Item],
    *,
    counter: TokenCounter,
    note: str = "",
    drop_from: DropFrom = "end",
    verbatim: int = 0,
    separator: str = "\n\n",
    omitted: str = OMITTED_MARKER,
) -> SectionFill:
    """Fill section ``name`` with ``items`` (in prompt order) within ``allocation`` tokens.

    ``drop_from`` is the least important end (``"start"`` for history: the oldest go
    first). The ``verbatim`` most important items are never abbreviated. ``note`` is
    added when any item is shown short; ``omitted`` (with ``{count}``) marks dropped items.
    """
    return _Fitter(
        name, allocation, items, counter, note, drop_from, verbatim, separator, omitted
    ).run()


def fit_text(name: str, allocation: int, text: str, *, counter: TokenCounter) -> SectionFill:
    """Fit one text (a system prompt, a profile) into a section, cutting its tail if needed."""
    return fit_section(name, allocation, [Item(full=text, key=name)], counter=counter)


async def afit_section(
    name: str,
    allocation: int,
    items: Sequence[Item],
    *,
    counter: TokenCounter,
    note: str = "",
    drop_from: DropFrom = "end",
    verbatim: int = 0,
) -> SectionFill:
    """``fit_section`` in a worker thread when the items carry a lot of text."""
    fit = partial(
        fit_section,
        name,
        allocation,
        items,
        counter=counter,
        note=note,
        drop_from=drop_from,
        verbatim=verbatim,
    )
    if sum(len(item.full) for item in items) <= LARGE_TEXT_CHARS:
        return fit()
    return await asyncio.to_thread(fit)


def _keys(items: Sequence[Item], indices: Sequence[int]) -> str:
    names = [items[i].key or f"#{i}" for i in indices]
    shown = ", ".join(names[:_DETAIL_KEYS])
    more = len(names) - _DETAIL_KEYS
    return f"{shown} and {more} more" if more > 0 else shown


class _Fitter:
    """One fitting run over items counted once each (the counter caches).

    Abbreviation is preferred to dropping: it drops only as many least important items
    as needed for the rest to fit when shown short, then shows short only as many as
    needed. Estimates (sums of per-piece counts) steer; a count of the rendered text
    confirms near the allocation, so ``used`` is always the real count.
    """

    def __init__(
        self,
        name: str,
        allocation: int,
        items: Sequence[Item],
        counter: TokenCounter,
        note: str,
        drop_from: DropFrom,
        verbatim: int,
        separator: str,
        omitted: str,
    ) -> None:
        self.name, self.allocation, self.items, self.counter = name, allocation, items, counter
        self.note, self.separator, self.omitted, self.drop_from = (
            note,
            separator,
            omitted,
            drop_from,
        )
        self.texts: list[str | None] = [item.full for item in items]  # None: dropped
        self.forms: list[ItemForm] = ["full"] * len(items)
        indices = range(len(items))
        # Least important first.
        self.order = list(reversed(indices)) if drop_from == "end" else list(indices)
        self.protected = set(self.order[len(self.order) - verbatim :]) if verbatim > 0 else set()
        # Raw (unpadded) counts: summed, then padded once, they track the joined text.
        self.sep_tokens = counter.raw_count(separator) if separator else 0
        self.tokens = [counter.raw_count(item.full) for item in items]
        self.short_tokens = [self._short_tokens(i) for i in indices]
        self.cuts: list[Cut] = []

    def _short_tokens(self, i: int) -> int | None:
        """Tokens of item i's short form, if it has a usable (smaller) one."""
        short = self.items[i].short
        if short is None or i in self.protected:
            return None
        tokens = self.counter.raw_count(short)
        return tokens if tokens < self.tokens[i] else None

    def run(self) -> SectionFill:
        before = self.real()
        if before > self.allocation and self.items:
            dropped = self.order[: self.drops_needed()]
            for i in dropped:
                self.texts[i] = None
            self.abbreviate()
            self.record(before, dropped)
            self.truncate()
        text = self.render()
        used = self.counter.count(text) if text else 0
        if used > self.allocation:  # even the markers do not fit: send nothing
            self.cuts.append(self._cut("dropped", used, 0, "section left empty"))
            self.texts = [None] * len(self.items)
            text, used = "", 0
        assert used <= self.allocation, (self.name, used, self.allocation)
        kept = self.kept()
        return SectionFill(
            name=self.name,
            allocated=self.allocation,
            used=used,
            text=text,
            items=tuple(t for t in self.texts if t is not None),
            kept=tuple(kept),
            forms=tuple(self.forms[i] for i in kept),
            cuts=tuple(self.cuts),
        )

    def drops_needed(self) -> int:
        """The fewest least-important items to drop so the rest fits, shown short where
        they can be (all but one at most: a last item is cut rather than dropped)."""
        best = [
            s if s is not None else t for s, t in zip(self.short_tokens, self.tokens, strict=True)
        ]
        remaining = sum(best)
        for dropped in range(len(self.order)):
            kept = len(self.order) - dropped
            extras = self._extras(dropped, note=True)
            raw = remaining + sum(map(self.counter.raw_count, extras))
            raw += self.sep_tokens * max(kept + len(extras) - 1, 0)
            if self.counter.pad(raw) <= self.slack_limit() and self._fits_short(dropped):
                return dropped
            remaining -= best[self.order[dropped]]
        return len(self.order) - 1

    def _fits_short(self, dropped: int) -> bool:
        texts, forms = list(self.texts), list(self.forms)
        for position, i in enumerate(self.order):
            if position < dropped:
                self.texts[i] = None
            elif self.short_tokens[i] is not None:
                self.texts[i], self.forms[i] = self.items[i].short, "short"
        fits = self.real() <= self.allocation
        self.texts, self.forms = texts, forms
        return fits

    def abbreviate(self) -> None:
        for i in self.order:
            if self.fits():
                return
            short_tokens = self.short_tokens[i]
            if self.texts[i] is not None and short_tokens is not None:
                self.texts[i], self.tokens[i], self.forms[i] = (
                    self.items[i].short,
                    short_tokens,
                    "short",
                )

    def record(self, before: int, dropped: list[int]) -> None:
        """Cuts as a chain: abbreviated (kept items shown short), then dropped."""
        after = before
        short = [i for i in self.kept() if self.forms[i] == "short"]
        if short:
            texts = list(self.texts)
            for i in dropped:
                self.texts[i] = self.items[i].full
            after = self.real()
            self.texts = texts
            detail = f"{len(short)} of {len(self.items)} shown short: {_keys(self.items, short)}"
            self.cuts.append(self._cut("abbreviated", before, after, detail))
        if dropped:
            detail = f"{len(dropped)} of {len(self.items)} dropped: {_keys(self.items, dropped)}"
            self.cuts.append(self._cut("dropped", after, self.real(), detail))

    def truncate(self) -> None:
        if len(self.kept()) != 1 or self.real() <= self.allocation:
            return
        (i,) = self.kept()
        original = self.texts[i]
        assert original is not None
        before, original_tokens = self.real(), self.counter.count(original)
        self.texts[i] = ""
        marker = TRUNCATION_MARKER.format(tokens=original_tokens)
        room = self.allocation - self.real() - self.counter.count(marker)
        room -= self.counter.count(self.separator)
        while room > 0:
            head = self.counter.truncate(original, room)
            cut_tokens = original_tokens - self.counter.count(head)
            text = f"{head}\n{TRUNCATION_MARKER.format(tokens=cut_tokens)}"
            self.texts[i], self.forms[i] = text, "truncated"
            self.tokens[i] = self.counter.raw_count(text)
            excess = self.real() - self.allocation
            if excess <= 0:
                key = self.items[i].key or f"#{i}"
                kept_tokens = self.counter.count(text)
                detail = f"{key} cut from {original_tokens:,} to {kept_tokens:,} tokens"
                self.cuts.append(self._cut("truncated", before, self.real(), detail))
                return
            room -= excess
        self.texts[i] = None  # not even a head of it fits
        self.cuts.append(self._cut("dropped", before, self.real(), "the last item does not fit"))

    def kept(self) -> list[int]:
        return [i for i, t in enumerate(self.texts) if t is not None]

    def slack_limit(self) -> int:
        # Pieces counted apart sum a little above the joined text: confirm near the line.
        return self.allocation + self.allocation // 20 + 8

    def fits(self) -> bool:
        if self.estimate() > self.slack_limit():
            return False
        return self.real() <= self.allocation

    def _extras(self, dropped: int, *, note: bool) -> list[str]:
        extras = [self.note] if note and self.note else []
        if dropped:
            extras.append(self.omitted.format(count=dropped))
        return extras

    def estimate(self) -> int:
        kept = self.kept()
        extras = self._extras(len(self.items) - len(kept), note=self.shows_note())
        pieces = len(kept) + len(extras)
        return self.counter.pad(
            sum(self.tokens[i] for i in kept)
            + sum(self.counter.raw_count(extra) for extra in extras)
            + self.sep_tokens * max(pieces - 1, 0)
        )

    def real(self) -> int:
        text = self.render()
        return self.counter.count(text) if text else 0

    def render(self) -> str:
        pieces = [t for t in self.texts if t is not None]
        dropped = len(self.texts) - len(pieces)
        if dropped:
            marker = self.omitted.format(count=dropped)
            pieces = [marker, *pieces] if self.drop_from == "start" else [*pieces, marker]
        if self.shows_note():
            pieces.insert(0, self.note)
        return self.separator.join(pieces)

    def shows_note(self) -> bool:
        return bool(self.note) and any(
            f == "short" and t is not None for f, t in zip(self.forms, self.texts, strict=True)
        )

    def _cut(self, action: CutAction, before: int, after: int, detail: str) -> Cut:
        return Cut(
            section=self.name,
            action=action,
            tokens_before=before,
            tokens_after=after,
            detail=detail,
        )
