"""Declare your own tools: typed handlers with the policies Bosun enforces for them.

A ``ToolRegistry`` holds ``ToolDef``s (usually declared with ``@registry.tool(...)``); a
handler gets its validated pydantic input and a ``ToolContext`` (who calls, in which org),
raises ``ToolError`` for failures the model should act on, and records audit rows with
``record_audit``. See docs/tools.md.
"""

from tools import (
    Inverse,
    ToolContext,
    ToolDef,
    ToolError,
    ToolRegistry,
    UnknownToolError,
    record_audit,
)

__all__ = [
    "Inverse",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolRegistry",
    "UnknownToolError",
    "record_audit",
]
