"""The token-budget report of a session: per turn, each model call's budget and the usage.

Built from the event log alone (``context_budget``, ``usage``, ``context_loaded``,
``history_summarised``, ``done``) plus the turns table for status and start time; no
table of its own. It carries numbers, section names, item keys, cut details and source
names, never prompt or user text: summaries and loaded texts are read only to be skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from context._report import BudgetReport
from context._sections import Cut
from providers import min_cacheable_tokens
from store import Store, StoredEvent, TurnRecord

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "cost_usd_micros",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageFigures:
    """Provider-reported tokens and cost (micro-dollars) of one role, turn or session.

    ``input_tokens`` excludes cache reads and writes (``providers.TokenUsage``), so the
    cache hit ratio is the share of cache reads in ``cache_read + input``.
    ``cache_write_1h_tokens`` is the part of the writes with a 1-hour TTL (dearer).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cost_usd_micros: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> UsageFigures:
        return cls(**{name: int(data.get(name, 0)) for name in USAGE_FIELDS})

    def __add__(self, other: UsageFigures) -> UsageFigures:
        return UsageFigures(
            **{name: getattr(self, name) + getattr(other, name) for name in USAGE_FIELDS}
        )

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt: uncached input, cache reads and cache writes."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cache_hit_ratio(self) -> float | None:
        """Cache reads over ``cache_read + input``; ``None`` when both are 0."""
        read_or_input = self.cache_read_tokens + self.input_tokens
        return self.cache_read_tokens / read_or_input if read_or_input else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cache_hit_ratio": self.cache_hit_ratio}


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageSummary:
    """Usage totals with the per-role breakdown (planner, executor, merger, ...)."""

    total: UsageFigures = field(default_factory=UsageFigures)
    by_role: Mapping[str, UsageFigures] = field(default_factory=dict)

    def __add__(self, other: UsageSummary) -> UsageSummary:
        roles = {**self.by_role}
        for role, figures in other.by_role.items():
            roles[role] = roles[role] + figures if role in roles else figures
        return UsageSummary(total=self.total + other.total, by_role=roles)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.total.to_dict(),
            "by_role": {role: figures.to_dict() for role, figures in self.by_role.items()},
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Compression:
    """A ``history_summarised`` event: messages up to ``up_to_seq`` folded into a summary.

    ``summary_tokens`` is what the summary note took in the first fitted conversation
    after it (its ``compressed`` cut), or ``None`` when no call has used it yet.
    """

    up_to_seq: int
    summary_tokens: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceUsage:
    """A ``context_loaded`` event without its text or parameters."""

    source: str
    tokens: int
    truncated: bool
    error: str | None = None
    budget: int | None = None  # the source's own budget, when it declares one
    cuts: tuple[Cut, ...] = ()  # what fitting it into that budget cut

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cuts": [asdict(cut) for cut in self.cuts]}


@dataclass(frozen=True, kw_only=True, slots=True)
class CallUsage:
    """One model call's provider-reported usage (the ``usage`` event's ``calls``), so the
    report shows each call's cache-hit ratio, not only the turn's, and whether its prompt
    was shorter than the model's minimum cacheable length (kept beside its price): such a
    prompt is never cached however it is marked."""

    role: str
    model: str
    figures: UsageFigures

    @property
    def min_cacheable_tokens(self) -> int | None:
        """The model's minimum cacheable prefix (``None``: a model without a price)."""
        return min_cacheable_tokens(self.model)

    @property
    def below_min_cacheable(self) -> bool:
        least = self.min_cacheable_tokens
        return least is not None and self.figures.prompt_tokens < least

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "model": self.model,
            **self.figures.to_dict(),
            "prompt_tokens": self.figures.prompt_tokens,
            "min_cacheable_tokens": self.min_cacheable_tokens,
            "below_min_cacheable": self.below_min_cacheable,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnBudget:
    """One turn: each model call's budget report, in log order, and what the turn spent."""

    turn_id: str
    started_at: datetime | None
    status: str
    calls: tuple[BudgetReport, ...] = ()
    usage: UsageSummary = field(default_factory=UsageSummary)
    compressed: tuple[Compression, ...] = ()
    sources: tuple[SourceUsage, ...] = ()
    model_calls: tuple[CallUsage, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "started_at": _iso(self.started_at),
            "status": self.status,
            "calls": [call.to_dict() for call in self.calls],
            "usage": self.usage.to_dict(),
            "compressed": [asdict(c) for c in self.compressed],
            "sources": [s.to_dict() for s in self.sources],
            "model_calls": [call.to_dict() for call in self.model_calls],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionBudgetReport:
    """The token-budget report of a session: its turns in order and the session totals."""

    session_id: str
    turns: tuple[TurnBudget, ...] = ()

    @property
    def totals(self) -> UsageSummary:
        return sum((turn.usage for turn in self.turns), UsageSummary())

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape served by the API and printed by ``bosun budget --json``."""
        return {
            "session_id": self.session_id,
            "turns": [turn.to_dict() for turn in self.turns],
            "totals": self.totals.to_dict(),
        }


@dataclass(kw_only=True, slots=True)
class _TurnAcc:
    calls: list[BudgetReport] = field(default_factory=list)
    usage: UsageSummary = field(default_factory=UsageSummary)
    compressed: list[Compression] = field(default_factory=list)
    sources: list[SourceUsage] = field(default_factory=list)
    model_calls: list[CallUsage] = field(default_factory=list)
    done: str | None = None
    first_at: datetime | None = None


def session_budget_report(
    session_id: str, events: Iterable[StoredEvent], turns: Sequence[TurnRecord]
) -> SessionBudgetReport:
    """Fold a session's log into its budget report (pure).

    Turns come in the order of ``turns`` (the turns table); a turn seen only in the log
    follows, with its status from its ``done`` event. A malformed persisted budget report
    raises ``pydantic.ValidationError``: the log is ours, so that is a bug to surface.
    """
    acc: dict[str, _TurnAcc] = {}
    unsized: list[tuple[str, int]] = []  # summaries no compressed cut has measured yet
    for event in events:
        if event.turn_id is None:
            continue
        turn = acc.setdefault(event.turn_id, _TurnAcc())
        if turn.first_at is None:
            turn.first_at = event.created_at
        _fold(turn, event, unsized, acc)
    records = {t.id: t for t in turns}
    order = [t.id for t in turns] + [tid for tid in acc if tid not in records]
    return SessionBudgetReport(
        session_id=session_id,
        turns=tuple(_turn(tid, acc.get(tid, _TurnAcc()), records.get(tid)) for tid in order),
    )


def _fold(
    turn: _TurnAcc, event: StoredEvent, unsized: list[tuple[str, int]], acc: dict[str, _TurnAcc]
) -> None:
    data = event.data
    match event.type:
        case "context_budget":
            report = BudgetReport.from_dict(data["report"])
            step_id = data.get("step_id", report.step_id)
            call = replace(
                report, role=str(data["role"]), step_id=None if step_id is None else str(step_id)
            )
            turn.calls.append(call)
            _measure_summaries(call, unsized, acc)
        case "usage":
            by_role = {
                str(role): UsageFigures.from_mapping(figures)
                for role, figures in data.get("by_role", {}).items()
            }
            turn.usage += UsageSummary(total=UsageFigures.from_mapping(data), by_role=by_role)
            turn.model_calls += [
                CallUsage(
                    role=str(call["role"]),
                    model=str(call.get("model", "")),
                    figures=UsageFigures.from_mapping(call),
                )
                for call in data.get("calls") or ()
            ]
        case "history_summarised":
            assert event.turn_id is not None
            turn.compressed.append(Compression(up_to_seq=int(data["up_to_seq"])))
            unsized[:] = [(event.turn_id, len(turn.compressed) - 1)]  # only the latest is read
        case "context_loaded":
            turn.sources.append(_source(data))
        case "done":
            turn.done = str(data["status"])
        case _:
            pass  # text, tools, plans and steps carry no budget figures


def _source(data: Mapping[str, Any]) -> SourceUsage:
    error, budget = data.get("error"), data.get("budget")
    return SourceUsage(
        source=str(data["source"]),
        tokens=int(data["tokens"]),
        truncated=bool(data["truncated"]),
        error=None if error is None else str(error),
        budget=None if budget is None else int(budget),
        cuts=tuple(_CUTS.validate_python(data.get("cuts") or [])),
    )


def _measure_summaries(
    call: BudgetReport, unsized: list[tuple[str, int]], acc: dict[str, _TurnAcc]
) -> None:
    """A ``compressed`` cut after a summary measures that summary (history starts at the
    latest one, so the first such cut after it is about it)."""
    if not unsized:
        return
    cut = next((c for c in call.cuts if c.action == "compressed"), None)
    if cut is None:
        return
    turn_id, index = unsized.pop()
    compressed = acc[turn_id].compressed
    compressed[index] = Compression(
        up_to_seq=compressed[index].up_to_seq, summary_tokens=cut.tokens_after
    )


def _turn(turn_id: str, acc: _TurnAcc, record: TurnRecord | None) -> TurnBudget:
    status = record.status if record is not None else acc.done or "running"
    started_at = record.started_at if record is not None else acc.first_at
    return TurnBudget(
        turn_id=turn_id,
        started_at=started_at,
        status=status,
        calls=tuple(acc.calls),
        usage=acc.usage,
        compressed=tuple(acc.compressed),
        sources=tuple(acc.sources),
        model_calls=tuple(acc.model_calls),
    )


def _iso(moment: datetime | None) -> str | None:
    """UTC in the ISO form the API's models emit (``...Z``)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


_CUTS: TypeAdapter[list[Cut]] = TypeAdapter(list[Cut])


async def read_session_budget(store: Store, session_id: str) -> SessionBudgetReport:
    """Read a session's log and turns and build its budget report (no access check)."""
    events = await store.log.read(session_id)
    turns = await store.sessions.turns(session_id)
    return session_budget_report(session_id, events, turns)
