"""Org settings: what an org's owner decides for everyone in it. Any role reads them (a
member's client shows whether it may create agents); only an owner changes them."""

from __future__ import annotations

from litestar import get, put
from litestar.params import JSONBody
from pydantic import BaseModel, Field

from store import OrgSettings
from stream._api import AuthedRequest, RequestBody, ServicesDep
from stream._errors import ApiError


class OrgSettingsIn(RequestBody):
    members_create_agents: bool = Field(
        description="Members may create agents of their own (each has its member as parent)."
    )


class OrgSettingsOut(BaseModel):
    members_create_agents: bool = Field(
        description="Members may create agents of their own (each has its member as parent)."
    )


@get("/v1/org/settings", summary="The org's settings (any role)")
async def org_settings(request: AuthedRequest, services: ServicesDep) -> OrgSettingsOut:
    settings = await services.store.orgs.settings(request.user.org_id)
    return OrgSettingsOut(members_create_agents=settings.members_create_agents)


@put("/v1/org/settings", summary="Change the org's settings (owner only)")
async def put_org_settings(
    data: JSONBody[OrgSettingsIn], request: AuthedRequest, services: ServicesDep
) -> OrgSettingsOut:
    principal = request.user
    if principal.role != "owner":
        raise ApiError(403, "forbidden", "Only an owner may change the org's settings")
    wanted = OrgSettings(members_create_agents=data.members_create_agents)
    saved = await services.store.orgs.save_settings(principal.org_id, wanted)
    return OrgSettingsOut(members_create_agents=saved.members_create_agents)
