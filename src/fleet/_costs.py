"""Per-agent cost governance: alerts at thresholds, a pause at the cost limit, the usage
view, and the notices a turn's end owes (``cost_alert``, ``agent_paused``,
``run_finished``).

The runner tells ``CostGuard.turn_ended`` after every turn of any trigger (chat, run,
resume, takeover). The agent's spend in its period (a UTC day or month) is read from the
usage rows of its sessions; each threshold crossed fires once per period (an alert row
inserted only if absent) and the limit pauses the agent with a conditional update, so
several workers seeing turns end at once notify once. A pause stops new turns only:
turns in flight wrap up, and a turn that ends while the agent is still over its limit
pauses it again after a resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import structlog

from events import TurnStatus
from fleet._directory import Agent, AgentDirectory, AgentNotFoundError
from fleet._profile import DEFAULT_HANDLE, ProfileCost
from store import DayUsage, FiredAlert, RunFigures, RunRecord, Store

MICROS = 1_000_000
COST_LIMIT = "cost_limit"
"""``paused_reason`` of an agent its cost limit paused."""
FINISHED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "expired"})
"""Statuses that end a run (a suspended run waits for an answer: not finished)."""
RECENT_RUNS = 10
_log = structlog.get_logger("bosun.costs")

Period = Literal["day", "month"]


@dataclass(frozen=True, slots=True)
class CostPeriod:
    """The period a spend counts against: its kind, its key (``2026-11`` or
    ``2026-11-24``) and its first instant (UTC)."""

    kind: Period
    key: str
    start: datetime


def cost_period(kind: Period, now: datetime | None = None) -> CostPeriod:
    """The UTC day or month ``now`` falls in."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if kind == "day":
        return CostPeriod(kind, day.date().isoformat(), day)
    return CostPeriod(kind, f"{now.year:04d}-{now.month:02d}", day.replace(day=1))


def micros(usd: float) -> int:
    """``usd`` in micro-dollars, at least one (a bound of 0 would be reached by nothing)."""
    return max(1, round(usd * MICROS))


def usd(amount: int) -> float:
    return round(amount / MICROS, 6)


@dataclass(frozen=True, slots=True)
class AgentUsage:
    """What ``GET /v1/agents/{handle}/usage`` shows: the daily series (UTC, zero-filled,
    oldest first), today and this month, the period's spend against its thresholds and
    limit, the alerts it fired, the pause, and the recent runs with their figures."""

    agent: Agent
    days: list[DayUsage]
    today: DayUsage
    month: DayUsage
    period: CostPeriod
    period_spent_usd_micros: int
    alerts: list[FiredAlert]
    runs: list[tuple[RunRecord, RunFigures]] = field(default_factory=list)


class CostGuard:
    """Checks an agent's spend when its turns end, and reads and resumes agents."""

    def __init__(self, store: Store, agents: AgentDirectory) -> None:
        self._store = store
        self._agents = agents

    async def turn_ended(
        self, job: Mapping[str, Any], turn_id: str, status: TurnStatus, spent: int
    ) -> None:
        """The runner's ``ended`` hook: the agent's costs, then the run's notice. A turn
        that spent nothing crosses no threshold (no check); a chat turn's job says it is
        no run (no lookup): a free chat turn costs no query here."""
        maybe_run = not job or job.get("trigger") == "run"
        run = await self._store.runs.for_turn(turn_id) if maybe_run else None
        org_id = str(job.get("org_id") or (run.org_id if run else ""))
        handle = str(job.get("agent") or (run.agent if run else DEFAULT_HANDLE))
        if org_id and spent > 0:
            await self.check(org_id, handle)
        if run is not None and status in FINISHED:
            await self._store.notices.publish(
                run.org_id,
                "run_finished",
                {"run_id": run.id, "agent": run.agent, "status": status,
                 "session_id": run.session_id, "turn_id": turn_id},
            )  # fmt: skip

    async def check(self, org_id: str, handle: str, now: datetime | None = None) -> None:
        """Fire the thresholds the agent's spend in its period has crossed (each once per
        period) and pause it at its limit (once per pause)."""
        try:
            agent = await self._agents.get(org_id, handle)
        except AgentNotFoundError:
            return  # deleted since: nothing to alert about
        cost = agent.profile.cost
        period = cost_period(cost.period, now)
        costs = self._store.agent_costs
        spent = await costs.spent(org_id, agent.handle, period.start)
        await self._alerts(org_id, agent.handle, cost, period, spent)
        limit = None if cost.limit_usd is None else micros(cost.limit_usd)
        if limit is None or spent < limit or agent.version == 0:
            return
        if await costs.pause(org_id, agent.handle, COST_LIMIT):
            _log.warning("agent.paused", org_id=org_id, agent=agent.handle, reason=COST_LIMIT)
            await self._store.notices.publish(
                org_id,
                "agent_paused",
                {"agent": agent.handle, "reason": COST_LIMIT, "spent_usd": usd(spent),
                 "limit_usd": cost.limit_usd},
            )  # fmt: skip

    async def _alerts(
        self, org_id: str, handle: str, cost: ProfileCost, period: CostPeriod, spent: int
    ) -> None:
        crossed = sorted({m for m in map(micros, cost.alert_thresholds_usd) if m <= spent})
        if not crossed:
            return
        costs = self._store.agent_costs
        fired = {a.threshold_usd_micros for a in await costs.fired(org_id, handle, period.key)}
        for threshold in crossed:
            if threshold in fired or not await costs.fire(
                org_id, handle, period.key, threshold, spent
            ):
                continue  # fired before, or by another worker just now
            _log.info(
                "agent.cost_alert", org_id=org_id, agent=handle, threshold_usd_micros=threshold
            )
            await self._store.notices.publish(
                org_id,
                "cost_alert",
                {"agent": handle, "threshold_usd": usd(threshold), "spent_usd": usd(spent),
                 "period": period.kind, "period_key": period.key},
            )  # fmt: skip

    async def resume(self, org_id: str, handle: str, *, by: str) -> Agent:
        """Unpause the agent: its server pause (the cost limit's) and, when its profile
        says ``paused: true``, that too (a new version saying ``false``). Raises
        ``AgentNotFoundError``, and ``ProfileError`` when the policy refuses the save."""
        agent = await self._agents.get(org_id, handle)
        if agent.version == 0:
            return agent  # the built-in default is never paused
        if await self._store.agent_costs.unpause(org_id, agent.handle):
            _log.info(
                "agent.resumed", org_id=org_id, agent=agent.handle, reason=agent.paused_reason
            )
        if agent.profile.paused:
            running = agent.profile.model_copy(update={"paused": False})
            await self._agents.save(org_id, agent.handle, running, by=by, create=False)
        return await self._agents.get(org_id, agent.handle)

    async def usage(
        self, org_id: str, handle: str, days: int, now: datetime | None = None
    ) -> AgentUsage:
        """The agent's usage view over the last ``days`` UTC days (today included)."""
        agent = await self._agents.get(org_id, handle)
        now = (now or datetime.now(UTC)).astimezone(UTC)
        today = now.date()
        first = today - timedelta(days=days - 1)
        month = cost_period("month", now)
        since = min(datetime(first.year, first.month, first.day, tzinfo=UTC), month.start)
        costs = self._store.agent_costs
        by_day = {d.day: d for d in await costs.days(org_id, agent.handle, since)}
        period = cost_period(agent.profile.cost.period, now)
        runs = await self._store.runs.history(org_id, agent.handle, limit=RECENT_RUNS)
        figures = await self._store.runs.figures(runs)
        return AgentUsage(
            agent=agent,
            days=[_day(by_day, first + timedelta(days=n)) for n in range(days)],
            today=_day(by_day, today),
            month=_total(month.key, [d for k, d in by_day.items() if k.startswith(month.key)]),
            period=period,
            period_spent_usd_micros=sum(
                d.cost_usd_micros for k, d in by_day.items() if k >= period.start.date().isoformat()
            ),
            alerts=await costs.fired(org_id, agent.handle, period.key),
            runs=[(run, figures.get(run.id, RunFigures())) for run in runs],
        )


def _day(by_day: dict[str, DayUsage], day: date) -> DayUsage:
    key = day.isoformat()
    return by_day.get(key, DayUsage(key))


def _total(label: str, days: list[DayUsage]) -> DayUsage:
    return DayUsage(
        label,
        sum(d.calls for d in days),
        sum(d.input_tokens for d in days),
        sum(d.output_tokens for d in days),
        sum(d.cost_usd_micros for d in days),
    )
