"""Message text and tool inputs and outputs on spans: only when the operator opted in
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``), and scrubbed by the log's
rules first (secrets and private keys never leave, in spans as in logs)."""

from __future__ import annotations

import json
from typing import Any

from telemetry._state import STATE

MAX_CHARS = 16_000
"""A captured value longer than this is cut (and says so): spans are not a data store."""


def content(value: Any) -> str | None:
    """``value`` scrubbed and as JSON text, for a content attribute; ``None`` when content
    capture is off (the attribute is then left out)."""
    if STATE.tracer is None or not STATE.capture_content:
        return None
    text = json.dumps(STATE.scrub(value), ensure_ascii=False, default=str)
    if len(text) > MAX_CHARS:
        return text[:MAX_CHARS] + f"…[cut: {len(text)} chars]"
    return text
