"""``message_notify_user``: the agent tells the user something, optionally delivering an
artifact, and ``artifacts.get``: a model reads an artifact's payload on demand.

A forced-tools agent never answers in free text: this tool *is* its message. Its effect
is an ``agent_message`` event (``ToolContext.emit``; the executor logs it after the
call's ``tool_completed``, so it reaches the SSE stream and the log) carrying the
artifact's payload when ``artifact_id`` names one of the session's artifacts. An unknown
id is not fatal: the message is still delivered and the result carries a warning.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from events import AgentMessage
from store import ARTIFACT_ID_PATTERN, ArtifactRecord
from tools._registry import ToolDef, ToolRegistry
from tools._runtime import ToolContext, ToolError

NOTIFY_USER_TOOL = "message.notify_user"
GET_ARTIFACT_TOOL = "artifacts.get"
MAX_MESSAGE_CHARS = 8_000


class NotifyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="What to say.")
    artifact_id: str | None = Field(
        default=None,
        max_length=64,
        description="An art_… id a tool returned: the artifact is delivered with the message.",
    )


class ArtifactRef(BaseModel):
    """An artifact as a result names it (its payload is in the user's message event)."""

    id: str
    version: int
    type: str
    title: str
    summary: str


class NotifyOut(BaseModel):
    success: bool = True
    message: str
    artifact_id: str | None = None
    artifact: ArtifactRef | None = None
    warning: str | None = None


def artifact_json(record: ArtifactRecord) -> dict[str, Any]:
    """The artifact as an ``agent_message`` event carries it (payload included)."""
    return {
        "id": record.id,
        "version": record.version,
        "type": record.type,
        "schema_version": record.schema_version,
        "title": record.title,
        "summary": record.summary,
        "payload": record.payload,
    }


async def _find(ctx: ToolContext, artifact_id: str) -> ArtifactRecord | None:
    if ctx.session_id is None or len(artifact_id) > 40:
        return None
    return await ctx.store.artifacts.get(ctx.session_id, artifact_id)


async def notify_user(args: NotifyIn, ctx: ToolContext) -> NotifyOut:
    """Deliver the message (and the artifact, if found) as an ``agent_message`` event."""
    record = None if args.artifact_id is None else await _find(ctx, args.artifact_id)
    warning = None
    if args.artifact_id is not None and record is None:
        warning = (
            f"No artifact {args.artifact_id!r} in this session: the message was sent without "
            "it. Use the artifact_id a tool returned."
        )
    ctx.emit(
        AgentMessage(
            text=args.message,
            tool_use_id=ctx.tool_use_id or "",
            artifact_id=args.artifact_id,
            artifact=None if record is None else artifact_json(record),
            warning=warning,
            step_id=ctx.step_id,
        )
    )
    ref = None
    if record is not None:
        ref = ArtifactRef(
            id=record.id, version=record.version, type=record.type,
            title=record.title, summary=record.summary,
        )  # fmt: skip
    return NotifyOut(
        message=args.message, artifact_id=args.artifact_id, artifact=ref, warning=warning
    )


NOTIFY_USER = ToolDef(
    name=NOTIFY_USER_TOOL,
    summary="Send the user a message (no reply expected); artifact_id delivers that artifact.",
    input_model=NotifyIn,
    output_model=NotifyOut,
    category="read",
    confirm="never",
    handler=notify_user,
)


class GetArtifactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact_id: str = Field(pattern=ARTIFACT_ID_PATTERN, description="The art_… id.")
    version: int | None = Field(default=None, ge=1, description="Default: the latest.")


class ArtifactOut(BaseModel):
    id: str
    version: int
    type: str
    schema_version: str
    title: str
    summary: str
    payload: dict[str, Any]


async def get_artifact(args: GetArtifactIn, ctx: ToolContext) -> ArtifactOut:
    """An artifact's full payload, when the summary the model was shown is not enough."""
    record = None
    if ctx.session_id is not None:
        record = await ctx.store.artifacts.get(ctx.session_id, args.artifact_id, args.version)
    if record is None:
        which = "" if args.version is None else f" version {args.version}"
        raise ToolError(
            "not_found",
            f"No artifact {args.artifact_id!r}{which} in this session",
            hint="Use an artifact_id a tool of this session returned",
        )
    return ArtifactOut.model_validate(artifact_json(record))


GET_ARTIFACT = ToolDef(
    name=GET_ARTIFACT_TOOL,
    summary="Read an artifact of this session in full (payload included), by id and version.",
    input_model=GetArtifactIn,
    output_model=ArtifactOut,
    category="read",
    confirm="never",
    handler=get_artifact,
)


def artifact_tools() -> ToolRegistry:
    """``message.notify_user`` (wire name ``message_notify_user``) and ``artifacts.get``."""
    return ToolRegistry([NOTIFY_USER, GET_ARTIFACT])
