"""Spans, made only when tracing is on: with it off each helper yields ``NO_SPAN``.

``span`` is the current span for what runs inside it (children, outbound ``traceparent``);
``root_span`` starts a turn's span in its own trace (or under the caller's span when the
request's ``traceparent`` named the same trace); ``start`` is a span that is not made
current, for a model's reply stream, which yields to its caller between chunks.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, Protocol

from telemetry._ids import PRESET
from telemetry._state import STATE

if TYPE_CHECKING:
    from opentelemetry.trace import Link

_TRACE_ID = re.compile(r"^(?!0{32})[0-9a-f]{32}$")

AttrValue = str | bool | int | float | Sequence[str] | Sequence[int]
Attributes = Mapping[str, AttrValue]
Kind = Literal["internal", "client"]


class SpanLike(Protocol):
    """What Bosun does with a span: an OpenTelemetry ``Span``, or ``NO_SPAN``."""

    def set_attribute(self, key: str, value: AttrValue) -> None: ...
    def set_attributes(self, attributes: Attributes) -> None: ...
    def add_event(self, name: str, attributes: Attributes | None = None) -> None: ...
    def end(self) -> None: ...
    def is_recording(self) -> bool: ...


class _NoSpan:
    """The span of a process that does not trace: every call does nothing."""

    def set_attribute(self, key: str, value: AttrValue) -> None:
        return

    def set_attributes(self, attributes: Attributes) -> None:
        return

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        return

    def end(self) -> None:
        return

    def is_recording(self) -> bool:
        return False


NO_SPAN: SpanLike = _NoSpan()


def _kind(kind: Kind) -> object:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT if kind == "client" else SpanKind.INTERNAL


def fail(span: SpanLike, error_type: str, description: str | None = None) -> None:
    """Mark ``span`` failed with the low-cardinality ``error.type`` (a Bosun error code, or
    an exception's class name); ``description`` must hold no user text."""
    if not span.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))  # type: ignore[attr-defined]


def _failed(span: SpanLike, exc: BaseException) -> None:
    """An exception leaving a span: its class name (a cancel is ``cancelled``), unless a
    more precise ``error.type`` was set already."""
    if getattr(span, "attributes", {}).get("error.type") is not None:
        return
    cancelled = isinstance(exc, asyncio.CancelledError)
    fail(span, "cancelled" if cancelled else type(exc).__name__)


@contextmanager
def span(
    name: str, attributes: Attributes | None = None, *, kind: Kind = "internal"
) -> Iterator[SpanLike]:
    """A span around the block, current inside it; ``NO_SPAN`` when tracing is off."""
    tracer = STATE.tracer
    if tracer is None:
        yield NO_SPAN
        return
    with tracer.start_as_current_span(
        name, kind=_kind(kind), attributes=attributes,  # type: ignore[arg-type]
        record_exception=False, set_status_on_exception=False,
    ) as current:  # fmt: skip
        try:
            yield current
        except BaseException as exc:
            _failed(current, exc)
            raise


@contextmanager
def root_span(
    name: str, trace_id: str, attributes: Attributes | None = None, links: Sequence[str] = ()
) -> Iterator[SpanLike]:
    """A turn's span, current inside the block: a child of the current span when that is in
    trace ``trace_id`` (the request's ``traceparent``), else the root of that trace;
    ``links``: the ``traceparent`` of spans it follows from (what queued a run)."""
    tracer = STATE.tracer
    if tracer is None:
        yield NO_SPAN
        return
    from opentelemetry import trace
    from opentelemetry.context import Context

    caller = trace.get_current_span().get_span_context()
    under_caller = caller.is_valid and f"{caller.trace_id:032x}" == trace_id
    ours = not under_caller and _TRACE_ID.match(trace_id) is not None  # else: a random one
    token = PRESET.set(int(trace_id, 16)) if ours else None
    try:
        root = tracer.start_span(
            name, context=None if under_caller else Context(), attributes=attributes,
            links=_links(links),
        )  # fmt: skip
    finally:
        if token is not None:
            PRESET.reset(token)
    with trace.use_span(
        root, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield root
        except BaseException as exc:
            _failed(root, exc)
            raise


def _links(traceparents: Sequence[str]) -> list[Link]:
    """Links to the spans ``traceparents`` name (malformed ones are left out)."""
    from opentelemetry import trace
    from opentelemetry.trace import Link
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    found = []
    for traceparent in traceparents:
        context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
        span_context = trace.get_current_span(context).get_span_context()
        if span_context.is_valid:
            found.append(Link(span_context))
    return found


def current_traceparent() -> str | None:
    """The current span's W3C ``traceparent`` (to link to it later), or ``None``."""
    if STATE.tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def start(name: str, attributes: Attributes | None = None, *, kind: Kind = "client") -> SpanLike:
    """A span under the current one that is not made current: end it with ``end()``."""
    tracer = STATE.tracer
    if tracer is None:
        return NO_SPAN
    return tracer.start_span(name, kind=_kind(kind), attributes=attributes)  # type: ignore[arg-type]


def event(name: str, attributes: Attributes | None = None) -> None:
    """An event on the current span (a confirmation asked, a pick offered)."""
    if STATE.tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(name, attributes)


def current_trace_id() -> str | None:
    """The current span's trace id, as 32 hex digits; ``None`` when there is none."""
    if STATE.tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None
