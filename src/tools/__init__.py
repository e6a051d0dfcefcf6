"""Typed tools: declarations and their policies (category, confirm, kind, inverse, roles,
audit), the registry the planner and executors share, the runner that enforces those
policies (validation, roles, capabilities, confirmation, timeouts, recorded executions,
undo), and the demo toolset (``tools.demo``).
"""

from tools._executions import rejection
from tools._registry import Inverse, ToolDef, ToolRegistry, UnknownToolError, UserRole
from tools._runner import (
    Capabilities,
    Needs,
    ToolCallRequest,
    ToolFailure,
    ToolOutcome,
    ToolRunner,
    approval_notice,
)
from tools._runtime import ToolContext, ToolError, record_audit

__all__ = [
    "Capabilities",
    "Inverse",
    "Needs",
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
    "record_audit",
    "rejection",
]
