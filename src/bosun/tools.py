"""Declare your own tools: typed handlers with the policies Bosun enforces for them.

A ``ToolRegistry`` holds ``ToolDef``s (usually declared with ``@registry.tool(...)``); a
handler gets its validated pydantic input and a ``ToolContext`` (who calls, in which org),
raises ``ToolError`` for failures the model should act on, and records audit rows with
``record_audit``; a tool makes or revises versioned artifacts with ``create_artifact`` /
``revise_artifact`` (their payload types declared with ``register_artifact_type``). A
``Toolset`` bundles a domain's tools, context ``Source``s, artifact types and migrations
for a server to load by name (``bosun serve --toolset``). See docs/tools.md.
"""

from bosun._toolsets import Toolset
from context import Source, SourceRequest
from tools import (
    ArtifactType,
    Inverse,
    ToolContext,
    ToolDef,
    ToolError,
    ToolRegistry,
    UnknownToolError,
    create_artifact,
    record_audit,
    register_artifact_type,
    revise_artifact,
)

__all__ = [
    "ArtifactType",
    "Inverse",
    "Source",
    "SourceRequest",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolRegistry",
    "Toolset",
    "UnknownToolError",
    "create_artifact",
    "record_audit",
    "register_artifact_type",
    "revise_artifact",
]
