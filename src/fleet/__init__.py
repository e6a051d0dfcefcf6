"""The fleet: an org's agents (profiles: identity, models, tools, approvals, limits) and
what their turns run with. Above ``turn`` (a profile becomes a turn's kit), below the
HTTP routes and the composition root."""

from fleet._approvals import (
    ApprovalAnsweredError,
    ApprovalDesk,
    ApprovalExpiredError,
    ApprovalNotFoundError,
)
from fleet._costs import AgentUsage, CostGuard, CostPeriod, cost_period
from fleet._directory import (
    Agent,
    AgentDirectory,
    AgentNotFoundError,
    AgentSetup,
    default_policy,
    default_profile,
)
from fleet._profile import (
    DEFAULT_HANDLE,
    HANDLE_PATTERN,
    MCP_GRANT_PATTERN,
    AgentPolicy,
    AgentProfile,
    ProfileAccess,
    ProfileCost,
    ProfileError,
    ProfileLimits,
    ProfileModels,
    ProfileTriggers,
    covers,
)
from fleet._runs import (
    AgentPausedError,
    AgentRateLimitedError,
    RunDispatcher,
    RunRequest,
    fair_order,
    run_message,
)
from fleet._self import (
    SELF_BLOCK_TOKENS,
    AgentSelf,
    agent_self,
    self_block,
)
from fleet._triggers import (
    EventRouter,
    Routing,
    Skipped,
    SkipReason,
    Started,
    TriggerKind,
    candidates,
    mentioned,
)

__all__ = [
    "DEFAULT_HANDLE",
    "HANDLE_PATTERN",
    "MCP_GRANT_PATTERN",
    "SELF_BLOCK_TOKENS",
    "Agent",
    "AgentDirectory",
    "AgentNotFoundError",
    "AgentPausedError",
    "AgentPolicy",
    "AgentProfile",
    "AgentRateLimitedError",
    "AgentSelf",
    "AgentSetup",
    "AgentUsage",
    "ApprovalAnsweredError",
    "ApprovalDesk",
    "ApprovalExpiredError",
    "ApprovalNotFoundError",
    "CostGuard",
    "CostPeriod",
    "EventRouter",
    "ProfileAccess",
    "ProfileCost",
    "ProfileError",
    "ProfileLimits",
    "ProfileModels",
    "ProfileTriggers",
    "Routing",
    "RunDispatcher",
    "RunRequest",
    "SkipReason",
    "Skipped",
    "Started",
    "TriggerKind",
    "agent_self",
    "candidates",
    "cost_period",
    "covers",
    "default_policy",
    "default_profile",
    "fair_order",
    "mentioned",
    "run_message",
    "self_block",
]
