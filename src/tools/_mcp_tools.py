"""An MCP server's tools as Bosun tools: names, schemas, categories, results.

Each listed MCP tool becomes a ``ToolDef`` named ``toolset.tool`` (the MCP name in lower
snake case), so the runner governs it like any tool: the gates, confirmation, approval
modes, timeouts and recorded executions apply unchanged. Its category comes from the
server's annotations, then the owner's overrides; a tool not marked read-only is never
``read`` by default. Its input schema is what the model sees, and is checked at the gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast, get_args

import structlog
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from store import McpToolsetRecord
from tools._registry import NAME_PATTERN, Category, ToolDef
from tools._runtime import ToolContext, ToolError, record_audit
from tools._schema import _strip_titles

if TYPE_CHECKING:  # both load on first use: mcp on connecting (tools._mcp_link), jsonschema
    # when a listing is mapped; a process that maps no MCP tool never pays for them
    from jsonschema import exceptions as schema_errors
    from mcp_types import CallToolResult, Tool

MAX_SUMMARY_CHARS = 200
MAX_WIRE_NAME = 64
"""Providers' limit on a tool's (wire) name: ``toolset_tool`` must fit."""
MAX_ERROR_CHARS = 1_000
MAX_SCHEMA_ERRORS = 8
MAX_TOOLS = 500
"""Tools offered per toolset by default (``mcp.max_tools_per_toolset``): a model cannot
choose among more, and each costs memory and mapping time."""
MAX_SKIPPED_SHOWN = 100
"""Skipped tools a status names; ``skipped_count`` counts them all."""
_SCHEMA_NOISE = ("$schema", "$id")
CALL_GRACE_S = 1.0
"""How much longer than its toolset's timeout the runner lets an MCP call run."""
_log = structlog.get_logger("bosun.tools")

Caller = Callable[[str, dict[str, Any]], Awaitable["CallToolResult"]]
"""Calls one MCP tool by its own name on the toolset's connection (``ToolError`` when
the connection fails)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpToolStatus:
    """One MCP tool as Bosun offers it: ``name`` is the Bosun name (``toolset.tool``)."""

    name: str
    mcp_name: str
    category: str
    summary: str


SkipReason = Literal["invalid_name", "duplicate_name", "invalid_schema", "too_many_tools"]


@dataclass(frozen=True, slots=True)
class SkippedTool:
    """An MCP tool Bosun does not offer, and why (a stable code)."""

    mcp_name: str
    reason: SkipReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Mapped:
    """A listing mapped: the tools Bosun offers, and the first ``MAX_SKIPPED_SHOWN`` MCP
    tools it could not use (``skipped_count``: all of them)."""

    tools: list[ToolDef]
    statuses: list[McpToolStatus]
    skipped: list[SkippedTool]
    skipped_count: int = 0


def bosun_action(mcp_name: str) -> str:
    """The MCP name in lower snake case: ``searchTickets`` and ``search-tickets`` are
    ``search_tickets`` (it may still not be a valid action: the caller checks)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", mcp_name)
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"[-. ]", "_", name).lower()


def category_of(tool: Tool, record: McpToolsetRecord) -> Category:
    """The owner's choice for this tool, else for the toolset, else the annotations:
    ``destructiveHint`` is destructive, ``readOnlyHint`` read, anything else a write."""
    chosen = record.tool_categories.get(tool.name) or record.default_category
    if chosen in get_args(Category):
        return cast(Category, chosen)
    hints = tool.annotations
    if hints is not None and hints.destructive_hint:
        return "destructive"
    if hints is not None and hints.read_only_hint:
        return "read"
    return "write"


def summary_of(tool: Tool) -> str:
    """The description's first line, else the title, else the name: one bounded line."""
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    for text in (tool.description, title, tool.name):
        line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
        if line:
            return line if len(line) <= MAX_SUMMARY_CHARS else line[: MAX_SUMMARY_CHARS - 1] + "…"
    return tool.name


def map_tools(
    record: McpToolsetRecord,
    listed: Iterable[Tool],
    call: Caller,
    *,
    max_tools: int = MAX_TOOLS,
    cut: tuple[int, Sequence[str]] = (0, ()),
) -> Mapped:
    """Bosun tools for a toolset's listing, in its order. A tool whose name cannot be a
    Bosun name, collides with an earlier one, or whose schema is not valid is skipped, as
    is every tool past the first ``max_tools``, and the ``cut`` ones (how many, the first
    names) the listing lost before it was read. CPU-bound: callers run it in a thread."""
    from jsonschema import exceptions as schema_errors  # on first use, as in input_model

    tools: list[ToolDef] = []
    statuses: list[McpToolStatus] = []
    names: set[str] = set()
    skipped: list[SkippedTool] = []
    count = 0
    for tool in listed:
        name = f"{record.name}.{bosun_action(tool.name)}"
        reason = _refused(name, names, len(tools), max_tools)
        made = None
        if reason is None:
            try:
                made = _tool_def(record, tool, name, call)
            except (schema_errors.SchemaError, ValueError):
                reason = "invalid_schema"
        if made is None:
            count += 1
            if len(skipped) < MAX_SKIPPED_SHOWN:
                skipped.append(SkippedTool(tool.name, reason or "invalid_schema"))
            continue
        names.add(name)
        tools.append(made)
        statuses.append(
            McpToolStatus(
                name=name, mcp_name=tool.name, category=made.category, summary=made.summary
            )
        )
    room = MAX_SKIPPED_SHOWN - len(skipped)
    skipped += [SkippedTool(name, "too_many_tools") for name in cut[1][:room]]
    return Mapped(tools=tools, statuses=statuses, skipped=skipped, skipped_count=count + cut[0])


def _refused(name: str, taken: set[str], offered: int, max_tools: int) -> SkipReason | None:
    if not NAME_PATTERN.match(name) or len(name) > MAX_WIRE_NAME:
        return "invalid_name"
    if name in taken:
        return "duplicate_name"
    if offered >= max_tools:
        return "too_many_tools"
    return None


def _tool_def(record: McpToolsetRecord, tool: Tool, name: str, call: Caller) -> ToolDef:
    schema = _model_schema(tool.input_schema)
    category = category_of(tool, record)
    audit = None if category == "read" else f"mcp.{name}"
    return ToolDef(
        name=name,
        summary=summary_of(tool),
        input_model=input_model(tool.input_schema),
        category=category,
        audit=audit,
        schema=schema,
        handler=_handler(record.name, tool.name, audit, call),
        # A little over the toolset's own limit, so its call ends first as mcp_timeout.
        timeout_s=record.timeout_s + CALL_GRACE_S,
    )


def _model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the model sees it: without titles and meta keys (tokens it does
    not need), and always an object."""
    shown: dict[str, Any] = _strip_titles(schema)
    for key in _SCHEMA_NOISE:
        shown.pop(key, None)
    if shown.get("type") != "object":
        raise ValueError("an MCP tool's input schema must be an object")
    shown.setdefault("properties", {})
    return shown


class McpArguments(BaseModel):
    """An MCP tool's arguments: what its server's schema (``mcp_schema`` of a subclass per
    tool) admits. The schema's checker is built on the first call, not at listing time."""

    model_config = ConfigDict(extra="allow")
    mcp_schema: ClassVar[dict[str, Any]] = {}
    mcp_checker: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _matches_schema(cls, data: Any) -> Any:
        from jsonschema import exceptions as schema_errors
        from jsonschema import validators

        checker = cls.mcp_checker
        if checker is None:
            checker = cls.mcp_checker = validators.validator_for(cls.mcp_schema)(cls.mcp_schema)
        try:
            errors = sorted(checker.iter_errors(data), key=lambda e: list(e.absolute_path))
        except schema_errors.SchemaError as exc:  # e.g. a $ref it cannot resolve
            raise PydanticCustomError("mcp_schema", "its schema cannot be checked") from exc
        if errors:
            raise PydanticCustomError("mcp_schema", _describe(errors))
        return data


def input_model(schema: dict[str, Any]) -> type[McpArguments]:
    """A pydantic model that admits exactly what ``schema`` does, so the runner's gate
    refuses a bad call (``invalid_input``) before it is recorded or confirmed. The
    schema itself is checked here (``SchemaError``): a tool with a broken one is skipped.
    ``jsonschema`` loads here, not with the module: only a toolset's tools need it."""
    from jsonschema import validators

    validators.validator_for(schema).check_schema(schema)
    made: type[McpArguments] = type(
        "McpArguments", (McpArguments,), {"mcp_schema": schema, "__module__": __name__}
    )
    return made


def _describe(errors: list[schema_errors.ValidationError]) -> str:
    """``path: problem`` per error, naming what the schema expects, never the value."""
    parts = []
    for error in errors[:MAX_SCHEMA_ERRORS]:
        path = ".".join(map(str, error.absolute_path)) or "(input)"
        if error.validator in ("required", "additionalProperties"):
            problem = error.message  # names the property, from the schema or the call
        else:
            expected = json.dumps(error.validator_value, default=str)[:80]
            problem = f"must satisfy {error.validator}={expected}"
        parts.append(f"{path}: {problem}")
    if len(errors) > MAX_SCHEMA_ERRORS:
        parts.append(f"and {len(errors) - MAX_SCHEMA_ERRORS} more")
    return "; ".join(parts)


def _handler(
    toolset: str, mcp_name: str, audit: str | None, call: Caller
) -> Callable[[BaseModel, ToolContext], Awaitable[Any]]:
    async def run(args: BaseModel, ctx: ToolContext) -> Any:
        result = await call(mcp_name, args.model_dump(mode="json"))
        if result.is_error:
            raise ToolError(
                "mcp_tool_error",
                f"{toolset}.{mcp_name} failed: {_text_of(result)[:MAX_ERROR_CHARS]}",
                hint="The MCP server reported this; fix the input or tell the user",
            )
        if audit is not None:  # a change on the server: audited like a built-in write
            await audit_change(ctx, audit, toolset, mcp_name)
        return result_output(result)

    return run


async def audit_change(
    ctx: ToolContext, label: str, toolset: str, tool: str, *, kind: str = "mcp"
) -> None:
    """Record the audit row of a change a remote tool made (``kind``: ``mcp``, ``openapi``).
    The change is already made there, so a failure here is logged, not raised: a failed
    call could be run again and repeat it."""
    try:
        async with ctx.store.db.write() as conn:
            detail = {"toolset": toolset, "tool": tool}
            await record_audit(conn, ctx, label, target=f"{kind}:{toolset}", detail=detail)
    except Exception as exc:
        _log.error(
            f"{kind}.audit_failed", tool=label, tool_use_id=ctx.tool_use_id,
            exc_type=type(exc).__qualname__,
        )  # fmt: skip


def result_output(result: CallToolResult) -> Any:
    """What the model gets: the structured content when the server gives it, else the
    content blocks as JSON (binary data left out: a model cannot read base64)."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = []
    for block in result.content:
        dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(dumped.get("data"), str):
            dumped["data"] = f"<{len(dumped['data'])} characters of base64 left out>"
        blocks.append(dumped)
    return {"content": blocks}


def _text_of(result: CallToolResult) -> str:
    texts = [str(getattr(block, "text", "")) for block in result.content]
    return " ".join(t for t in texts if t) or "no message"
