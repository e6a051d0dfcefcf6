"""W3C Trace Context in and out: a request's ``traceparent`` continues the caller's trace;
Bosun's outbound HTTP calls carry the current span's.

Only the W3C ``traceparent``/``tracestate`` pair is read and written (no baggage: it
could carry user data to every API a tool calls).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

from telemetry._state import STATE


@contextmanager
def incoming(headers: Mapping[str, str]) -> Iterator[None]:
    """Make the span a request's ``traceparent`` names the current parent inside the block
    (what a turn started there inherits); nothing when tracing is off or it has none."""
    if STATE.tracer is None or "traceparent" not in headers:
        yield
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
    token = context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``) to outbound ``headers``;
    nothing when tracing is off or no span is current."""
    if STATE.tracer is None:
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    TraceContextTextMapPropagator().inject(headers)
