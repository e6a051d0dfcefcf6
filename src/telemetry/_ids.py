"""Trace ids Bosun chooses itself: a turn's ``trace_id`` is its trace's id.

A turn's trace id is minted before its root span starts (it is stored with the turn, so a
resume or a takeover on another worker continues the same trace), so the SDK's id
generator (``_setup.PresetTraceIds``) takes a preset id from a context variable when one
is set. Nothing here imports the SDK: these run with tracing off too.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

PRESET: ContextVar[int | None] = ContextVar("bosun_preset_trace_id", default=None)
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def preset(trace_id: str) -> object:
    """Make ``trace_id`` the id of the next root span started in this context; the token
    to give back to ``PRESET.reset``."""
    return PRESET.set(int(trace_id, 16))


def reset(token: object) -> None:
    PRESET.reset(token)  # type: ignore[arg-type]


def new_trace_id() -> str:
    """A fresh trace id: 32 lowercase hex digits, never all zero (W3C Trace Context)."""
    return uuid.uuid4().hex


def trace_id_from(traceparent: str | None) -> str | None:
    """The trace id a W3C ``traceparent`` header carries; ``None`` when it is absent or
    malformed (version ``ff``, or an all-zero trace or parent id, are invalid)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.match(traceparent.strip().lower())
    if match is None or traceparent.strip().startswith("ff"):
        return None
    trace_id, parent_id = match.groups()
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id
