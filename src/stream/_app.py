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

from fleet import AgentDirectory, AgentPolicy, RunDispatcher, default_policy, default_profile
from store import Store
from stream import (
    _actions,
    _agents,
    _budget,
    _hooks,
    _keys,
    _metrics,
    _plan,
    _resolve,
    _routes,
    _runs,
    _usage,
    _web,
)
from stream._api import Services, StreamConfig
from stream._auth import BearerAuthMiddleware
from stream._bounds import check_bounds
from stream._errors import EXCEPTION_HANDLERS
from stream._openapi import BodySchemaPlugin, document
from turn import Keeper, ModelResolver, TurnKit, TurnModels, TurnRunner

ROUTES = [
    _routes.chat_stream,
    _routes.chat,
    _routes.list_sessions,
    _routes.session_detail,
    _routes.session_events,
    _routes.session_stream,
    _budget.session_budget,
    _resolve.confirm_tool,
    _resolve.pick_candidate,
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
    _runs.create_run,
    _runs.list_runs,
    _runs.run_detail,
    _runs.run_stream,
    _runs.cancel_run,
    _hooks.make_hook,
    _hooks.delete_hook,
    _hooks.receive_hook,
    _keys.list_org_keys,
    _keys.put_org_key,
    _keys.delete_org_key,
    _web.web_page,
    _web.web_asset,
]


def profile_choices(policy: AgentPolicy) -> dict[str, dict[str, Any]]:
    """What an agent profile may name on this server, for its OpenAPI schema: the tools and
    routers (``tools``, ``approvals``) and the model specs (per role)."""
    names = policy.tools.names()
    granted = sorted({*names, *(f"{n.split('.', 1)[0]}.*" for n in names)})
    tool_list = {"type": "array", "maxItems": 200, "items": {"enum": granted}} if granted else {
        "type": "array", "maxItems": 0,
    }  # fmt: skip
    specs = {"enum": [*sorted(policy.models), None]}
    return {
        "tools": {"anyOf": [tool_list, {"type": "null"}]},
        "approvals": tool_list,
        **{role: specs for role in ("planner", "executor", "merger", "summariser")},
    }


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
    kit = kit or TurnKit()
    resolver = ModelResolver(models, store.org_keys)
    directory = AgentDirectory(
        store, policy or default_policy(kit, resolver.allowed), kit, default_profile(kit)
    )
    runner = TurnRunner(
        store, turn_timeout_s=config.turn_timeout_s, kit=kit, lease_s=config.lease_s,
        setups=directory.setups(resolver),
    )  # fmt: skip
    runs = RunDispatcher(store, directory, runner, resolver)
    services = Services(
        store=store, runner=runner, models=resolver, config=config, kit=kit, agents=directory,
        runs=runs,
    )  # fmt: skip
    keeper = Keeper(store, runner, resolver, pending_ttl_s=config.pending_ttl_s)

    async def on_startup() -> None:
        for hook in startup:
            await hook()
        store.listen()  # other workers' appends wake this process's streams (PostgreSQL)
        keeper.start()  # renews this worker's leases, takes over dead workers' turns
        runs.start()  # claims queued background runs

    async def on_shutdown() -> None:
        await runs.stop()
        await keeper.stop()
        await runner.shutdown(config.shutdown_grace_s)
        await store.close()

    app = Litestar(
        route_handlers=ROUTES,
        state=State({"services": services}),
        dependencies={"services": Provide(lambda: services, sync_to_thread=False, use_cache=True)},
        middleware=[DefineMiddleware(BearerAuthMiddleware, config=config.tokens)],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=check_bounds,  # path ids and the raw body, before anything is decoded
        plugins=[
            BodySchemaPlugin(
                settings={
                    "message": {"maxLength": config.max_message_chars},
                    "model": {"enum": [*resolver.allowed, None]},
                },
                choices=profile_choices(directory.policy),
            ),
            # Bodies are validated strictly: a lax "yes" must not count as {"approved": true}.
            PydanticPlugin(validate_strict=True),
        ],
        request_max_body_size=config.max_body_bytes,
        logging_config=None,  # the composition root configures structlog
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        openapi_config=OpenAPIConfig(
            title="Bosun",
            version=version,
            path="/schema",
            components=Components(
                security_schemes={
                    "bearer": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT")
                }
            ),
            security=[{"bearer": []}],
        ),
    )
    document(app)
    return app
