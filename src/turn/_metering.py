"""Every model call of a turn, metered: the org's daily cap, usage rows, the usage event.

A turn's models are wrapped (``TurnMeter.wrap``) so that no call escapes: before a call
the meter reserves an upper bound of its cost against the org's day (while calls in flight
hold the rest of the cap it waits for them; once the day's spend reaches the cap it is
refused: ``BudgetExceededError`` ends the turn with ``budget_exceeded``); after it, the real usage
is recorded per call, per user and day, and per org and day, in one transaction. Alerts
fire once per threshold and day. The per-role totals become the turn's ``usage`` event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import date, datetime

import structlog

import telemetry
from events import Usage
from providers import (
    Completion,
    Model,
    ModelRequest,
    ScriptExhaustedError,
    StreamItem,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    cost_usd_micros,
)
from store import DaySpend, Store, UsageRecord, resets_at, utc_day
from turn._tracing import ChatSpan

_log = structlog.get_logger("bosun.cost")
UNMETERED = -1
_PROBE = TokenUsage(
    input_tokens=10**9, output_tokens=10**9, cache_write_tokens=10**9, cache_write_1h_tokens=10**9
)  # costs nothing only if every price a call's ceiling uses is nothing
_FIRST_PAUSE_S, _LAST_PAUSE_S = 0.01, 0.2  # a call waiting for room under the cap
DEFAULT_CAPS_USD = {"lite": 1.0, "pro": 5.0, "elite": 25.0}


@dataclass(frozen=True, kw_only=True, slots=True)
class CapPolicy:
    """Daily caps by tier in micro-dollars (``-1``: unmetered) and the alert thresholds."""

    caps_usd_micros: Mapping[str, int] = field(
        default_factory=lambda: {t: round(usd * 1_000_000) for t, usd in DEFAULT_CAPS_USD.items()}
    )
    default_tier: str = "lite"
    thresholds: tuple[int, ...] = (50, 80, 100)

    def __post_init__(self) -> None:
        if self.default_tier not in self.caps_usd_micros:
            raise ValueError(
                f"default tier {self.default_tier!r} has no cap "
                f"(tiers: {sorted(self.caps_usd_micros)})"
            )

    def cap(self, tier: str | None) -> tuple[str, int]:
        """The tier in force (an unknown one falls back to the default) and its cap."""
        known = tier if tier is not None and tier in self.caps_usd_micros else self.default_tier
        return known, self.caps_usd_micros[known]


class BudgetExceededError(Exception):
    """The org's daily cap is reached: no further model call runs today."""

    code = "budget_exceeded"

    def __init__(self, message: str, resets_at: datetime) -> None:
        super().__init__(message)
        self.message = message
        self.resets_at = resets_at


def usd(micros: int) -> str:
    return f"${micros / 1_000_000:,.2f}"


def call_ceiling(model: str, request: ModelRequest) -> int:
    """An upper bound of what ``request`` can cost, in micro-dollars: every input byte a
    token at the dearest input price (1-hour cache writes), and every allowed output
    token."""
    if cost_usd_micros(model, _PROBE) == 0:  # a free (or unpriced) model: nothing to size
        return 0
    size = sum(len(block.text.encode()) for block in request.system)
    for message in request.messages:
        for part in message.parts:
            match part:
                case TextPart(text=text):
                    size += len(text.encode())
                case ToolCall(name=name, input=data):
                    size += len(name) + len(json.dumps(data).encode())
                case ToolResult(content=content):
                    size += len(content.encode())
    for tool in request.tools:
        size += len(tool.name) + len(tool.description.encode()) + len(json.dumps(tool.input_schema))
    if request.response_schema is not None:
        size += len(json.dumps(request.response_schema.schema))
    input_cost = max(
        cost_usd_micros(model, TokenUsage(input_tokens=size)),
        cost_usd_micros(model, TokenUsage(cache_write_tokens=size, cache_write_1h_tokens=size)),
    )
    return input_cost + cost_usd_micros(model, TokenUsage(output_tokens=request.max_tokens))


@dataclass
class TurnMeter:
    """Meters one turn's model calls for ``org_id``'s cap and keeps its per-role totals."""

    store: Store
    policy: CapPolicy
    org_id: str
    user_id: str
    session_id: str | None  # None: a dry run, counted per day but with no usage row
    turn_id: str
    by_role: dict[str, tuple[TokenUsage, int]] = field(default_factory=dict)
    calls: list[dict[str, int | float | str | None]] = field(default_factory=list)
    tier: str | None = None
    _cap: int | None = None

    async def cap(self) -> int:
        if self._cap is None:
            self.tier, self._cap = self.policy.cap(await self.store.spend.tier(self.org_id))
        return self._cap

    def wrap(self, model: Model, role: str) -> Model:
        return MeteredModel(model, self, role)

    async def check(self) -> None:
        """Refuse a turn while the org's day is at its cap (before anything runs)."""
        cap = await self.cap()
        if cap == UNMETERED:
            return
        day = utc_day()
        today = await self.store.spend.today(self.org_id, day)
        if today.spent_usd_micros >= cap:
            raise BudgetExceededError(
                self._message(cap, today.spent_usd_micros, day), resets_at(day)
            )

    async def reserve(self, model: str, request: ModelRequest) -> tuple[date, int]:
        day = utc_day()
        cap = await self.cap()
        if cap == UNMETERED:  # nothing to reserve against: skip sizing the request
            return day, 0
        ceiling = call_ceiling(model, request)
        if ceiling == 0:
            return day, 0
        pause = _FIRST_PAUSE_S
        while await self.store.spend.reserve(self.org_id, day, ceiling, cap) is None:
            spent = (await self.store.spend.today(self.org_id, day)).spent_usd_micros
            if spent >= cap:
                raise BudgetExceededError(self._message(cap, spent, day), resets_at(day))
            # Under the cap, but the calls in flight hold the rest of it: wait for them to
            # settle (they may leave room, or use it up). Polling works across workers.
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LAST_PAUSE_S)
        return day, ceiling

    def tally(self, role: str, completion: Completion | None) -> UsageRecord | None:
        """Count a finished call in the turn's totals at once (so a closing ``usage`` event
        has it even if the turn is being cancelled); the record to persist."""
        if completion is None:
            return None
        usage = completion.usage
        cost = cost_usd_micros(completion.model, usage)
        self._count(role, completion.model, usage, cost)
        return UsageRecord(
            session_id=self.session_id or "",
            turn_id=self.turn_id,
            org_id=self.org_id,
            user_id=self.user_id,
            role=role,
            model=completion.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost_usd_micros=cost,
        )

    def _count(self, role: str, model: str, usage: TokenUsage, cost: int) -> None:
        before, before_cost = self.by_role.get(role, (TokenUsage(), 0))
        self.by_role[role] = (before + usage, before_cost + cost)
        self.calls.append(call_figures(role, model, usage, cost))

    async def adopt(self) -> None:
        """Count the calls of this turn that no ``usage`` event in its log reported: those
        of an attempt whose worker died (call it before this attempt makes any). They are
        recorded and charged already; the turn's ``usage`` event is where they were
        missing."""
        if self.session_id is None:
            return
        logged = await self.store.log.read(self.session_id, turn_id=self.turn_id)
        reported = sum(len(e.data.get("calls") or ()) for e in logged if e.type == "usage")
        rows = await self.store.sessions.turn_usage(self.session_id, self.turn_id)
        for row in rows[reported:]:  # recorded in call order: the reported ones come first
            usage = TokenUsage(
                input_tokens=row.input_tokens, output_tokens=row.output_tokens,
                cache_read_tokens=row.cache_read_tokens, cache_write_tokens=row.cache_write_tokens,
            )  # fmt: skip
            self._count(row.role, row.model, usage, row.cost_usd_micros)

    def settle(self, day: date, reserved: int, record: UsageRecord | None) -> asyncio.Task[None]:
        """Record a finished call (or give back the reservation of one that was not). The
        record's write is queued before this returns (where the store keeps writes in
        order), so the caller may go on: the turn's later writes commit after it."""
        if record is None:
            written: Awaitable[DaySpend | None] = self.store.spend.release(
                self.org_id, day, reserved
            )
        else:
            written = self.store.spend.settle(
                record, day=day, reserved=reserved, per_call=self.session_id is not None
            )
        settling = asyncio.ensure_future(self._after_settle(day, written))
        _settling.add(settling)  # keeps it alive past a cancelled caller
        settling.add_done_callback(_settled)
        return settling

    @property
    def settles_in_order(self) -> bool:
        """Whether a call's caller may go on before its settle commits: the store commits
        writes in the order they were queued, and the turn's closing append, queued later,
        is what its client waits for. A dry run (no session) has no closing append."""
        return self.session_id is not None and self.store.db.writes_in_order

    async def _after_settle(self, day: date, written: Awaitable[DaySpend | None]) -> None:
        after = await written
        if after is not None:  # a free call leaves the day (and its alerts) as they were
            await self._alerts(day, after)

    async def _alerts(self, day: date, after: DaySpend) -> None:
        cap = await self.cap()
        if cap <= 0:
            return
        pct = after.spent_usd_micros * 100 // cap
        reached = [t for t in self.policy.thresholds if pct >= t]
        if not reached:
            return
        before = await self.store.spend.raise_alert(self.org_id, day, max(reached))
        if before is None:
            return
        for threshold in (t for t in reached if t > before):
            _log.warning(
                "cap.threshold",
                org_id=self.org_id,
                threshold_pct=threshold,
                spent_usd_micros=after.spent_usd_micros,
                cap_usd_micros=cap,
                tier=self.tier,
                day=day.isoformat(),
            )

    def _message(self, cap: int, spent: int, day: date) -> str:
        return (
            f"The daily model budget of {usd(cap)} for this organisation (tier {self.tier}) "
            f"is used up: {usd(spent)} spent today. It resets at "
            f"{resets_at(day).strftime('%Y-%m-%d %H:%M')} UTC."
        )

    def usage_event(self) -> Usage:
        """The turn's totals and per-role breakdown; cost in micro-dollars."""
        total = sum((u for u, _ in self.by_role.values()), TokenUsage())
        return Usage(
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cache_read_tokens=total.cache_read_tokens,
            cache_write_tokens=total.cache_write_tokens,
            cache_write_1h_tokens=total.cache_write_1h_tokens,
            cost_usd_micros=sum(cost for _, cost in self.by_role.values()),
            cache_hit_ratio=hit_ratio(total),
            calls=[dict(call) for call in self.calls] or None,
            by_role={
                role: {
                    "input_tokens": u.input_tokens,
                    "output_tokens": u.output_tokens,
                    "cache_read_tokens": u.cache_read_tokens,
                    "cache_write_tokens": u.cache_write_tokens,
                    "cache_write_1h_tokens": u.cache_write_1h_tokens,
                    "cost_usd_micros": cost,
                }
                for role, (u, cost) in self.by_role.items()
            },
        )


def hit_ratio(usage: TokenUsage) -> float | None:
    """``cache_read / (cache_read + input)``: the share of the prompt's unwritten tokens
    served from the cache (``None`` when both are 0)."""
    seen = usage.cache_read_tokens + usage.input_tokens
    return round(usage.cache_read_tokens / seen, 4) if seen else None


def call_figures(
    role: str, model: str, usage: TokenUsage, cost: int
) -> dict[str, int | float | str | None]:
    """One model call's line in the ``usage`` event's ``calls``: role, model, tokens,
    cost and its own cache-hit ratio (numbers and names only)."""
    return {
        "role": role,
        "model": model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "cost_usd_micros": cost,
        "cache_hit_ratio": hit_ratio(usage),
    }


class MeteredModel:
    """``model`` with every call reserved against the cap before and recorded after."""

    def __init__(self, model: Model, meter: TurnMeter, role: str) -> None:
        self._model = model
        self._meter = meter
        self._role = role

    @property
    def name(self) -> str:
        return self._model.name

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        day, reserved = await self._meter.reserve(self._model.name, request)
        completion: Completion | None = None
        failure: BaseException | None = None
        traced = None
        if telemetry.active():  # off: not even the span's attributes are built
            traced = ChatSpan(self._model.name, self._role, self._meter.session_id)
            traced.request(request)
        try:
            async with aclosing(self._model.stream(request)) as items:
                async for item in items:
                    if isinstance(item, Completion):
                        completion = item
                    yield item
        except ScriptExhaustedError as exc:  # the turn's error names the role that called
            exc.role = exc.role or self._role
            failure = exc
            raise
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):  # the caller stopping early is no failure
                failure = exc
            raise
        finally:
            # Recorded even when the caller is cancelled: the provider charged for it.
            record = self._meter.tally(self._role, completion)
            if traced is not None:
                traced.end(completion, record, failure)
            settling = self._meter.settle(day, reserved, record)
            if not self._meter.settles_in_order:
                await asyncio.shield(settling)


_settling: set[asyncio.Task[None]] = set()  # keeps settles alive past a cancelled caller


async def settles_done() -> None:
    """Wait for the settles under way, their cap alerts included: where the store keeps
    writes in order a turn ends before its last calls' settles (and their alert reads)
    have run, so whoever reads the day's alerts right after a turn waits here first."""
    while pending := [task for task in _settling if not task.done()]:
        await asyncio.wait(pending)


def _settled(task: asyncio.Task[None]) -> None:
    """Forget a finished settle; one nobody awaited reports its failure here."""
    _settling.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        _log.error("usage.settle_failed", error=type(exc).__name__)
