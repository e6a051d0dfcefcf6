"""Org provider keys (bring your own key): owners store them, owners and staff list them.

Keys are encrypted at rest and only ever shown as their last four characters.
"""

from __future__ import annotations

from typing import Literal

from litestar import delete, get, put
from litestar.params import FromPath, JSONBody

from store import OrgKeyInfo, SecretsKeyError
from stream._api import AuthedRequest, OrgKeyIn, OrgKeyOut, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError

KeyProvider = Literal["anthropic", "openai", "openai-compatible"]


def _require(principal: Principal, *roles: str) -> None:
    if principal.role not in roles:
        raise ApiError(403, "forbidden", f"Only {' or '.join(roles)} may manage org provider keys")


def _out(info: OrgKeyInfo) -> OrgKeyOut:
    return OrgKeyOut(provider=info.provider, last4=info.last4, updated_at=info.updated_at)


@get("/v1/org/keys", summary="The org's stored provider keys (last four characters only)")
async def list_org_keys(request: AuthedRequest, services: ServicesDep) -> list[OrgKeyOut]:
    _require(request.user, "owner", "staff")
    return [_out(info) for info in await services.store.org_keys.list_for_org(request.user.org_id)]


@put("/v1/org/keys/{provider:str}", summary="Store the org's own key for a provider")
async def put_org_key(
    provider: FromPath[KeyProvider],
    data: JSONBody[OrgKeyIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> OrgKeyOut:
    _require(request.user, "owner")
    try:
        info = await services.store.org_keys.put(
            org_id=request.user.org_id, provider=provider, api_key=data.api_key
        )
    except SecretsKeyError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    return _out(info)


@delete("/v1/org/keys/{provider:str}", summary="Forget the org's key for a provider")
async def delete_org_key(
    provider: FromPath[KeyProvider], request: AuthedRequest, services: ServicesDep
) -> None:
    _require(request.user, "owner")
    if not await services.store.org_keys.delete(org_id=request.user.org_id, provider=provider):
        raise ApiError(404, "not_found", f"The org has no {provider} key")
