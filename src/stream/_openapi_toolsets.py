"""An org's OpenAPI toolsets (docs/openapi.md): owners configure them, owners and staff
read them with the tools each operation becomes.

A document given by URL is fetched once, at save time, through the egress guard; the base
URL is checked then too, and every call goes through the guard again. The toolset's
signing secret is in the response that creates it, and never again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import delete, get, put
from litestar.params import FromPath, JSONBody
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    model_validator,
)

from egress import EgressRefused
from store import (
    InvalidToolsetError,
    OpenApiToolsetRecord,
    OpenApiToolsetSpec,
    SecretsKeyError,
)
from store._mcp_toolsets import MAX_URL_CHARS, URL_PATTERN
from store._openapi_toolsets import MAX_SELECTORS, OPERATION_PATTERN
from store._toolsets import MAX_TIMEOUT_S
from stream._api import AuthedRequest, RequestBody, Services, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError, check_egress
from stream._mcp import CategoryName, _names, name_free
from tools import (
    OPENAPI_METHODS,
    DocumentUnreachableError,
    InvalidDocumentError,
    fetch_document,
    map_record,
    preview,
)

Selector = Annotated[str, StringConstraints(pattern=OPERATION_PATTERN)]


class OperationsIn(RequestBody):
    include: list[Selector] = Field(
        default_factory=list, max_length=MAX_SELECTORS,
        description="Only these tags or operationIds (empty: every operation).",
    )  # fmt: skip
    exclude: list[Selector] = Field(
        default_factory=list, max_length=MAX_SELECTORS,
        description="Never these tags or operationIds.",
    )  # fmt: skip


class IdentityIn(RequestBody):
    mode: Literal["signed", "forward"] = Field(
        default="signed",
        description="signed: a JWT Bosun signs per call with the toolset's secret; forward: "
        "the caller's own bearer token (chats only).",
    )


_ONE_DOCUMENT: dict[str, JsonValue] = {
    # The document by URL or inline, one of them: stated for clients, checked by
    # ``OpenApiToolsetIn._one_document``.
    "oneOf": [
        {"required": ["openapi_url"],
         "properties": {"openapi_url": {"type": "string"}, "openapi": {"type": "null"}}},
        {"required": ["openapi"],
         "properties": {"openapi": {"type": "object"}, "openapi_url": {"type": "null"}}},
    ]
}  # fmt: skip


_OPERATION: dict[str, JsonValue] = {
    "type": "object",
    "required": ["operationId"],
    "properties": {"operationId": {"type": "string", "pattern": OPERATION_PATTERN}},
}
_DOCUMENT: dict[str, JsonValue] = {
    # What makes a document usable, stated for clients (the mapping checks the rest: 422
    # invalid_document): its version, its paths, an operationId per operation.
    "required": ["openapi", "paths"],
    "properties": {
        "openapi": {"type": "string", "pattern": r"^3\.[01]\.[0-9]+$"},
        "paths": {
            "type": "object",
            "propertyNames": {"pattern": "^/"},
            "additionalProperties": {
                "type": "object",
                "properties": {method: _OPERATION for method in OPENAPI_METHODS},
            },
        },
    },
}


class OpenApiToolsetIn(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_ONE_DOCUMENT)

    openapi_url: str | None = Field(
        default=None, max_length=MAX_URL_CHARS, pattern=URL_PATTERN,
        description="Where the OpenAPI document is (fetched once, now); or give `openapi`.",
    )  # fmt: skip
    openapi: dict[str, JsonValue] | None = Field(
        default=None, json_schema_extra=_DOCUMENT,
        description="The OpenAPI 3.0/3.1 document itself (JSON).",
    )  # fmt: skip
    base_url: str = Field(
        max_length=MAX_URL_CHARS, pattern=URL_PATTERN,
        description="Where the API is called: each operation's path is appended.",
    )  # fmt: skip
    operations: OperationsIn = Field(default_factory=OperationsIn)
    identity: IdentityIn = Field(default_factory=IdentityIn)
    categories: dict[Selector, CategoryName] = Field(
        default_factory=dict, max_length=MAX_SELECTORS,
        json_schema_extra=_names(OPERATION_PATTERN),
        description="Per operationId: its category (over x-bosun-category and the method).",
    )  # fmt: skip
    timeout_s: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT_S, description="Per request.")

    @model_validator(mode="after")
    def _one_document(self) -> OpenApiToolsetIn:
        if (self.openapi_url is None) == (self.openapi is None):
            raise ValueError("give the document as openapi_url or as openapi, one of them")
        return self


class OpenApiToolOut(BaseModel):
    name: str = Field(description="Its Bosun name (toolset.action), as profiles grant it.")
    operation_id: str
    method: str
    path: str
    category: str = Field(description="read, write or destructive")
    undo: str | None = Field(description="The tool its x-bosun-inverse undoes it with.")
    summary: str


class OpenApiToolsetOut(BaseModel):
    name: str
    openapi_url: str | None
    base_url: str
    operations: dict[str, list[str]] = Field(description="{include, exclude}")
    identity: dict[str, str] = Field(description="{mode}")
    categories: dict[str, str]
    timeout_s: float
    version: int = Field(description="1 when created, then one more on every PUT.")
    created_at: datetime
    updated_at: datetime
    tools: list[OpenApiToolOut] = Field(description="The tools its operations become.")
    secret: str | None = Field(
        default=None,
        description="The signing secret (HS256) of its calls' identity: only in the response "
        "that created the toolset. Give it to the API so it can verify each call.",
    )


def _require(principal: Principal, *roles: str) -> None:
    if principal.role not in roles:
        raise ApiError(
            403, "forbidden", f"Only {' or '.join(roles)} may do this to OpenAPI toolsets"
        )


def _out(record: OpenApiToolsetRecord, secret: str | None = None) -> OpenApiToolsetOut:
    mapped = map_record(record)
    actions = {op.operation_id: op.action for op, _ in mapped}
    tools = []
    for op, _ in mapped:
        undo = actions.get(op.inverse.operation_id) if op.inverse else None
        tool = OpenApiToolOut(
            name=f"{record.name}.{op.action}", operation_id=op.operation_id, method=op.method,
            path=op.path, category=op.category, summary=op.summary,
            undo=f"{record.name}.{undo}" if undo else None,
        )  # fmt: skip
        tools.append(tool)
    return OpenApiToolsetOut(
        name=record.name, openapi_url=record.source_url, base_url=record.base_url,
        operations={"include": record.include, "exclude": record.exclude},
        identity={"mode": record.identity_mode}, categories=record.categories,
        timeout_s=record.timeout_s, version=record.version, created_at=record.created_at,
        updated_at=record.updated_at, tools=tools, secret=secret,
    )  # fmt: skip


async def _toolset_or_404(services: Services, org_id: str, name: str) -> OpenApiToolsetRecord:
    record = await services.store.openapi_toolsets.get(org_id, name)
    if record is None:
        raise ApiError(404, "not_found", f"The org has no OpenAPI toolset {name!r}")
    return record


@get("/v1/openapi/toolsets", summary="The org's OpenAPI toolsets and their tools (owner, staff)")
async def list_toolsets(request: AuthedRequest, services: ServicesDep) -> list[OpenApiToolsetOut]:
    principal = request.user
    _require(principal, "owner", "staff")
    records = await services.store.openapi_toolsets.list_for_org(principal.org_id)
    return [_out(record) for record in records]


@get("/v1/openapi/toolsets/{toolset:str}", summary="One OpenAPI toolset and its tools")
async def get_toolset(
    toolset: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> OpenApiToolsetOut:
    principal = request.user
    _require(principal, "owner", "staff")
    return _out(await _toolset_or_404(services, principal.org_id, toolset))


@put("/v1/openapi/toolsets/{toolset:str}", summary="Create or replace an OpenAPI toolset (owner)")
async def put_toolset(
    toolset: FromPath[str],
    data: JSONBody[OpenApiToolsetIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> OpenApiToolsetOut:
    principal = request.user
    _require(principal, "owner")
    await name_free(services, principal.org_id, toolset, taken_by="MCP")
    policy = services.config.egress
    await check_egress(data.base_url, policy)
    document = data.openapi
    if data.openapi_url is not None:
        await check_egress(data.openapi_url, policy)
        document = await _fetched(data.openapi_url, services)
    assert document is not None, "the body has one of openapi_url and openapi"
    spec = OpenApiToolsetSpec(
        document=document, base_url=data.base_url, source_url=data.openapi_url,
        include=data.operations.include, exclude=data.operations.exclude,
        identity_mode=data.identity.mode, categories=dict(data.categories),
        timeout_s=data.timeout_s,
    )  # fmt: skip
    _check_document(principal.org_id, toolset, spec)
    try:
        record, secret = await services.store.openapi_toolsets.put(principal.org_id, toolset, spec)
    except InvalidToolsetError as exc:
        raise ApiError(422, "invalid_toolset", str(exc)) from None
    except SecretsKeyError as exc:
        raise ApiError(422, "secrets_unavailable", str(exc)) from None
    return _out(record, secret)


@delete("/v1/openapi/toolsets/{toolset:str}", summary="Remove an OpenAPI toolset (owner)")
async def delete_toolset(
    toolset: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> None:
    principal = request.user
    _require(principal, "owner")
    if not await services.store.openapi_toolsets.delete(principal.org_id, toolset):
        raise ApiError(404, "not_found", f"The org has no OpenAPI toolset {toolset!r}")


def _check_document(org_id: str, name: str, spec: OpenApiToolsetSpec) -> None:
    """422 ``invalid_document`` for a document no tool could come from."""
    try:
        preview(org_id, name, spec)
    except InvalidDocumentError as exc:
        raise ApiError(422, "invalid_document", str(exc)) from None


async def _fetched(url: str, services: Services) -> dict[str, Any]:
    """The document at ``url``, or the 422 saying why not."""
    try:
        return await fetch_document(url, services.config.egress)
    except EgressRefused as exc:
        raise ApiError(422, "egress_refused", f"{exc.message}: use a public URL") from None
    except DocumentUnreachableError as exc:
        raise ApiError(422, "openapi_unreachable", str(exc)) from None
    except InvalidDocumentError as exc:
        raise ApiError(422, "invalid_document", str(exc)) from None
