"""A session's artifacts over HTTP: the latest version of each, and one version in full.

Same visibility as the session itself (``session_for``): another org's or user's session
is a 404, and so is its artifact, whoever asks with its id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import get
from litestar.params import FromPath
from pydantic import BaseModel, Field

from store import ArtifactRecord
from stream._api import AuthedRequest, ServicesDep
from stream._bounds import int_query
from stream._errors import ApiError
from stream._routes import session_for

MAX_VERSION = 1_000_000


class ArtifactSummaryOut(BaseModel):
    id: str = Field(description="art_ and 24 hex digits.")
    version: int = Field(description="The latest version (1 when never revised).")
    type: str = Field(description="The artifact type, e.g. workout.")
    schema_version: str
    title: str
    summary: str
    tool_use_id: str = Field(description="The tool call that made this version.")
    created_at: datetime = Field(description="When this version was made.")


class ArtifactOut(ArtifactSummaryOut):
    payload: dict[str, Any] = Field(description="Validated by the type's registered model.")


class ArtifactList(BaseModel):
    artifacts: list[ArtifactSummaryOut] = Field(description="Oldest artifact first.")


def _summary(record: ArtifactRecord) -> ArtifactSummaryOut:
    return ArtifactSummaryOut.model_validate(record, from_attributes=True)


@get(
    "/v1/sessions/{session_id:str}/artifacts",
    summary="The session's artifacts (latest version of each, without payloads)",
)
async def list_artifacts(
    session_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> ArtifactList:
    session = await session_for(services, request.user, session_id)
    records = await services.store.artifacts.list(session.id)
    return ArtifactList(artifacts=[_summary(r) for r in records])


@get(
    "/v1/sessions/{session_id:str}/artifacts/{artifact_id:str}",
    summary="One artifact of the session with its payload (the latest version by default)",
)
async def artifact_detail(
    session_id: FromPath[str],
    artifact_id: FromPath[str],
    request: AuthedRequest,
    services: ServicesDep,
    version: Annotated[
        int | None, int_query(ge=1, le=MAX_VERSION, description="A version; default: latest.")
    ] = None,
) -> ArtifactOut:
    session = await session_for(services, request.user, session_id)
    record = await services.store.artifacts.get(session.id, artifact_id, version)
    if record is None:
        which = "" if version is None else f" version {version}"
        raise ApiError(404, "not_found", f"No artifact {artifact_id!r}{which} in this session")
    return ArtifactOut.model_validate(record, from_attributes=True)
