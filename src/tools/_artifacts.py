"""Artifacts from tools: a handler creates or revises one, the runner reports it.

An artifact type is registered once with the pydantic model its payload must match
(``register_artifact_type("workout", WorkoutPayload, schema_version="1")``), so a stored
artifact always has the shape its renderers expect. ``create_artifact`` /
``revise_artifact`` store a version and queue an ``artifact`` event on the call's
context; the runner hands those events to the executor with the outcome, which logs them
after the call's ``tool_completed``. Store the artifact as the handler's last act: one
stored before a later failure of the handler stays stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from events import ArtifactSaved
from store import ArtifactRecord
from tools._executions import describe_errors
from tools._runtime import ToolContext, ToolError

__all__ = [
    "ArtifactType",
    "artifact_type",
    "create_artifact",
    "register_artifact_type",
    "revise_artifact",
]

MAX_TITLE_CHARS = 200


@dataclass(frozen=True, slots=True)
class ArtifactType:
    """A registered artifact type: its name, payload model and schema version."""

    name: str
    model: type[BaseModel]
    schema_version: str


_TYPES: dict[str, ArtifactType] = {}


def register_artifact_type(
    name: str, model: type[BaseModel], *, schema_version: str = "1"
) -> ArtifactType:
    """Declare an artifact type (idempotent for the same model; a clash is a bug)."""
    existing = _TYPES.get(name)
    if existing is not None and existing.model is not model:
        raise ValueError(f"Artifact type {name!r} is already registered with another model")
    _TYPES[name] = ArtifactType(name, model, schema_version)
    return _TYPES[name]


def artifact_type(name: str) -> ArtifactType:
    """The registered type ``name``; an unregistered one is a bug in the tool."""
    try:
        return _TYPES[name]
    except KeyError:
        raise ValueError(f"Artifact type {name!r} is not registered") from None


def _payload(kind: ArtifactType, payload: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """The payload held to its type's model, as JSON; a mismatch is a typed tool error."""
    try:
        data = payload.model_dump() if isinstance(payload, BaseModel) else payload
        return kind.model.model_validate(data).model_dump(mode="json")
    except ValidationError as exc:
        message = f"Invalid {kind.name} artifact: {describe_errors(exc)}"
        raise ToolError("invalid_artifact", message, hint="Fix these fields and retry") from None


def _where(ctx: ToolContext) -> tuple[str, str, str]:
    if ctx.session_id is None or ctx.turn_id is None or ctx.tool_use_id is None:
        raise ToolError(
            "no_session",
            "Artifacts can only be made by a tool call in a session",
            hint="Call the tool from a chat turn",
        )
    return ctx.session_id, ctx.turn_id, ctx.tool_use_id


async def create_artifact(
    ctx: ToolContext,
    *,
    type: str,
    title: str,
    summary: str,
    payload: BaseModel | dict[str, Any],
) -> ArtifactRecord:
    """Store version 1 of a new artifact of the call's session and queue its event."""
    kind = artifact_type(type)
    session_id, turn_id, tool_use_id = _where(ctx)
    record = await ctx.store.artifacts.create(
        session_id, turn_id=turn_id, tool_use_id=tool_use_id, type=kind.name,
        schema_version=kind.schema_version, title=title[:MAX_TITLE_CHARS], summary=summary,
        payload=_payload(kind, payload),
    )  # fmt: skip
    _saved(ctx, record)
    return record


async def revise_artifact(
    ctx: ToolContext,
    artifact_id: str,
    *,
    title: str,
    summary: str,
    payload: BaseModel | dict[str, Any],
) -> ArtifactRecord:
    """Store the next version of the session's ``artifact_id`` and queue its event;
    ``not_found`` if the session has no such artifact."""
    session_id, turn_id, tool_use_id = _where(ctx)
    current = await ctx.store.artifacts.get(session_id, artifact_id)
    if current is None:
        raise ToolError("not_found", f"No artifact {artifact_id!r} in this session")
    kind = artifact_type(current.type)
    record = await ctx.store.artifacts.revise(
        session_id, artifact_id, turn_id=turn_id, tool_use_id=tool_use_id,
        title=title[:MAX_TITLE_CHARS], summary=summary, payload=_payload(kind, payload),
        schema_version=kind.schema_version,
    )  # fmt: skip
    if record is None:  # pragma: no cover - the session's rows are never deleted mid-turn
        raise ToolError("not_found", f"No artifact {artifact_id!r} in this session")
    _saved(ctx, record)
    return record


def _saved(ctx: ToolContext, record: ArtifactRecord) -> None:
    ctx.emit(
        ArtifactSaved(
            artifact_id=record.id,
            version=record.version,
            artifact_type=record.type,
            schema_version=record.schema_version,
            title=record.title,
            summary=record.summary,
            tool_use_id=record.tool_use_id,
            step_id=ctx.step_id,
        )
    )
