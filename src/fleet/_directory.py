"""An org's agents: their profiles (validated, versioned) and the turn kit each runs with.

Every org has a ``default`` agent. Until an owner saves a profile under that handle it is
the server's configuration as it was before agents existed (version 0, never stored), so
chats that name no agent behave exactly as they did.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from context import PROFILE_SECTION, Budgets, TokenCounter
from executors import StepShare
from fleet._profile import DEFAULT_HANDLE, AgentPolicy, AgentProfile, ProfileError
from fleet._self import agent_self, self_block
from store import AgentRecord, Store
from tools import COMMUNICATION_TOOLS, ToolDef, ToolRegistry, UserRole, communication_tools

if TYPE_CHECKING:
    from tools import McpPool, OpenApiProvider
from turn import ModelResolver, TurnKit, TurnRoleModels, TurnSetup

IDENTITY_COUNTER = "claude-sonnet-4-5"
"""The tokenizer an identity is measured with to grow the budgets (any model's is close)."""
SUBSCRIPTIONS_FRESH_S = 5.0
"""How old a self block's subscriptions may be: read once per this long per agent and
process (a busy agent's runs would otherwise pay a read each); this process's own
changes show at once, another's within it."""


class AgentNotFoundError(LookupError):
    """No agent (or no such version of one) under that handle in the org."""


@dataclass(frozen=True, slots=True)
class Agent:
    """One version of an org's agent; version 0 is the built-in default (never saved)."""

    handle: str
    version: int
    profile: AgentProfile
    created_at: datetime | None = None
    updated_at: datetime | None = None
    paused_at: datetime | None = None
    paused_reason: str | None = None

    @property
    def parent(self) -> str | None:
        """The user who owns the agent (``None``: the org's agent)."""
        return self.profile.parent

    def acting_user(self, kind: str) -> tuple[str, UserRole]:
        """Who a run no person triggered (``kind``: schedule, webhook, an event) acts as:
        a person-owned agent's parent, as a ``member`` whatever their role (what the
        agent may do in the background is never more than a member may); an org's agent
        a made-up ``kind:handle`` user with the staff role, as before parents existed."""
        if self.parent is not None:
            return self.parent, "member"
        return f"{kind}:{self.handle}", "staff"

    @property
    def paused(self) -> bool:
        """Paused by its profile (``paused: true``) or by the server (its cost limit)."""
        return self.profile.paused or self.paused_at is not None

    def paused_message(self) -> str:
        """Why a paused agent takes no new turns (the 409's message)."""
        if self.paused_reason == "cost_limit":
            why = "it reached its cost limit for the period; an owner or staff may resume it"
        elif self.paused_at is not None:
            why = f"{self.paused_reason or 'paused'}; an owner or staff may resume it"
        else:
            why = "its profile says paused"
        return f"The agent {self.handle!r} is paused: {why}"


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What a turn of ``agent`` runs with: its kit, and its model spec per role (roles it
    leaves unset use the server's models)."""

    agent: Agent
    kit: TurnKit
    specs: dict[str, str]


class AgentDirectory:
    """Reads, saves and sets up an org's agents under the server's ``policy``."""

    def __init__(
        self,
        store: Store,
        policy: AgentPolicy,
        kit: TurnKit,
        default: AgentProfile,
        *,
        mcp: McpPool | None = None,
        openapi: OpenApiProvider | None = None,
    ) -> None:
        self._store = store
        self.policy = policy
        self._kit = kit
        self._default = Agent(DEFAULT_HANDLE, 0, default)
        self._mcp = mcp  # None: no MCP toolsets on this server (a CLI, a test)
        self._openapi = openapi  # None: no OpenAPI toolsets (a CLI, a test)

    async def list(self, org_id: str) -> list[Agent]:
        """The org's agents by handle, the default among them (saved or built in)."""
        agents = [_agent(record) for record in await self._store.agents.list(org_id)]
        if all(a.handle != DEFAULT_HANDLE for a in agents):
            agents.append(self._default)
        return sorted(agents, key=lambda a: a.handle)

    async def get(self, org_id: str, handle: str | None) -> Agent:
        """The current version of ``handle`` (``None``: the default agent)."""
        record = await self._store.agents.get(org_id, handle or DEFAULT_HANDLE)
        if record is not None:
            return _agent(record)
        if handle in (None, DEFAULT_HANDLE):
            return self._default
        raise AgentNotFoundError(f"No agent {handle!r} in this organisation")

    async def at_version(self, org_id: str, handle: str, version: int) -> Agent:
        """The version a turn or run recorded (readable after later saves or deletion)."""
        if version == 0 and handle == DEFAULT_HANDLE:
            return self._default
        saved = await self._store.agents.version(org_id, handle, version)
        if saved is None:
            raise AgentNotFoundError(f"No version {version} of agent {handle!r}")
        return Agent(handle, version, AgentProfile.model_validate(saved))

    async def save(
        self, org_id: str, handle: str, profile: AgentProfile, *, by: str, create: bool
    ) -> Agent:
        """Save ``profile`` as the next version of ``handle`` once the policy admits it
        (``ProfileError``); ``create``: only a new handle (``store.AgentExistsError``)."""
        await self.check(org_id, profile)
        if create and handle == DEFAULT_HANDLE:
            raise ProfileError("agent_exists", "Every org has a default agent: update it instead")
        if handle == DEFAULT_HANDLE and profile.parent is not None:
            raise ProfileError("default_agent", "The default agent is the org's: it has no parent")
        record = await self._store.agents.save(
            org_id, handle, profile.model_dump(mode="json"), by=by, create=create
        )
        return _agent(record)

    async def check(self, org_id: str, profile: AgentProfile) -> None:
        """Raise ``ProfileError`` if the policy refuses ``profile`` in ``org_id`` (whose
        MCP and OpenAPI toolsets it may name as routers)."""
        toolsets = [t.name for t in await self._store.mcp_toolsets.list_for_org(org_id)]
        toolsets += await self._store.openapi_toolsets.names(org_id)
        self.policy.check(profile, toolsets)

    async def delete(self, org_id: str, handle: str) -> None:
        if handle == DEFAULT_HANDLE:
            raise ProfileError("default_agent", "The default agent cannot be deleted")
        if not await self._store.agents.delete(org_id, handle):
            raise AgentNotFoundError(f"No agent {handle!r} in this organisation")

    async def setup(self, agent: Agent, *, org_id: str, background: bool = False) -> AgentSetup:
        """The kit a turn of ``agent`` in ``org_id`` runs with (the built-in default: the
        server's own); ``background``: a run nobody watches, whose approvals defer rather
        than wait. The tools of the org's MCP and OpenAPI toolsets its profile names join
        the kit, less those of an MCP toolset that is down (withheld until it is back)."""
        if agent.version == 0:
            caps = replace(self._kit.capabilities, mode="defer" if background else "suspend")
            return AgentSetup(agent, replace(self._kit, capabilities=caps), {})
        profile = agent.profile
        remote = await self._remote_tools(org_id, agent, background=background)
        kit = _with_tools(self._kit, remote)
        limits = profile.limits
        kit = replace(
            kit,
            max_steps=limits.max_steps,
            wall_time_s=limits.wall_time_s,
            budgets=_with_profile(kit.budgets, profile),
            user_data=tuple(profile.user_data),
            capabilities=self.policy.capabilities(profile, background=background),
            turn_budget=_share(kit.turn_budget, limits.max_tool_calls, limits.budget_usd),
        )
        if profile.loop == "forced_tools":
            kit = forced_kit(kit, limits.max_iterations)
        return AgentSetup(agent, await self._voiced(kit, org_id, agent), profile.models.specs())

    async def _voiced(self, kit: TurnKit, org_id: str, agent: Agent) -> TurnKit:
        """``kit`` speaking as ``agent``: its identity prompt, then its self block (who it
        is, the tools of ``kit`` it may and may not use, its subscriptions), as one text
        that starts every role's prompt; each role's ``system`` budget grows by it."""
        me = agent_self(
            agent.handle,
            agent.profile.name,
            tools=kit.tools or ToolRegistry(),
            capabilities=kit.capabilities,
            parent=agent.profile.parent,
            subscriptions=[
                sub.describe()
                for sub in await self._store.subscriptions.for_agent(
                    org_id, agent.handle, max_age_s=SUBSCRIPTIONS_FRESH_S
                )
            ],
        )
        block = self_block(me, counter=_counter())
        identity = "\n\n".join(t for t in (agent.profile.identity_prompt, block) if t)
        return replace(kit, identity=identity, budgets=_room_for(kit.budgets, identity))

    def setups(self, resolver: ModelResolver) -> TurnSetup:
        """The runner's hook for resumes and takeovers: a recorded job's kit and models,
        from the agent version it recorded (models no longer offered: the server's)."""

        async def setup(job: Mapping[str, Any]) -> tuple[TurnKit, TurnRoleModels]:
            org_id = str(job["org_id"])
            handle = str(job.get("agent") or DEFAULT_HANDLE)
            agent = await self.at_version(org_id, handle, int(job.get("agent_version") or 0))
            chosen = await self.setup(agent, org_id=org_id, background=job.get("trigger") == "run")
            models = await resolver.resolve_offered(
                org_id=org_id,
                requested=job.get("model"),
                planner=job.get("planner_model"),
                roles=chosen.specs,
            )
            return chosen.kit, models

        return setup

    async def _remote_tools(
        self, org_id: str, agent: Agent, *, background: bool
    ) -> Sequence[ToolDef]:
        """The tools of the MCP and OpenAPI toolsets ``agent``'s profile grants (routers
        that are not the server's own): only toolsets a profile names are ever offered.
        OpenAPI tools act for the agent's caller (``background``: nobody's token)."""
        profile = agent.profile
        if profile.tools is None:
            return []
        own = {t.router for t in self._kit.tools or ()} | {
            name.split(".", 1)[0] for name in COMMUNICATION_TOOLS
        }
        toolsets = [router for router in profile.routers() if router not in own]
        if not toolsets:
            return []
        tools = list(await self._mcp.tools(org_id, toolsets)) if self._mcp else []
        if self._openapi is not None:
            tools += await self._openapi.tools(
                org_id, toolsets, agent=agent.handle, background=background
            )
        return tools


def _with_tools(kit: TurnKit, tools: Sequence[ToolDef]) -> TurnKit:
    """``kit`` with ``tools`` added (one whose name or wire name is taken is left out)."""
    if not tools:
        return kit
    registry = ToolRegistry(kit.tools or ())
    for tool in tools:
        if tool.name not in registry and tool.wire_name not in registry:
            registry.register(tool)
    return replace(kit, tools=registry)


def default_policy(
    kit: TurnKit, models: Iterable[str], always_allowed: Iterable[str] = ()
) -> AgentPolicy:
    """The server's policy from its kit: its tools, the tools its configuration blocks
    (``executor.block_tools``), and the model specs it offers."""
    return AgentPolicy(
        tools=kit.tools or ToolRegistry(),
        always_allowed=frozenset(always_allowed),
        always_blocked=kit.capabilities.blocked,
        models=frozenset(models),
        user_data=frozenset(kit.sources.user_data_names()),
    )


def default_profile(kit: TurnKit) -> AgentProfile:
    """The built-in default agent: the server's configuration (``executor.allow_tools``)."""
    allow = kit.capabilities.allow
    return AgentProfile(name="Default agent", tools=None if allow is None else sorted(allow))


@functools.cache
def _counter() -> TokenCounter:
    return TokenCounter(IDENTITY_COUNTER)  # loading an encoding takes ~0.2 s: once


def _room_for(budgets: Budgets, identity: str) -> Budgets:
    """``budgets`` with each prompting role's system section grown by the identity's
    tokens (the profile's prompt and the self block), so neither crowds out the role's
    own instructions."""
    if not identity:
        return budgets
    extra = _counter().count(identity)
    grown = {
        role: (b := budgets.for_role(role)).with_tokens({"system": b.tokens("system") + extra})
        for role in ("planner", "executor", "merger")
    }
    return replace(budgets, **grown)


def _with_profile(budgets: Budgets, profile: AgentProfile) -> Budgets:
    """An agent with user data gets a ``profile`` section in its executor budget too
    (the planner's allocation), so the block that rides every tool-loop call is
    budgeted and reported like the planner's."""
    if not profile.user_data:
        return budgets
    tokens = budgets.planner.tokens(PROFILE_SECTION)
    return replace(budgets, executor=budgets.executor.with_section(PROFILE_SECTION, tokens))


def forced_kit(kit: TurnKit, max_iterations: int) -> TurnKit:
    """``kit`` for a forced-tools agent: its loop and iteration limit, the communication
    tools added to its tools and granted whatever its ``tools`` say. Its one loop is
    offered every tool the agent may use; a step's tools are always sent whole
    (``context.fit_tools``), so its budgets need no extra room."""
    tools = ToolRegistry(kit.tools or ())
    for tool in communication_tools():
        if tool.name not in tools:
            tools.register(tool)
    caps = kit.capabilities
    if caps.allow is not None:
        caps = replace(caps, allow=caps.allow | COMMUNICATION_TOOLS)
    limits = replace(kit.executor_limits, max_iterations=max_iterations)
    return replace(kit, loop="forced_tools", tools=tools, capabilities=caps, executor_limits=limits)


def _share(share: StepShare, tool_calls: int | None, budget_usd: float | None) -> StepShare:
    """The server's turn budget, tightened by the profile's limits."""
    usd = None if budget_usd is None else round(budget_usd * 1_000_000)
    return replace(
        share,
        tool_calls=_least(share.tool_calls, tool_calls),
        usd_micros=_least(share.usd_micros, usd),
    )


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _agent(record: AgentRecord) -> Agent:
    return Agent(
        record.handle,
        record.version,
        AgentProfile.model_validate(record.profile),
        record.created_at,
        record.updated_at,
        record.paused_at,
        record.paused_reason,
    )
