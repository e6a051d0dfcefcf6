"""Tracing is off unless ``OTEL_*`` turns it on, then exports as configured; content is
captured only on the operator's opt-in, with the log's secret rules applied."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

import telemetry
from bosun.log import scrub_secrets
from conftest import ServerFactory
from helpers import stream_turn
from providers import ScriptedModel
from telemetry_testing import Spans, tracing
from turn import TurnModels

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


@pytest.fixture(autouse=True)
def off_again() -> Iterator[None]:
    yield
    telemetry.shutdown()


def exporter() -> Any:
    tracer = telemetry.STATE.tracer
    assert tracer is not None
    [processor] = tracer.span_processor._span_processors  # type: ignore[attr-defined]
    return processor.span_exporter


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", **ENDPOINT},
        {"OTEL_SDK_DISABLED": "true", **ENDPOINT},
    ],
    ids=["nothing", "exporters-none", "sdk-disabled"],
)
def test_tracing_is_off_unless_configured(environ: dict[str, str]) -> None:
    assert telemetry.configure(environ) is None
    assert telemetry.STATE.tracer is None
    with telemetry.span("anything") as span:
        assert span is telemetry.NO_SPAN


def test_an_endpoint_turns_traces_and_metrics_on_over_http_protobuf() -> None:
    said = telemetry.configure(ENDPOINT)
    assert said == "traces: otlp (http/protobuf); metrics: otlp (http/protobuf)"
    assert isinstance(exporter(), Http)
    assert exporter()._endpoint == "http://127.0.0.1:4318/v1/traces"  # from the mapping given
    assert telemetry.STATE.token_usage is not None and telemetry.STATE.duration is not None


def test_grpc_is_chosen_by_the_protocol_variable() -> None:
    said = telemetry.configure({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                "OTEL_METRICS_EXPORTER": "none"})  # fmt: skip
    assert said == "traces: otlp (grpc)"
    assert isinstance(exporter(), Grpc) and telemetry.STATE.token_usage is None


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "http/protobuf or grpc"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp, console, none"),
    ],
)
def test_a_setting_bosun_cannot_honour_is_an_error(environ: dict[str, str], words: str) -> None:
    with pytest.raises(telemetry.TelemetryConfigError, match=words):
        telemetry.configure(environ)


def test_start_up_loads_no_sdk_it_does_not_use() -> None:
    """What every ``bosun`` process imports (``bosun.app``, ``bosun.commands``) loads no
    OpenTelemetry SDK while tracing is off, and no package only one path needs: the mcp
    SDK (a quarter of the import: when a toolset connects), ``jsonschema`` and
    ``referencing`` (when tools are mapped), alembic (when a command migrates), ``ag_ui``
    (with the first AG-UI request) and croniter (when a schedule is read). One subprocess
    checks them all (a subprocess costs CI a second or two of CPU)."""
    code = (
        "import json, sys, bosun.app, bosun.commands, telemetry;"
        "assert telemetry.configure({}) is None;"
        "print(json.dumps(sorted(sys.modules)))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(shown.stdout)
    assert [m for m in loaded if m.startswith("opentelemetry.sdk")] == []
    unused = {"mcp", "mcp_types", "jsonschema", "referencing", "alembic", "ag_ui", "croniter"}
    assert sorted({m.partition(".")[0] for m in loaded} & unused) == []


@pytest.fixture
def captured() -> Iterator[Spans]:
    with tracing() as spans:
        tracer = telemetry.STATE.tracer
        telemetry.STATE.capture_content, telemetry.STATE.scrub = True, scrub_secrets
        assert tracer is not None
        yield spans


async def test_content_is_captured_on_opt_in_with_secrets_masked(
    make_server: ServerFactory, captured: Spans
) -> None:
    model = ScriptedModel([{"text": "Use sk-live-0123456789abcdef to pay."}] * 3)
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        await stream_turn(server.client, {"message": "Say my key: Bearer abc.def"}, server.auth())

    chats = [dict(s.attributes or {}) for s in captured.all() if s.name.startswith("chat ")]
    inputs = " ".join(str(c.get("gen_ai.input.messages", "")) for c in chats)
    assert "Say my key" in inputs  # the text is there: the operator asked for it
    assert "abc.def" not in inputs and "[scrubbed]" in inputs  # the secret is not
