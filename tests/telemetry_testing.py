"""Tracing on, with the real OpenTelemetry SDK, into an in-memory exporter."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import telemetry


class Spans:
    """The spans finished so far, looked up by name."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        assert parent.context is not None
        return [
            s
            for s in self.all()
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]


@contextlib.contextmanager
def tracing() -> Iterator[Spans]:
    """Tracing on for the block (the process's state: tests in one worker run one at a
    time), exporting every span to memory as it ends."""
    exporter = InMemorySpanExporter()
    provider = telemetry.tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    try:
        yield Spans(exporter)
    finally:
        telemetry.use(None)
        provider.shutdown()
