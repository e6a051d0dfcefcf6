"""``GET /v1/catalogue``: what an agent profile may name on this server, for an
editor (the web page's): the tools grouped by router with the blocked ones marked, the
org's toolsets, the model specs and the per-user sources.

For whoever writes profiles: owners and staff, a member who parents an agent, and any
member where the org lets members create agents; the org's toolsets are its own.
"""

from __future__ import annotations

from litestar import get
from pydantic import BaseModel, Field

from fleet import covers
from stream._agents import require_profile_writer
from stream._api import AuthedRequest, ServicesDep


class CatalogueTool(BaseModel):
    name: str = Field(description="router.action")
    router: str = Field(description="The name's prefix before the dot: what router.* grants.")
    summary: str
    blocked: bool = Field(
        description="executor.block_tools names it or its router: no agent may use it, and a "
        "profile granting it (or router.*) is refused with 422 tool_blocked."
    )
    always_allowed: bool = Field(description="agents.always_allowed grants it to every agent.")
    confirm: str = Field(description="When the tool itself asks: never, destructive, always.")


class CatalogueToolset(BaseModel):
    name: str = Field(description="Granted as name.* (its tools are known once connected).")
    kind: str = Field(description="mcp or openapi")


class CatalogueOut(BaseModel):
    tools: list[CatalogueTool] = Field(description="The server's tools, by name.")
    toolsets: list[CatalogueToolset] = Field(description="The org's MCP and OpenAPI toolsets.")
    models: list[str] = Field(description="The model specs a profile may name (models.allowed).")
    user_data: list[str] = Field(description="The per-user context sources.")


@get(
    "/v1/catalogue",
    summary="What agent profiles may name here (owner, staff, or a member who writes one)",
)
async def agents_catalogue(request: AuthedRequest, services: ServicesDep) -> CatalogueOut:
    principal = request.user
    await require_profile_writer(services, principal, "read the agent catalogue")
    policy = services.agents.policy
    blocked, allowed = policy.always_blocked, policy.always_allowed

    tools = [
        CatalogueTool(
            name=tool.name, router=tool.router, summary=tool.summary,
            blocked=covers(blocked, tool.name), always_allowed=covers(allowed, tool.name),
            confirm=tool.confirm,
        )
        for tool in sorted(policy.tools, key=lambda t: t.name)
    ]  # fmt: skip
    store = services.store
    mcp = [t.name for t in await store.mcp_toolsets.list_for_org(principal.org_id)]
    openapi = await store.openapi_toolsets.names(principal.org_id)
    toolsets = [CatalogueToolset(name=n, kind="mcp") for n in sorted(mcp)]
    toolsets += [CatalogueToolset(name=n, kind="openapi") for n in sorted(openapi)]
    return CatalogueOut(
        tools=tools,
        toolsets=toolsets,
        models=sorted(policy.models),
        user_data=sorted(policy.user_data),
    )
