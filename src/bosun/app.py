"""The app factory: turn settings into a store, models and the Litestar app (the models
and the turn kit come from ``bosun.wiring``, which knows no HTTP)."""

from __future__ import annotations

import gc
from collections.abc import Sequence

import structlog
from litestar import Litestar

from bosun import __version__
from bosun._toolsets import Toolset
from bosun.settings import Settings, WebhookSettings
from bosun.wiring import build_kit, build_models, configured_toolsets
from fleet import AgentPolicy, default_policy
from store import Breaker, Store
from stream import DeliveryLimits, LocalServer, StreamConfig, TokenConfig, create_app
from turn import TurnKit, TurnModels

_log = structlog.get_logger("bosun.app")


def freeze_startup_heap() -> None:
    """Put what start-up loaded (modules, classes, the app: a few hundred thousand
    objects) out of the cyclic collector's reach, just before serving. Every full
    collection walked it all, a 100-115 ms stall of the event loop that every open
    stream shared; it now walks what serving made (7-10 ms). Not in ``build_app``: a
    process that builds many apps (the tests) would keep its garbage forever."""
    gc.collect()
    gc.freeze()


def delivery_limits(webhooks: WebhookSettings) -> DeliveryLimits:
    return DeliveryLimits(
        connect_timeout_s=webhooks.connect_timeout_s,
        max_in_flight=webhooks.max_in_flight,
        max_in_flight_per_org=webhooks.max_in_flight_per_org,
        breaker=Breaker(failures=webhooks.breaker_failures, cooldown_s=webhooks.breaker_cooldown_s),
    )


def stream_config(settings: Settings) -> StreamConfig:
    limits = settings.limits
    return StreamConfig(
        tokens=TokenConfig(secret=settings.effective_secret(), algorithm=settings.jwt_algorithm),
        max_body_bytes=limits.max_body_bytes,
        max_message_chars=limits.max_message_chars,
        keepalive_s=limits.keepalive_s,
        turn_timeout_s=limits.turn_timeout_s,
        sessions_page_size=limits.sessions_page_size,
        requests_per_minute=limits.requests_per_minute,
        tokens_per_minute=limits.tokens_per_minute,
        agent_rate_limits=settings.agents.rate_limits,
        lease_s=settings.workers.lease_s,
        pending_ttl_s=limits.pending_ttl_s,
        metrics=settings.metrics,
        webhook_retry_s=tuple(settings.webhooks.retry_schedule_s),
        webhook_timeout_s=settings.webhooks.timeout_s,
        webhook_deliveries=settings.webhooks.deliver,
        webhook_max_per_org=settings.webhooks.max_per_org,
        webhook_limits=delivery_limits(settings.webhooks),
        mcp_stdio_commands=tuple(settings.mcp.stdio_commands),
        mcp_max_tools=settings.mcp.max_tools_per_toolset,
        mcp_connect_timeout_s=settings.mcp.connect_timeout_s,
        egress=settings.egress.policy(),
    )


def build_app(
    settings: Settings,
    *,
    models: TurnModels | None = None,
    seed_orgs: Sequence[str] = (),
    toolsets: Sequence[Toolset] | None = None,
) -> Litestar:
    """The whole service for ``settings``; ``models`` overrides the configured ones (tests),
    ``toolsets`` the configured ones (already loaded).

    ``seed_orgs`` (``serve --dev``'s) get each toolset's example data at start-up, and
    the seeded rows they lost back (a toolset's ``restore``, else its ``seed``, which
    decides whether an org has its data already).
    """
    if settings.mcp.stdio_commands:
        _log.warning("mcp.stdio_allowed", programs=settings.mcp.stdio_commands)
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    store = Store(settings.database_url, secrets_key=secrets_key)

    loaded = configured_toolsets(settings) if toolsets is None else toolsets

    async def seed() -> None:
        for org in seed_orgs:
            for toolset in loaded:
                if (fill := toolset.restore or toolset.seed) is not None:
                    await fill(store, org)

    models = models if models is not None else build_models(settings)
    kit = build_kit(settings, store, loaded)
    return create_app(
        store=store,
        models=models,
        config=stream_config(settings),
        kit=kit,
        policy=server_policy(settings, kit, models),
        version=__version__,
        startup=[seed],
    )


def server_policy(settings: Settings, kit: TurnKit, models: TurnModels) -> AgentPolicy:
    """What an agent profile may name on this server: its tools, blocks and models."""
    return default_policy(kit, models.selectable, settings.agents.always_allowed)


def local_server(settings: Settings, store: Store, toolsets: Sequence[Toolset]) -> LocalServer:
    """The services ``build_app`` serves, over ``store``, without HTTP or background
    workers: the same models, kit, policy, MCP and OpenAPI toolsets, and the hooks a
    turn's end runs (cost alerts, ``run_finished``). ``bosun run`` runs a run on them
    as a server's worker would."""
    models = build_models(settings)
    kit = build_kit(settings, store, toolsets)
    return LocalServer(
        store,
        models=models,
        kit=kit,
        config=stream_config(settings),
        policy=server_policy(settings, kit, models),
    )
