"""From settings to the turn's parts, with no HTTP: provider config, models by role, the
turn kit (catalogue, budgets, limits) and the cap policy. ``bosun.app`` adds the Litestar
app around them; ``bosun chat`` and ``bosun plan`` use them directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import SecretStr

from bosun._toolsets import Toolset, load_toolsets, merge_sources, merge_tools
from bosun.settings import ROLE_NAMES, Settings
from context import Budgets
from events import ModelRole
from executors import ExecutorLimits, StepShare
from planner import PlanLimits
from providers import Model, ProviderConfig, model_from_spec
from store import Store
from tools import Capabilities
from turn import UNMETERED, CapPolicy, TurnKit, TurnModels


def provider_config(settings: Settings) -> ProviderConfig:
    p = settings.providers

    def secret(value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value else None

    return ProviderConfig(
        anthropic_api_key=secret(p.anthropic_api_key),
        anthropic_base_url=p.anthropic_base_url,
        openai_api_key=secret(p.openai_api_key),
        openai_base_url=p.openai_base_url,
        openai_compatible_api_key=secret(p.openai_compatible_api_key),
        max_retries=p.max_retries,
        timeout_s=p.timeout_s,
        cache_ttl=p.cache_ttl,
    )


def build_models(settings: Settings) -> TurnModels:
    """Build every configured model once; a bad spec fails here, at start-up.

    Roles naming the same spec share one instance (so one scripted file serves the
    planner's and the answer's calls in order). ``build`` makes further instances with
    an org's own key (bring your own key).
    """
    config = provider_config(settings)
    specs = {role: settings.models.for_role(role) for role in ROLE_NAMES}
    built: dict[str, Model] = {}
    for spec in [*specs.values(), *settings.models.allowed]:
        if spec is not None and spec not in built:
            built[spec] = model_from_spec(spec, config)

    def model(role: ModelRole) -> Model | None:
        spec = specs[role]
        return built[spec] if spec else None

    return TurnModels(
        executor=model("executor"),
        merger=model("merger"),
        planner=model("planner"),
        summariser=model("summariser"),
        specs={role: spec for role, spec in specs.items() if spec},
        selectable={spec: built[spec] for spec in settings.models.allowed},
        build=lambda spec, api_key: model_from_spec(spec, config, api_key=api_key),
    )


def configured_toolsets(settings: Settings) -> tuple[Toolset, ...]:
    """The toolsets the settings name, loaded and checked (``ToolsetError`` otherwise)."""
    return load_toolsets(settings.toolset_names())


def build_kit(
    settings: Settings, store: Store, toolsets: Sequence[Toolset] | None = None
) -> TurnKit:
    """The catalogue (the tools and sources of ``toolsets``, by default the configured
    ones; none: no tools), budgets and limits."""
    planner, executor = settings.planner, settings.executor
    if toolsets is None:
        toolsets = configured_toolsets(settings)
    return TurnKit(
        tools=merge_tools(toolsets),
        sources=merge_sources(toolsets, store),
        budgets=Budgets.from_mapping(settings.budgets),
        plan_limits=PlanLimits(
            max_steps=planner.max_steps,
            max_tool_calls_per_step=planner.max_tool_calls_per_step,
            max_executors=planner.max_executors,
        ),
        executor_limits=ExecutorLimits(
            max_tool_calls=executor.max_tool_calls,
            wall_time_s=executor.wall_time_s,
            retries_per_tool=executor.retries_per_tool,
            max_model_turns=executor.max_model_turns,
        ),
        capabilities=Capabilities(
            allow=frozenset(executor.allow_tools) if executor.allow_tools is not None else None,
            blocked=frozenset(executor.block_tools),
        ),
        planner_timeout_s=planner.timeout_s,
        source_timeout_s=settings.limits.source_timeout_s,
        knowledge_source_tokens=settings.limits.knowledge_source_tokens,
        caps=cap_policy(settings),
        turn_budget=StepShare(
            tokens=settings.turn_budget.tokens or None,
            usd_micros=round(settings.turn_budget.usd * 1_000_000) or None,
            tool_calls=settings.turn_budget.tool_calls or None,
        ),
    )


def cap_policy(settings: Settings) -> CapPolicy:
    caps = settings.caps
    return CapPolicy(
        caps_usd_micros={
            tier: UNMETERED if usd == -1 else round(usd * 1_000_000)
            for tier, usd in caps.tiers.items()
        },
        default_tier=caps.default_tier,
        thresholds=tuple(sorted(set(caps.alert_thresholds))),
    )
