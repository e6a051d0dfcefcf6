"""The phases of a turn before its answer: plan, then load the sources the plan picked.

Each phase returns the events it produced; the turn appends them. Both are best-effort:
planning falls back to a safe plan, and a failing source is recorded and skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import structlog

from context import (
    KNOWLEDGE_SOURCE_TOKENS,
    PROFILE_SECTION,
    Budgets,
    ClientContext,
    History,
    RoleBudget,
    SourceLoad,
    SourceRegistry,
    SourceScope,
    TokenCounter,
    UserData,
    compact_messages,
    entity_loads,
    load_sources,
    loads_from_log,
    loads_needed,
)
from events import ContextBudget, ContextLoaded, Event, PlanCreated, PlanStep
from executors import ExecutorLimits, Loop, StepShare
from planner import Catalogue, PlanLimits, Planning, PlanOutcome, SourcePick, make_plan
from providers import Model
from store import StoredEvent
from tools import Capabilities, ToolRegistry, UserRole
from turn._metering import CapPolicy

_log = structlog.get_logger("bosun.turn")


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnKit:
    """What every turn shares: the catalogue, the budgets and the limits, and the agent's
    ``identity`` (its profile's identity prompt, then its self block; empty: none), which
    every role's prompt starts with so the planner, the executors and the answer speak as
    one agent that knows who it is."""

    tools: ToolRegistry | None = None
    sources: SourceRegistry = field(default_factory=SourceRegistry)
    budgets: Budgets = field(default_factory=Budgets)
    plan_limits: PlanLimits = field(default_factory=PlanLimits)
    executor_limits: ExecutorLimits = field(default_factory=ExecutorLimits)
    capabilities: Capabilities = field(default_factory=Capabilities)
    caps: CapPolicy = field(default_factory=CapPolicy)
    turn_budget: StepShare = field(default_factory=StepShare)  # split among a plan's steps
    planner_timeout_s: float = 30.0
    source_timeout_s: float = 5.0
    knowledge_source_tokens: int = KNOWLEDGE_SOURCE_TOKENS  # a loaded source's cap
    summariser_timeout_s: float = 20.0
    identity: str = ""
    max_steps: int | None = None  # the agent's model turns for all of a turn's executors
    user_data: tuple[str, ...] = ()  # the agent's per-user sources: its user-data block
    loop: Loop = "default"  # forced_tools: every model call calls a tool (turn._forced)
    wall_time_s: float | None = None  # the agent's bound on a turn (the server's still holds)
    _counters: dict[str, TokenCounter] = field(default_factory=dict)

    @property
    def forced(self) -> bool:
        return self.loop == "forced_tools"

    def counter(self, model: Model) -> TokenCounter:
        """One counter per model family and name (loading an encoding costs ~0.2 s)."""
        counter = self._counters.get(model.name)
        if counter is None:
            counter = self._counters[model.name] = TokenCounter(model.name)
        return counter

    def user_data_for(
        self, budget: RoleBudget, scope: SourceScope, counter: TokenCounter
    ) -> UserData | None:
        """The agent's user-data block for a role whose budget has a ``profile`` section
        (``None``: the agent declares no user data, or the role has no room for it)."""
        if not self.user_data or PROFILE_SECTION not in budget.names:
            return None
        return UserData(
            registry=self.sources,
            names=self.user_data,
            scope=scope,
            counter=counter,
            allocation=budget.tokens(PROFILE_SECTION),
            timeout_s=self.source_timeout_s,
        )

    def planning(self, role: UserRole, model: Model) -> Planning:
        """What ``model`` plans with for a caller with ``role``."""
        return Planning(
            catalogue=self.catalogue(role),
            limits=self.plan_limits,
            timeout_s=self.planner_timeout_s,
            budget=self.budgets.planner,
            counter=self.counter(model),
            identity=self.identity,
        )

    def catalogue(self, role: UserRole) -> Catalogue:
        """What the planner may pick from, for a caller with ``role``."""
        tools = self.tools.for_role(role) if self.tools is not None else ToolRegistry()
        tools = self.capabilities.usable(tools)  # an agent's ungranted tools are never shown
        return Catalogue(
            tools={t.name: t.describe("summary") for t in tools},
            sources={name: self.sources.get(name).description for name in self.sources.names()},
        )


def plan_events(outcome: PlanOutcome, models: Mapping[str, str] | None = None) -> list[Event]:
    """The events a plan is logged as; ``models``: the spec each role runs with."""
    plan = outcome.plan
    events: list[Event] = [
        PlanCreated(
            strategy=plan.strategy,
            reasoning=plan.reasoning,
            steps=[
                PlanStep(
                    id=s.id,
                    goal=s.goal,
                    tools=list(s.tools),
                    depends_on=list(s.depends_on),
                    max_tool_calls=s.max_tool_calls,
                )
                for s in plan.steps
            ],
            sources=[s.name for s in plan.sources],
            executors=plan.executors,
            repaired=outcome.repaired,
            fallback=outcome.fallback,
            models=dict(models) if models else None,
        )
    ]
    if outcome.budget is not None:
        events.append(ContextBudget(role="planner", report=outcome.budget.to_dict()))
    return events


async def plan_turn(
    kit: TurnKit,
    model: Model,
    text: str,
    *,
    role: UserRole,
    view: History,
    log: Sequence[StoredEvent],
    scope: SourceScope | None = None,
    client: ClientContext | None = None,
) -> PlanOutcome:
    """Plan ``text``; with a ``scope``, the planner sees the agent's user-data block, and
    the request's ``client`` context with the request.

    A provider failure gives the fallback plan (the turn still answers); a cap's refusal
    (``BudgetExceededError``) is not a provider failure: it raises and ends the turn."""
    loaded = [load.describe() for load in loads_from_log(log)]
    planning = kit.planning(role, model)
    user = None
    if scope is not None:
        loader = kit.user_data_for(kit.budgets.planner, scope, kit.counter(model))
        user = await loader.load() if loader is not None else None
    outcome = await make_plan(
        model, text, planning, history=compact_messages(view.messages), loaded=loaded,
        user_data=user, client=client, on_error="fallback",
    )  # fmt: skip
    if outcome.fallback_code is not None:  # the turn goes on: say so where operators look
        _log.warning("planner.fallback", code=outcome.fallback_code, attempts=outcome.attempts)
    return outcome


async def load_picked_sources(
    kit: TurnKit,
    picked: Sequence[SourcePick],
    *,
    scope: SourceScope,
    log: Sequence[StoredEvent],
    counter: TokenCounter,
    client: ClientContext | None = None,
) -> list[ContextLoaded]:
    """Fetch what the plan ``picked``, after the sources bound to the ``client`` context's
    entity (with its id), that the session does not hold yet (append-only), each source
    whole up to the per-source cap (a longer one is cut and says so): the section holds
    them all, since every later call of the session gets them whole."""
    wanted = entity_loads(kit.sources, client)
    wanted += [SourceLoad(name=s.name, params=s.params) for s in picked]
    needed = loads_needed(wanted, loads_from_log(log))
    if not needed:
        return []
    cap = kit.knowledge_source_tokens
    loaded = await load_sources(
        kit.sources,
        needed,
        scope=scope,
        counter=counter,
        budget_tokens=cap * len(needed) + 64 * len(needed),  # the cap, and the separators
        timeout_s=kit.source_timeout_s,
        cap=cap,
    )
    return [
        ContextLoaded(
            source=r.name,
            tokens=r.tokens,
            truncated=r.truncated,
            params=dict(r.params),
            text=r.text or None,
            error=r.error,
            budget=r.budget,
            cuts=[asdict(cut) for cut in r.cuts] or None,
        )
        for r in loaded.results
    ]


def knowledge(log: Sequence[StoredEvent], new: Sequence[ContextLoaded]) -> list[tuple[str, str]]:
    """The session's loaded context, oldest first: (source name, text)."""
    earlier = [
        (str(e.data["source"]), str(e.data["text"]))
        for e in log
        if e.type == "context_loaded" and e.data.get("text")
    ]
    return earlier + [(c.source, c.text) for c in new if c.text]
