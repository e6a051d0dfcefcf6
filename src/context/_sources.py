"""Context sources: named fetchers of data the planner can ask to preload.

Sources are fetched in parallel, each under its own timeout. A source that fails or times
out is recorded and skipped: context is an optimisation, so it never fails the turn.
What loads is formatted, counted and fitted into the context section, summary-first when
the section is over budget.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from xml.sax.saxutils import quoteattr

import structlog

from context._fit import afit_section, fit_section
from context._sections import Cut, Item, SectionFill
from context._tokens import TokenCounter

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceRequest:
    """What a source's ``fetch`` receives: who asks, and the planner's parameters."""

    org_id: str
    user_id: str
    session_id: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceScope:
    """The caller's identity, shared by every load of one turn."""

    org_id: str
    user_id: str
    session_id: str

    def request(self, params: Mapping[str, Any]) -> SourceRequest:
        return SourceRequest(
            org_id=self.org_id, user_id=self.user_id, session_id=self.session_id, params=params
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceLoad:
    """One requested (or recorded) load: a source name and its parameters."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """``schedule {'days_ahead': 7}``: how the planner is told what a session holds."""
        return f"{self.name} {dict(self.params)}" if self.params else self.name


@dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """A named context source.

    ``format`` turns fetched data into prompt text (default: the text itself, or compact
    JSON); ``summarise`` gives the short form used when the context section is over
    budget; ``detail`` tells the model how to get the rest (e.g. "call get_schedule").
    ``estimate_tokens`` is a typical size, shown to the planner when it picks sources.
    ``budget_tokens`` is the source's own budget: over it, the source alone is shown
    summarised or cut (and the cut reported), so one large source cannot crowd out the
    others of its section (``None``: only the section's budget applies). ``user_data``
    makes it a per-user source: an agent declares it (its profile's ``user_data``) and
    it fills the user-data block, fetched afresh on every model call, instead of being
    picked by the planner. ``entity`` binds it to an entity type (``member``): when a
    request's client context names an entity of that type, the source is loaded with
    ``{"id": <the entity's id>}`` as its params before the turn's steps run, and the
    planner does not pick it (it has no id to give).
    """

    name: str
    description: str
    fetch: Callable[[SourceRequest], Awaitable[Any]]
    format: Callable[[Any], str] | None = None
    summarise: Callable[[Any], str] | None = None
    estimate_tokens: int = 0
    detail: str = ""
    budget_tokens: int | None = None
    user_data: bool = False
    entity: str | None = None

    def __post_init__(self) -> None:
        if self.budget_tokens is not None and self.budget_tokens < 1:
            raise ValueError(f"Source {self.name!r}: budget_tokens must be >= 1 or None")
        if self.entity is not None and self.user_data:
            raise ValueError(f"Source {self.name!r}: a per-user source binds no entity")

    @property
    def picked(self) -> bool:
        """Whether the planner picks it (per-user and entity-bound sources are declared)."""
        return not self.user_data and self.entity is None


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceResult:
    """The outcome of one load. ``tokens`` is what it takes in the section (0 if failed or
    dropped); ``truncated`` says it was shown short, cut, or dropped to fit."""

    name: str
    ok: bool
    params: Mapping[str, Any] = field(default_factory=dict)
    tokens: int = 0
    truncated: bool = False
    text: str = ""
    error: str | None = None
    elapsed_ms: int = 0
    budget: int | None = None  # the source's own budget, if it declares one
    cuts: tuple[Cut, ...] = ()  # what fitting it into its own budget cut


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedSources:
    """Every load's result, in request order, and the fitted context section."""

    results: tuple[SourceResult, ...]
    fill: SectionFill


class UnknownSourceError(LookupError):
    """A load names a source nobody registered."""


class SourceRegistry:
    """The sources the planner may choose from, by name."""

    def __init__(self, sources: Sequence[Source] = ()) -> None:
        self._sources: dict[str, Source] = {}
        for source in sources:
            self.register(source)

    def register(self, source: Source) -> None:
        if source.name in self._sources:
            raise ValueError(f"A source named {source.name!r} is already registered")
        self._sources[source.name] = source

    def get(self, name: str) -> Source:
        try:
            return self._sources[name]
        except KeyError:
            raise UnknownSourceError(
                f"No context source {name!r}; registered: {self.names()}"
            ) from None

    def __iter__(self) -> Iterator[Source]:
        return iter(self._sources.values())

    def names(self) -> list[str]:
        """The sources the planner may pick (per-user and entity-bound ones are declared)."""
        return [s.name for s in self._sources.values() if s.picked]

    def user_data_names(self) -> list[str]:
        """The per-user sources an agent may declare for its user-data block."""
        return [s.name for s in self._sources.values() if s.user_data]

    def describe(self) -> str:
        """One line per source for the planner prompt: name, typical size, description."""
        return "\n".join(
            f"- {s.name} (~{s.estimate_tokens:,} tokens): {s.description}"
            for s in self._sources.values()
            if s.picked
        )

    def for_entity(self, entity_type: str) -> list[Source]:
        """The sources bound to ``entity_type``, in registration order."""
        return [s for s in self._sources.values() if s.entity == entity_type]


def _format(source: Source, data: Any) -> str:
    if source.format is not None:
        return source.format(data)
    if isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))


def _wrap(source: Source, body: str, *, short: bool) -> str:
    attrs = f" name={quoteattr(source.name)}"
    if short:
        attrs += ' abbreviated="true"'
        if source.detail:
            attrs += f" detail={quoteattr(source.detail)}"
    return f"<source{attrs}>\n{body}\n</source>"


Wrap = Callable[[str, bool], str]
"""Puts a body in its source's element: ``wrap(body, short)``."""


CUT_NOTE = (
    "[This source was cut to fit its budget of {budget:,} tokens; ask with a tool for "
    "what is missing.]"
)


def source_limit(source: Source, cap: int | None) -> int | None:
    """What one source may take: its own ``budget_tokens`` or the per-source cap, the
    smaller (``None``: neither is set)."""
    limits = [b for b in (source.budget_tokens, cap) if b is not None]
    return min(limits) if limits else None


def own_budget(
    source: Source,
    body: str,
    short: str | None,
    wrap: Wrap,
    *,
    section: str,
    counter: TokenCounter,
    cap: int | None = None,
) -> tuple[Item, tuple[Cut, ...]]:
    """The source's item, its ``body`` fitted into the source's own budget first (summary
    first, then cut; the element's tags always kept), with the cuts it took labelled with
    the source. The budget is the source's ``budget_tokens`` or the per-source ``cap``,
    whichever is less. A cut body starts with a note that tells the model it was cut.
    Unchanged when it fits or there is no budget."""
    item = Item(full=wrap(body, False), short=None if short is None else wrap(short, True),
                key=source.name)  # fmt: skip
    budget = source_limit(source, cap)
    if budget is None or counter.count(item.full) <= budget:
        return item, ()
    note = CUT_NOTE.format(budget=budget) + "\n"
    if counter.count(note) * 4 > budget:  # a tiny budget: the cut marker alone tells it
        note = ""
    frame = counter.count(wrap(note, False))
    inner = fit_section(
        section, max(budget - frame, 0), [Item(full=body, short=short, key=source.name)],
        counter=counter,
    )  # fmt: skip
    text = wrap(f"{note}{inner.text}", inner.forms == ("short",)) if inner.text else ""
    label = f"source {source.name} over its own budget of {budget:,} tokens"
    cuts = tuple(
        Cut(section=section, action=cut.action, tokens_before=cut.tokens_before + frame,
            tokens_after=cut.tokens_after + frame if text else 0, detail=f"{label}: {cut.detail}")
        for cut in inner.cuts
    )  # fmt: skip
    return Item(full=text, key=source.name), cuts


async def _fetch_one(
    registry: SourceRegistry,
    load: SourceLoad,
    scope: SourceScope,
    timeout_s: float,
    *,
    section: str,
    counter: TokenCounter,
    cap: int | None = None,
) -> tuple[SourceResult, Item | None]:
    started = time.monotonic()

    def failed(error: str) -> tuple[SourceResult, None]:
        elapsed = int((time.monotonic() - started) * 1000)
        log.warning("context.source_failed", source=load.name, error=error, elapsed_ms=elapsed)
        result = SourceResult(
            name=load.name, ok=False, params=load.params, error=error, elapsed_ms=elapsed
        )
        return result, None

    try:
        source = registry.get(load.name)
    except UnknownSourceError as exc:
        return failed(str(exc))
    try:
        async with asyncio.timeout(timeout_s):
            data = await source.fetch(scope.request(load.params))
        body = _format(source, data)
        short = None if source.summarise is None else source.summarise(data)
    except TimeoutError:
        return failed(f"timed out after {timeout_s:g} s")
    except Exception as exc:  # a broken source is recorded and skipped, never fatal
        return failed(f"{type(exc).__name__}: {exc}")
    await counter.acount(body)  # warm the counter's cache off the loop for large texts
    item, cuts = own_budget(
        source, body, short, lambda text, brief: _wrap(source, text, short=brief),
        section=section, counter=counter, cap=cap,
    )  # fmt: skip
    elapsed = int((time.monotonic() - started) * 1000)
    result = SourceResult(
        name=load.name, ok=True, params=load.params, elapsed_ms=elapsed,
        budget=source_limit(source, cap), cuts=cuts,
    )  # fmt: skip
    return result, item


async def load_sources(
    registry: SourceRegistry,
    loads: Sequence[SourceLoad],
    *,
    scope: SourceScope,
    counter: TokenCounter,
    budget_tokens: int,
    timeout_s: float = 5.0,
    section: str = "context",
    cap: int | None = None,
) -> LoadedSources:
    """Fetch ``loads`` in parallel and fit them, in order of importance, into the section.

    Each fetch has ``timeout_s``; failures come back as ``ok=False`` results. ``cap`` is
    the per-source cap: a source longer than it is cut alone (noted in its text and its
    cuts). Over budget, sources with a ``summarise`` are shown summarised first (with
    their ``detail`` hint), then the least important (last) are dropped or cut.
    """
    outcomes = await asyncio.gather(
        *(
            _fetch_one(registry, load, scope, timeout_s, section=section, counter=counter, cap=cap)
            for load in loads
        )
    )
    items = [item for _, item in outcomes if item is not None]
    fill = await afit_section(
        section,
        budget_tokens,
        items,
        counter=counter,
        note="Some sources are abbreviated; their `detail` says how to get the rest.",
    )
    own_cuts = tuple(cut for result, _ in outcomes for cut in result.cuts)
    if own_cuts:  # each source's own cut first, then the section's
        fill = replace(fill, cuts=own_cuts + fill.cuts)
    placed = dict(zip(fill.kept, zip(fill.items, fill.forms, strict=True), strict=True))
    results: list[SourceResult] = []
    position = 0
    for result, fetched in outcomes:
        if fetched is None:
            results.append(result)
            continue
        text, form = placed.get(position, ("", "dropped"))
        position += 1
        results.append(
            SourceResult(
                name=result.name,
                ok=True,
                params=result.params,
                tokens=counter.count(text) if text else 0,
                truncated=form != "full" or bool(result.cuts),
                text=text,
                elapsed_ms=result.elapsed_ms,
                budget=result.budget,
                cuts=result.cuts,
            )
        )
    return LoadedSources(results=tuple(results), fill=fill)
