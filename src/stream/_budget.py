"""The token-budget report of a session over HTTP (the same JSON as ``bosun budget --json``).

The report is built by ``context.read_session_budget`` from the log; the models here only
give it a schema in the OpenAPI document and check the shape on the way out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from litestar import get
from litestar.params import FromPath
from pydantic import BaseModel, Field

from context import read_session_budget
from stream._api import AuthedRequest, ServicesDep
from stream._routes import session_for


class SectionOut(BaseModel):
    name: str
    allocated: int = Field(description="Tokens the role's budget gives the section.")
    used: int = Field(
        description="Tokens the fitted section took: above allocated only with an overrun cut."
    )


class CutOut(BaseModel):
    section: str
    action: Literal["abbreviated", "truncated", "dropped", "compressed", "overrun"]
    tokens_before: int
    tokens_after: int
    detail: str = Field(description="Counts and item keys (tool/source names), never user text.")


class CallOut(BaseModel):
    role: str = Field(description="planner, executor, merger or summariser.")
    step_id: str | None = Field(description="The plan step, for executor calls.")
    sections: list[SectionOut]
    total_allocated: int
    total_used: int
    cuts: list[CutOut]


class UsageFiguresOut(BaseModel):
    input_tokens: int = Field(description="Uncached input tokens (cache reads/writes apart).")
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd_micros: int
    cache_hit_ratio: float | None = Field(
        description="cache_read / (cache_read + input); null when both are 0."
    )


class UsageOut(UsageFiguresOut):
    by_role: dict[str, UsageFiguresOut]


class CompressionOut(BaseModel):
    up_to_seq: int = Field(description="Messages up to this sequence number were summarised.")
    summary_tokens: int | None = Field(
        description="Tokens the summary took in the next fitted conversation; null until used."
    )


class SourceOut(BaseModel):
    source: str
    tokens: int
    truncated: bool
    error: str | None
    budget: int | None = Field(
        default=None, description="The source's own token budget; null: the section's only."
    )
    cuts: list[CutOut] = Field(
        default_factory=list, description="What fitting the source into its own budget cut."
    )


class ModelCallOut(UsageFiguresOut):
    role: str
    model: str


class TurnBudgetOut(BaseModel):
    turn_id: str
    started_at: datetime | None
    status: str
    calls: list[CallOut] = Field(description="One per model call, in log order.")
    usage: UsageOut = Field(description="The provider-reported usage of the turn.")
    compressed: list[CompressionOut]
    sources: list[SourceOut]
    model_calls: list[ModelCallOut] = Field(
        default_factory=list,
        description="Each model call's provider-reported usage, in order, with its own "
        "cache_hit_ratio.",
    )


class SessionBudgetOut(BaseModel):
    session_id: str
    turns: list[TurnBudgetOut]
    totals: UsageOut


@get(
    "/v1/sessions/{session_id:str}/budget",
    summary="Token-budget report: per turn and model call, allocated vs used per section",
)
async def session_budget(
    session_id: FromPath[str], request: AuthedRequest, services: ServicesDep
) -> SessionBudgetOut:
    record = await session_for(services, request.user, session_id)
    report = await read_session_budget(services.store, record.id)
    return SessionBudgetOut.model_validate(report.to_dict())
