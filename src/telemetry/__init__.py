"""OpenTelemetry traces and GenAI metrics for Bosun, following the GenAI semantic
conventions (``SEMCONV_VERSION``); off unless the operator sets ``OTEL_*`` variables.

The lowest layer beside nothing: every other package may call it, it imports none of
them, and it is the only one that imports ``opentelemetry`` (docs/observability.md).
"""

from telemetry._content import content
from telemetry._ids import new_trace_id, trace_id_from
from telemetry._metrics import model_call
from telemetry._propagation import incoming, inject
from telemetry._setup import (
    CONTENT,
    TelemetryConfigError,
    configure,
    flush,
    shutdown,
    tracer_provider,
    use,
)
from telemetry._spans import (
    NO_SPAN,
    Attributes,
    SpanLike,
    current_trace_id,
    current_traceparent,
    event,
    fail,
    root_span,
    span,
    start,
)
from telemetry._state import SEMCONV_VERSION, STATE, TracingState, active

__all__ = [
    "CONTENT",
    "NO_SPAN",
    "SEMCONV_VERSION",
    "STATE",
    "Attributes",
    "SpanLike",
    "TelemetryConfigError",
    "TracingState",
    "active",
    "configure",
    "content",
    "current_trace_id",
    "current_traceparent",
    "event",
    "fail",
    "flush",
    "incoming",
    "inject",
    "model_call",
    "new_trace_id",
    "root_span",
    "shutdown",
    "span",
    "start",
    "trace_id_from",
    "tracer_provider",
    "use",
]
