"""Tracing and GenAI metrics from the standard ``OTEL_*`` variables; off unless configured.

Traces are on when ``OTEL_TRACES_EXPORTER`` is ``otlp`` or ``console``, or when it is unset
and an OTLP endpoint is (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``);
metrics likewise with ``OTEL_METRICS_EXPORTER``. ``OTEL_SDK_DISABLED=true`` turns both
off. The official exporters read their own variables (endpoint, headers, timeout,
compression); ``OTEL_EXPORTER_OTLP_PROTOCOL`` picks ``http/protobuf`` (the default) or
``grpc``; the SDK reads the sampler (``OTEL_TRACES_SAMPLER``) and the resource
(``OTEL_SERVICE_NAME``, default ``bosun``; ``OTEL_RESOURCE_ATTRIBUTES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from telemetry._ids import PRESET
from telemetry._metrics import DURATION_BUCKETS_S, TOKEN_BUCKETS
from telemetry._state import SCOPE, SEMCONV_VERSION, STATE, TracingState

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class TelemetryConfigError(ValueError):
    """An ``OTEL_*`` variable Bosun cannot honour (said at start-up, never ignored)."""


def _signal(environ: Mapping[str, str], signal: str) -> str | None:
    """The exporter configured for ``signal`` (``traces``/``metrics``), or ``None``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    chosen = environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if chosen and chosen not in EXPORTERS:
        raise TelemetryConfigError(
            f"OTEL_{signal.upper()}_EXPORTER={chosen!r} is not supported: use one of "
            + ", ".join(EXPORTERS)
        )
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    )
    if chosen == "none" or (not chosen and not endpoint):
        return None
    return chosen or "otlp"


def _protocol(environ: Mapping[str, str], signal: str) -> str:
    protocol = (
        environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        raise TelemetryConfigError(
            f"OTLP protocol {protocol!r} is not supported: use http/protobuf or grpc"
        )
    return protocol


def _endpoint(environ: Mapping[str, str], signal: str, protocol: str) -> str | None:
    """Where ``signal`` goes, as the exporters read it from the environment (read here so
    a mapping other than ``os.environ`` configures them too): the signal's own endpoint
    as given, else the base endpoint (over HTTP, plus ``/v1/{signal}``)."""
    own = environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if own:
        return own
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not base or protocol == "grpc":
        return base or None
    return f"{base.rstrip('/')}/v1/{signal}"


def _span_exporter(kind: str, protocol: str, endpoint: str | None) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise TelemetryConfigError(
                "OTLP over gRPC needs the gRPC exporter: pip install 'bosun[otlp-grpc]'"
            ) from exc
        return OTLPSpanExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=endpoint)


def _metric_exporter(kind: str, protocol: str, endpoint: str | None) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
        except ImportError as exc:
            raise TelemetryConfigError(
                "OTLP over gRPC needs the gRPC exporter: pip install 'bosun[otlp-grpc]'"
            ) from exc
        return OTLPMetricExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    return Http(endpoint=endpoint)


def _resource(environ: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource

    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    return Resource.create({} if named else {"service.name": "bosun"})


def tracer_provider(resource: Any = None) -> TracerProvider:
    """An SDK tracer provider whose root spans can take a turn's own trace id (tests and
    embedders add their processors to it, then pass it to ``use``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetTraceIds(RandomIdGenerator):
        """Random ids, but the trace id preset for the root span being started, if any."""

        def generate_trace_id(self) -> int:
            preset = PRESET.get()
            return preset if preset is not None else super().generate_trace_id()

    return TracerProvider(resource=resource, id_generator=PresetTraceIds())


def use(
    traces: TracerProvider | None,
    metrics: MeterProvider | None = None,
    *,
    capture_content: bool = False,
    scrub: Callable[[Any], Any] | None = None,
    shutdown: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> None:
    """Trace with ``traces`` (``None``: stop tracing) and record the GenAI metrics with
    ``metrics``; ``capture_content`` records message text and tool inputs and outputs,
    passed through ``scrub`` first."""
    fresh = TracingState(capture_content=capture_content, shutdown=shutdown, flush=flush)
    if scrub is not None:
        fresh.scrub = scrub
    if traces is not None:
        fresh.tracer = traces.get_tracer(SCOPE, schema_url=_schema_url())
    if metrics is not None:
        meter = metrics.get_meter(SCOPE, schema_url=_schema_url())
        fresh.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )  # fmt: skip
        fresh.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S),
        )  # fmt: skip
    for name in TracingState.__slots__:
        setattr(STATE, name, getattr(fresh, name))


def _schema_url() -> str:
    return f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"


def configure(
    environ: Mapping[str, str], *, scrub: Callable[[Any], Any] | None = None
) -> str | None:
    """Set tracing and metrics up from ``environ``'s ``OTEL_*`` variables; a one-line
    summary to log at start-up, or ``None`` when both are off. Raises
    ``TelemetryConfigError`` for a setting it cannot honour."""
    traces_kind, metrics_kind = _signal(environ, "traces"), _signal(environ, "metrics")
    if traces_kind is None and metrics_kind is None:
        use(None)
        return None
    resource = _resource(environ)
    traces = metrics = None
    said = []
    if traces_kind is not None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        protocol = _protocol(environ, "traces")
        traces = tracer_provider(resource)
        exporter = _span_exporter(traces_kind, protocol, _endpoint(environ, "traces", protocol))
        traces.add_span_processor(BatchSpanProcessor(exporter))
        said.append(f"traces: {traces_kind}" + (f" ({protocol})" if traces_kind == "otlp" else ""))
    if metrics_kind is not None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        protocol = _protocol(environ, "metrics")
        exporter = _metric_exporter(metrics_kind, protocol, _endpoint(environ, "metrics", protocol))
        reader = PeriodicExportingMetricReader(exporter)
        metrics = MeterProvider(resource=resource, metric_readers=[reader])
        said.append(
            f"metrics: {metrics_kind}" + (f" ({protocol})" if metrics_kind == "otlp" else "")
        )
    capture = environ.get(CONTENT, "").strip().lower() == "true"

    def stop() -> None:
        for provider in (traces, metrics):
            if provider is not None:
                provider.shutdown()

    def flush() -> None:
        for provider in (traces, metrics):
            if provider is not None:
                provider.force_flush()

    use(traces, metrics, capture_content=capture, scrub=scrub, shutdown=stop, flush=flush)
    return "; ".join(said) + ("; message content: on" if capture else "")


def flush() -> None:
    """Export what is buffered now (an app's shutdown: a SIGTERM ends the process right
    after it, before ``shutdown`` could run)."""
    if STATE.flush is not None:
        STATE.flush()


def shutdown() -> None:
    """Flush what is buffered and stop exporting (a server's last step)."""
    stop = STATE.shutdown
    use(None)
    if stop is not None:
        stop()
