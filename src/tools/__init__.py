"""Typed tools: declarations and their policies (category, confirm, kind, inverse, roles,
audit), the registry the planner and executors share, and the demo toolset (``tools.demo``).

Running tools (validation, role checks, confirmation, undo) belongs to the runner.
"""

from tools._registry import (
    ALL_ROLES,
    Category,
    Confirm,
    Inverse,
    Kind,
    Role,
    ToolDef,
    ToolRegistry,
    UnknownToolError,
)
from tools._runtime import ToolContext, ToolError, record_audit

__all__ = [
    "ALL_ROLES",
    "Category",
    "Confirm",
    "Inverse",
    "Kind",
    "Role",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolRegistry",
    "UnknownToolError",
    "record_audit",
]
