"""Typed tools: declarations and their policies (category, confirm, kind, inverse, roles,
audit), the registry the planner and executors share, the runner that enforces those
policies (validation, roles, capabilities, confirmation, timeouts, recorded executions,
undo), the tools of MCP servers (``McpPool``) and of OpenAPI documents
(``OpenApiProvider``). Domain tools (the demo among them) live in toolsets outside the
core, loaded by name (``bosun.tools.Toolset``).
"""

from typing import TYPE_CHECKING, Any

from tools._artifacts import (
    ArtifactType,
    artifact_type,
    create_artifact,
    register_artifact_type,
    revise_artifact,
)
from tools._comms import (
    ASK_USER_TOOL,
    COMMUNICATION_TOOLS,
    IDLE_TOOL,
    NOTIFY_TOOL,
    communication_tools,
)
from tools._executions import rejection
from tools._mcp_tools import McpToolStatus
from tools._notify_user import GET_ARTIFACT, NOTIFY_USER, artifact_json, artifact_tools
from tools._openapi_map import METHODS as OPENAPI_METHODS
from tools._openapi_map import InvalidDocumentError
from tools._registry import Inverse, ToolDef, ToolRegistry, UnknownToolError, UserRole
from tools._results_read import READ_RESULT, READ_RESULT_TOOL
from tools._runner import (
    Capabilities,
    Needs,
    ToolCallRequest,
    ToolFailure,
    ToolOutcome,
    ToolRunner,
    approval_notice,
)
from tools._runtime import Signer, ToolContext, ToolError, caller_token, record_audit

if TYPE_CHECKING:
    from tools._mcp import McpPool, McpStatus
    from tools._openapi import (
        DocumentUnreachableError,
        OpenApiProvider,
        fetch_document,
        map_record,
        parse_document,
        preview,
    )


_OPENAPI = frozenset(
    {
        "DocumentUnreachableError",
        "OpenApiProvider",
        "fetch_document",
        "map_record",
        "parse_document",
        "preview",
    }
)


def __getattr__(name: str) -> Any:
    """``McpPool`` and ``McpStatus`` on first use (the pool itself imports the ``mcp``
    SDK, about half a second, only once a toolset connects: docs/mcp.md, Internals)."""
    if name in ("McpPool", "McpStatus"):
        from tools import _mcp

        return getattr(_mcp, name)
    if name in _OPENAPI:  # httpx on first use too
        from tools import _openapi

        return getattr(_openapi, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ASK_USER_TOOL",
    "COMMUNICATION_TOOLS",
    "GET_ARTIFACT",
    "IDLE_TOOL",
    "NOTIFY_TOOL",
    "NOTIFY_USER",
    "OPENAPI_METHODS",
    "READ_RESULT",
    "READ_RESULT_TOOL",
    "ArtifactType",
    "Capabilities",
    "DocumentUnreachableError",
    "InvalidDocumentError",
    "Inverse",
    "McpPool",
    "McpStatus",
    "McpToolStatus",
    "Needs",
    "OpenApiProvider",
    "Signer",
    "ToolCallRequest",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolFailure",
    "ToolOutcome",
    "ToolRegistry",
    "ToolRunner",
    "UnknownToolError",
    "UserRole",
    "approval_notice",
    "artifact_json",
    "artifact_tools",
    "artifact_type",
    "caller_token",
    "communication_tools",
    "create_artifact",
    "fetch_document",
    "map_record",
    "parse_document",
    "preview",
    "record_audit",
    "register_artifact_type",
    "rejection",
    "revise_artifact",
]
