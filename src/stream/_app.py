"""The Litestar application: routes, auth, error envelope, OpenAPI, lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware.base import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins.pydantic import PydanticPlugin

import telemetry
from fleet import (
    MCP_GRANT_PATTERN,
    AgentDirectory,
    AgentPolicy,
    ApprovalDesk,
    CostGuard,
    RunDispatcher,
    default_policy,
    default_profile,
)
from store import Store
from stream import (
    _actions,
    _agents,
    _agui,
    _ai_sdk,
    _approvals,
    _artifacts,
    _budget,
    _catalogue,
    _hooks,
    _keys,
    _mcp,
    _metrics,
    _notices,
    _openapi_toolsets,
    _org,
    _plan,
    _resolve,
    _routes,
    _runs,
    _subscriptions,
    _triggers,
    _usage,
    _web,
)
from stream._api import Services, StreamConfig
from stream._auth import BearerAuthMiddleware, sign_claims
from stream._bounds import check_bounds
from stream._deliveries import DeliveryWorker
from stream._errors import EXCEPTION_HANDLERS
from stream._openapi import BodySchemaPlugin, document
from stream._tracing import traced_requests
from turn import Keeper, ModelResolver, TurnKit, TurnModels, TurnRunner

ROUTES = [
    _routes.chat_stream,
    _routes.chat,
    _routes.list_sessions,
    _routes.session_detail,
    _routes.session_events,
    _routes.session_stream,
    _budget.session_budget,
    _artifacts.list_artifacts,
    _artifacts.artifact_detail,
    _resolve.confirm_tool,
    _resolve.pick_candidate,
    _ai_sdk.ai_sdk_chat,
    _ai_sdk.ai_sdk_resume,
    _agui.ag_ui_run,
    _actions.undo_tool,
    _actions.cancel_turns,
    _routes.healthz,
    _metrics.metrics,
    _usage.org_usage,
    _plan.plan_dry_run,
    _agents.list_agents,
    _agents.create_agent,
    _agents.get_agent,
    _agents.put_agent,
    _agents.delete_agent,
    _agents.resume_agent,
    _agents.agent_usage,
    _agents.get_agent_version,
    _org.org_settings,
    _org.put_org_settings,
    _catalogue.agents_catalogue,
    _runs.create_run,
    _runs.list_runs,
    _runs.run_detail,
    _runs.run_stream,
    _runs.cancel_run,
    _approvals.list_approvals,
    _approvals.approval_detail,
    _approvals.approve,
    _approvals.reject,
    _hooks.make_hook,
    _hooks.delete_hook,
    _hooks.receive_hook,
    _triggers.post_event,
    _triggers.make_events_hook,
    _triggers.delete_events_hook,
    _triggers.receive_event_hook,
    _subscriptions.list_subscriptions,
    _subscriptions.add_subscription,
    _subscriptions.delete_subscription,
    _keys.list_org_keys,
    _keys.put_org_key,
    _keys.delete_org_key,
    _mcp.list_toolsets,
    _mcp.get_toolset,
    _mcp.put_toolset,
    _mcp.delete_toolset,
    _openapi_toolsets.list_toolsets,
    _openapi_toolsets.get_toolset,
    _openapi_toolsets.put_toolset,
    _openapi_toolsets.delete_toolset,
    _notices.events_stream,
    _notices.create_webhook,
    _notices.list_webhooks,
    _notices.delete_webhook,
    _notices.webhook_deliveries,
    _web.web_page,
    _web.web_asset,
]


def profile_choices(policy: AgentPolicy) -> dict[str, dict[str, Any]]:
    """What an agent profile may name on this server, for its OpenAPI schema: the tools and
    routers (``tools``, ``approvals``, ``approval_modes``: built-in ones, or an MCP
    toolset's ``toolset.*`` and ``toolset.tool``), the per-user sources
    (``user_data``) and the model specs (per role)."""
    names = policy.tools.names()
    granted = sorted({*names, *(f"{n.split('.', 1)[0]}.*" for n in names)})
    # Besides the built-in tools, the tools of the org's MCP toolsets (checked on save).
    entry = {"anyOf": [{"enum": granted}, {"type": "string", "pattern": MCP_GRANT_PATTERN}]}
    tool_list = {"type": "array", "maxItems": 200, "items": entry}
    specs = {"enum": [*sorted(policy.models), None]}
    return {
        "tools": {"anyOf": [tool_list, {"type": "null"}]},
        "approvals": tool_list,
        "approval_modes": {
            "type": "object",
            "maxProperties": 200,
            "propertyNames": entry,
            "additionalProperties": {"enum": ["suspend", "defer"]},
        },
        "user_data": {
            "type": "array", "maxItems": 20, "uniqueItems": True,
            "items": {"enum": sorted(policy.user_data)},
        } if policy.user_data else {"type": "array", "maxItems": 0},
        **{role: specs for role in ("planner", "executor", "merger", "summariser")},
    }  # fmt: skip


def create_app(
    *,
    store: Store,
    models: TurnModels,
    config: StreamConfig,
    kit: TurnKit | None = None,
    policy: AgentPolicy | None = None,
    version: str = "0",
    startup: Sequence[Callable[[], Awaitable[None]]] = (),
) -> Litestar:
    """Build the app over an open store; closing the app closes the store."""
    services = _services(store, models, config, kit or TurnKit(), policy)
    workers = _Workers(services, startup)
    app = Litestar(
        route_handlers=ROUTES,
        state=State({"services": services}),
        dependencies={"services": Provide(lambda: services, sync_to_thread=False, use_cache=True)},
        middleware=[traced_requests, DefineMiddleware(BearerAuthMiddleware, config=config.tokens)],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=check_bounds,  # path ids and the raw body, before anything is decoded
        plugins=[
            BodySchemaPlugin(
                settings={
                    "message": {"maxLength": config.max_message_chars},
                    "text": {"maxLength": config.max_message_chars},  # a content event's
                    "model": {"enum": [*services.models.allowed, None]},
                    "planner_model": {"enum": [*services.models.allowed, None]},
                },
                choices=profile_choices(services.agents.policy),
            ),
            # Bodies are validated strictly: a lax "yes" must not count as {"approved": true}.
            PydanticPlugin(validate_strict=True),
        ],
        request_max_body_size=config.max_body_bytes,
        logging_config=None,  # the composition root configures structlog
        on_startup=[workers.start],
        on_shutdown=[workers.stop, telemetry.flush],  # before uvicorn re-raises a SIGTERM
        openapi_config=_openapi_config(version),
    )
    document(app)
    return app


def _services(
    store: Store,
    models: TurnModels,
    config: StreamConfig,
    kit: TurnKit,
    policy: AgentPolicy | None,
) -> Services:
    """What every route shares: the agents, the turn runner and the services around it."""
    from tools import McpPool, OpenApiProvider  # here, not at import: see tools.__getattr__

    mcp = McpPool(  # this worker's MCP connections
        store,
        stdio_commands=config.mcp_stdio_commands,
        max_tools=config.mcp_max_tools,
        connect_timeout_s=config.mcp_connect_timeout_s,
        egress=config.egress,
    )
    openapi = OpenApiProvider(store, signer=sign_claims, egress=config.egress)
    resolver = ModelResolver(models, store.org_keys)
    directory = AgentDirectory(
        store, policy or default_policy(kit, resolver.allowed), kit, default_profile(kit),
        mcp=mcp, openapi=openapi,
    )  # fmt: skip
    costs = CostGuard(store, directory)  # told when any turn ends: alerts, pause, notices
    runner = TurnRunner(
        store, turn_timeout_s=config.turn_timeout_s, kit=kit, lease_s=config.lease_s,
        setups=directory.setups(resolver), ended=costs.turn_ended,
    )  # fmt: skip
    return Services(
        store=store, runner=runner, models=resolver, config=config, kit=kit, agents=directory,
        runs=RunDispatcher(
            store, directory, runner, resolver, rate_limited=config.agent_rate_limits
        ),
        costs=costs,
        approvals=ApprovalDesk(store, directory), mcp=mcp, openapi=openapi,
    )  # fmt: skip


class _Workers:
    """This process's background work, started with the app and stopped before the store
    closes: leases and takeovers, queued runs, approvals, outbound webhooks."""

    def __init__(
        self, services: Services, startup: Sequence[Callable[[], Awaitable[None]]]
    ) -> None:
        self._services = services
        self._startup = startup
        store, config = services.store, services.config
        self._keeper = Keeper(
            store, services.runner, services.models, pending_ttl_s=config.pending_ttl_s
        )
        self._deliveries = DeliveryWorker(
            store,
            retry_s=config.webhook_retry_s,
            timeout_s=config.webhook_timeout_s,
            egress=config.egress,
            limits=config.webhook_limits,
        )

    async def start(self) -> None:
        for hook in self._startup:
            await hook()
        services = self._services
        services.store.listen()  # other workers' appends wake this process's streams (PG)
        self._keeper.start()  # renews this worker's leases, takes over dead workers' turns
        services.runs.start()  # claims queued background runs
        services.approvals.start()  # expires unanswered approvals, runs approved ones left
        if services.config.webhook_deliveries:
            self._deliveries.start()  # sends outbound webhooks

    async def stop(self) -> None:
        services = self._services
        await self._deliveries.stop()
        await services.runs.stop()
        await services.approvals.stop()
        await self._keeper.stop()
        await services.runner.shutdown(services.config.shutdown_grace_s)
        await services.mcp.aclose()  # stdio servers stop with the worker
        await services.openapi.aclose()
        await services.store.close()


TEXT_RULE = (
    "No string a request carries (in a path, a query, a header or a JSON body, at any "
    "depth, keys and free-form values such as `context` included) may hold a NUL character "
    "(`\\u0000`) or a lone UTF-16 surrogate: no database keeps one. Such a request is 400 "
    "`invalid_request`, naming the string by its JSON path, and stores nothing. Each "
    "string's schema states the NUL rule as a `pattern`; free-form values cannot."
)
"""The document's description: the one rule every operation shares."""


def _openapi_config(version: str) -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Bosun",
        version=version,
        description=TEXT_RULE,
        path="/schema",
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT")
            }
        ),
        security=[{"bearer": []}],
    )
