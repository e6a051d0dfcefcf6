"""An org's MCP toolsets (docs/mcp.md): owners configure them, owners and staff read them
with what this worker's connection pool knows of each server.

Header and environment values are write-only: a response names them, never shows them.
``PUT`` replaces a toolset whole (its next version, so connections reconnect) and then
connects once to report its status: a server that is down is saved all the same.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

from litestar import delete, get, put
from litestar.params import FromPath, JSONBody, QueryParameter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    model_validator,
)

from fleet import AgentProfile
from store import (
    InvalidToolsetError,
    McpToolsetRecord,
    McpToolsetSpec,
    SecretsKeyError,
    stdio_refusal,
)
from store._mcp_toolsets import (
    ENV_NAME_PATTERN,
    HEADER_NAME_PATTERN,
    MAX_COMMAND_ARGS,
    MAX_ENV,
    MAX_HEADERS,
    MAX_TOOL_CATEGORIES,
    MAX_URL_CHARS,
    TOOL_NAME_PATTERN,
    URL_PATTERN,
)
from store._toolsets import MAX_TIMEOUT_S
from stream._api import AgentToolsetOut, AuthedRequest, RequestBody, Services, ServicesDep
from stream._auth import Principal
from stream._errors import ApiError, check_egress

if TYPE_CHECKING:
    from tools import McpStatus

CategoryName = Literal["read", "write", "destructive"]
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
ToolName = Annotated[str, StringConstraints(pattern=TOOL_NAME_PATTERN)]
_REFRESH_MARGIN_S = 5.0
"""How much longer than the pool's connect timeout a ``PUT`` waits for its status."""


def _names(pattern: str) -> dict[str, JsonValue]:
    """A JSON body object's keys as the schema states them (pydantic writes only
    ``patternProperties``, which lets other keys through)."""
    return {"propertyNames": {"pattern": pattern}}


_TRANSPORTS: dict[str, JsonValue] = {
    # What each transport takes: an http toolset a url (and headers), a stdio one a command
    # (and env). Stated for clients; checked by ``McpToolsetIn._one_transport``.
    "if": {"properties": {"transport": {"const": "http"}}},
    "then": {
        "required": ["url"],
        "properties": {
            "url": {"type": "string"},
            "command": {"type": "null"},
            "env": {"maxProperties": 0},
        },
    },
    "else": {
        "required": ["command"],
        "properties": {
            "url": {"type": "null"},
            "command": {"type": "array"},
            "headers": {"maxProperties": 0},
        },
    },
}


class McpToolsetIn(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_TRANSPORTS)

    transport: Literal["stdio", "http"] = Field(
        description="http: a streamable-HTTP server at url; stdio: a command this server runs."
    )
    url: str | None = Field(
        default=None,
        max_length=MAX_URL_CHARS,
        pattern=URL_PATTERN,
        description="http: the server's URL (http or https, no credentials: use headers).",
    )
    command: (
        list[Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]+$")]] | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=MAX_COMMAND_ARGS,
        description="stdio: the program and its arguments (no shell). Put secrets in env.",
    )
    headers: dict[HeaderName, Annotated[str, Field(max_length=8192, pattern=r"^[^\r\n\x00]*$")]] = (
        Field(
            default_factory=dict,
            max_length=MAX_HEADERS,
            json_schema_extra=_names(HEADER_NAME_PATTERN),
            description="http: headers sent with every request; values are stored encrypted "
            "and never shown.",
        )
    )
    env: dict[EnvName, Annotated[str, Field(max_length=32768, pattern=r"^[^\x00]*$")]] = Field(
        default_factory=dict,
        max_length=MAX_ENV,
        json_schema_extra=_names(ENV_NAME_PATTERN),
        description="stdio: environment variables of the command; values are stored "
        "encrypted and never shown.",
    )
    default_category: CategoryName | None = Field(
        default=None,
        description="Every tool's category; null: from each tool's annotations.",
    )
    tool_categories: dict[ToolName, CategoryName] = Field(
        default_factory=dict,
        max_length=MAX_TOOL_CATEGORIES,
        json_schema_extra=_names(TOOL_NAME_PATTERN),
        description="Per tool, by its MCP name: its category (over default_category).",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT_S, description="Per call.")
    enabled: bool = Field(default=True, description="false: keep it, offer none of its tools.")

    @model_validator(mode="after")
    def _one_transport(self) -> McpToolsetIn:
        if self.transport == "http" and (self.url is None or self.command is not None or self.env):
            raise ValueError("an http toolset has a url (and headers), no command or env")
        if self.transport == "stdio" and (
            self.command is None or self.url is not None or self.headers
        ):
            raise ValueError("a stdio toolset has a command (and env), no url or headers")
        return self


class McpToolOut(BaseModel):
    name: str = Field(description="Its Bosun name (toolset.tool), as profiles grant it.")
    mcp_name: str = Field(description="Its name on the MCP server.")
    category: str = Field(description="read, write or destructive")
    summary: str


class McpSkippedOut(BaseModel):
    mcp_name: str = Field(description="Its name on the MCP server.")
    reason: Literal["invalid_name", "duplicate_name", "invalid_schema", "too_many_tools"] = Field(
        description="Why it is not offered."
    )


class McpStatusOut(BaseModel):
    state: str = Field(description="connected, down, disabled or not_connected (not tried yet)")
    error: str | None = Field(description="Why it is down.")
    since: datetime | None = Field(description="When it entered this state.")
    tools: list[McpToolOut] = Field(description="Its tools, as last listed.")
    skipped: list[str] = Field(
        description="MCP names of tools not offered (the first 100; reasons in skipped_reasons)."
    )
    skipped_reasons: list[McpSkippedOut] = Field(
        default_factory=list, description="The same tools, each with why it is not offered."
    )
    skipped_count: int = Field(default=0, description="How many tools were skipped in all.")


class McpToolsetOut(BaseModel):
    name: str
    transport: str
    url: str | None
    command: list[str] | None
    header_names: list[str] = Field(description="The headers it sends (values never shown).")
    env_names: list[str] = Field(description="The variables it sets (values never shown).")
    default_category: str | None
    tool_categories: dict[str, str]
    timeout_s: float
    enabled: bool
    version: int = Field(description="1 when created, then one more on every PUT.")
    created_at: datetime
    updated_at: datetime
    status: McpStatusOut = Field(description="What this worker knows of the server.")


def _require(principal: Principal, *roles: str) -> None:
    if principal.role not in roles:
        raise ApiError(403, "forbidden", f"Only {' or '.join(roles)} may do this to MCP toolsets")


def _status_out(status: McpStatus | None) -> McpStatusOut:
    if status is None:
        return McpStatusOut(state="not_connected", error=None, since=None, tools=[], skipped=[])
    return McpStatusOut(
        state=status.state,
        error=status.error,
        since=status.since,
        tools=[
            McpToolOut(name=t.name, mcp_name=t.mcp_name, category=t.category, summary=t.summary)
            for t in status.tools
        ],
        skipped=list(status.skipped),
        skipped_reasons=[
            McpSkippedOut(mcp_name=s.mcp_name, reason=s.reason) for s in status.skipped_reasons
        ],
        skipped_count=status.skipped_count,
    )


def _out(record: McpToolsetRecord, status: McpStatus | None) -> McpToolsetOut:
    return McpToolsetOut(
        name=record.name,
        transport=record.transport,
        url=record.url,
        command=record.command,
        header_names=record.header_names,
        env_names=record.env_names,
        default_category=record.default_category,
        tool_categories=record.tool_categories,
        timeout_s=record.timeout_s,
        enabled=record.enabled,
        version=record.version,
        created_at=record.created_at,
        updated_at=record.updated_at,
        status=_status_out(status),
    )


async def name_free(
    services: Services, org_id: str, name: str, *, taken_by: Literal["MCP", "OpenAPI"]
) -> None:
    """409 ``toolset_exists`` when the org's toolset of the other kind has ``name``: MCP
    and OpenAPI toolsets name the same routers."""
    other = services.store.mcp_toolsets if taken_by == "MCP" else services.store.openapi_toolsets
    if await other.get(org_id, name) is not None:
        message = f"The org has an {taken_by} toolset {name!r}: choose another name"
        raise ApiError(409, "toolset_exists", message)


async def _toolset_or_404(services: Services, org_id: str, name: str) -> McpToolsetRecord:
    record = await services.store.mcp_toolsets.get(org_id, name)
    if record is None:
        raise ApiError(404, "not_found", f"The org has no MCP toolset {name!r}")
    return record


async def _refreshed(services: Services, org_id: str, name: str) -> McpStatus | None:
    """Connect now and list the tools; past the connect timeout (and a margin), what the
    pool knows so far."""
    limit = services.config.mcp_connect_timeout_s + _REFRESH_MARGIN_S
    try:
        async with asyncio.timeout(limit):
            return await services.mcp.refresh(org_id, name)
    except TimeoutError:
        return await _known(services, org_id, name)


async def _known(services: Services, org_id: str, name: str) -> McpStatus | None:
    """What the pool knows of the toolset, without connecting."""
    return next(iter(await services.mcp.status(org_id, [name])), None)


@get("/v1/mcp/toolsets", summary="The org's MCP toolsets with their status (owner or staff)")
async def list_toolsets(request: AuthedRequest, services: ServicesDep) -> list[McpToolsetOut]:
    principal = request.user
    _require(principal, "owner", "staff")
    records = await services.store.mcp_toolsets.list_for_org(principal.org_id)
    if not records:
        return []
    names = [record.name for record in records]
    statuses = {s.name: s for s in await services.mcp.status(principal.org_id, names)}
    return [_out(record, statuses.get(record.name)) for record in records]


@get("/v1/mcp/toolsets/{toolset:str}", summary="One MCP toolset, its status and tools")
async def get_toolset(
    toolset: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    refresh: Annotated[
        bool, QueryParameter(description="Reconnect now and list its tools again.")
    ] = False,
) -> McpToolsetOut:
    principal = request.user
    _require(principal, "owner", "staff")
    record = await _toolset_or_404(services, principal.org_id, toolset)
    refreshed = _refreshed if refresh else _known
    return _out(record, await refreshed(services, principal.org_id, toolset))


@put("/v1/mcp/toolsets/{toolset:str}", summary="Create or replace an MCP toolset (owner)")
async def put_toolset(
    toolset: FromPath[str],
    data: JSONBody[McpToolsetIn],
    request: AuthedRequest,
    services: ServicesDep,
) -> McpToolsetOut:
    principal = request.user
    _require(principal, "owner")
    if data.transport == "stdio" and (
        refusal := stdio_refusal(data.command, services.config.mcp_stdio_commands)
    ):
        raise ApiError(422, "stdio_disabled", refusal)
    await name_free(services, principal.org_id, toolset, taken_by="OpenAPI")
    if data.url is not None:
        await check_egress(data.url, services.config.egress)
    try:
        record = await services.store.mcp_toolsets.put(
            principal.org_id, toolset, McpToolsetSpec(**data.model_dump())
        )
    except InvalidToolsetError as exc:
        raise ApiError(422, "invalid_toolset", str(exc)) from None
    except SecretsKeyError as exc:
        raise ApiError(422, "secrets_unavailable", str(exc)) from None
    return _out(record, await _refreshed(services, principal.org_id, toolset))


@delete("/v1/mcp/toolsets/{toolset:str}", summary="Remove an MCP toolset (owner)")
async def delete_toolset(
    toolset: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> None:
    principal = request.user
    _require(principal, "owner")
    if not await services.store.mcp_toolsets.delete(principal.org_id, toolset):
        raise ApiError(404, "not_found", f"The org has no MCP toolset {toolset!r}")
    services.mcp.forget(principal.org_id, toolset)


async def agent_toolsets(
    services: Services, org_id: str, profile: AgentProfile
) -> list[AgentToolsetOut]:
    """The org's MCP toolsets an agent's profile names, with their connection state."""
    named = profile.routers()
    if not named:
        return []
    records = await services.store.mcp_toolsets.list_for_org(org_id)
    names = [r.name for r in records if r.name in named]
    if not names:
        return []
    statuses = {s.name: s for s in await services.mcp.status(org_id, names)}
    return [
        AgentToolsetOut(
            name=name,
            state=statuses[name].state if name in statuses else "not_connected",
            error=statuses[name].error if name in statuses else None,
        )
        for name in names
    ]
