"""``tool_results.read``: read a past tool result whole, by its ``tool_use_id``.

A replayed transcript abbreviates old bulky results in place (``context._transcript``:
the head and a marker naming this tool), so every turn sends the same bytes; the model
reads one whole again only when it needs it. The result comes from the session's
recorded executions (``tool_executions``), never from the model's memory.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools._registry import ToolDef
from tools._runtime import ToolContext, ToolError

READ_RESULT_TOOL = "tool_results.read"


class ReadResultIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_use_id: str = Field(
        min_length=1, max_length=200, description="The id of the earlier tool call."
    )


class ReadResultOut(BaseModel):
    tool_use_id: str
    tool: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None


async def read_result(args: ReadResultIn, ctx: ToolContext) -> ReadResultOut:
    """The recorded execution of an earlier call of this session (the latest turn's when
    turns reused the id)."""
    record = None
    if ctx.session_id is not None:
        record = await ctx.store.tool_executions.latest(args.tool_use_id, session_id=ctx.session_id)
    if record is None:
        raise ToolError(
            "not_found",
            f"No tool call {args.tool_use_id!r} was recorded in this session",
            hint="Use a tool_use_id from this conversation's tool calls",
        )
    return ReadResultOut(
        tool_use_id=record.tool_use_id, tool=record.tool, status=record.status,
        output=record.output, error=record.error,
    )  # fmt: skip


READ_RESULT = ToolDef(
    name=READ_RESULT_TOOL,
    summary="Read an earlier tool call's result whole, by tool_use_id (old results are "
    "shown abbreviated).",
    input_model=ReadResultIn,
    output_model=ReadResultOut,
    category="read",
    confirm="never",
    handler=read_result,
)
