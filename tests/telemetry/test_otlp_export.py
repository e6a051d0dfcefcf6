"""``bosun serve`` exports its traces and GenAI metrics over OTLP/HTTP when ``OTEL_*``
says so: the real SDK's exporter, protobuf bodies at a local receiver on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from stream import TokenConfig, mint_token

BOSUN = [sys.executable, "-m", "bosun.cli"]
CALLER_TRACE, CALLER_SPAN = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
SCRIPT = """
repeat: true
steps:
  - match: "You are the planner"
    text: '{"strategy": "simple", "reasoning": "r"}'
    usage: {input_tokens: 40, output_tokens: 8}
  - text: "Ahoy from the scripted model."
    usage: {input_tokens: 30, output_tokens: 6, cache_read_tokens: 10}
"""


class Receiver:
    """An OTLP/HTTP receiver: what arrived at each path, as raw protobuf bodies."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {"/v1/traces": [], "/v1/metrics": []}
        self.content_types: set[str] = set()
        self.lock = threading.Lock()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        found = []
        with self.lock:
            bodies = list(self.bodies["/v1/traces"])
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                found += [
                    (resource, s) for scope in resource_spans.scope_spans for s in scope.spans
                ]
        return found

    def metric_names(self) -> set[str]:
        with self.lock:
            bodies = list(self.bodies["/v1/metrics"])
        names = set()
        for body in bodies:
            request = ExportMetricsServiceRequest.FromString(body)
            for resource_metrics in request.resource_metrics:
                for scope in resource_metrics.scope_metrics:
                    names |= {m.name for m in scope.metrics}
        return names


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            with received.lock:
                received.bodies.setdefault(self.path, []).append(body)
                received.content_types.add(self.headers.get("content-type", ""))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield received, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = getattr(value, value.WhichOneof("value"))
    return values


def until(check: Any, timeout_s: float = 60.0) -> None:  # a busy 2-core start-up
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "nothing arrived in time"
        time.sleep(0.05)


def test_serve_exports_spans_and_genai_metrics_over_otlp_http(
    receiver: tuple[Receiver, str], tmp_path: Path
) -> None:
    received, endpoint = receiver
    (tmp_path / "script.yaml").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOSUN_", "OTEL_"))}
    env |= {
        "BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'otlp.db'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bosun-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "60000",
    }  # fmt: skip
    port, script = free_port(), tmp_path / "script.yaml"
    process = subprocess.Popen(
        [*BOSUN, "serve", "--dev", "--port", str(port), "--model", f"scripted:{script}"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        until(lambda: _healthy(url))
        token = mint_token(
            TokenConfig(DEV_JWT_SECRET), user="u1", org="o1", role="owner", ttl_s=600
        )
        headers = {
            "Authorization": f"Bearer {token}",
            "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
        }
        answer = httpx.post(f"{url}/v1/chat", json={"message": "xylophone"}, headers=headers)
        assert answer.status_code == 200, answer.text
        until(lambda: any(s.name == "invoke_agent default" for _, s in received.spans()))
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)

    assert answer.json()["status"] == "completed"
    assert received.content_types == {"application/x-protobuf"}
    found = received.spans()
    [(resource, root)] = [(r, s) for r, s in found if s.name == "invoke_agent default"]
    assert resource["service.name"] == "bosun-under-test"
    assert root.trace_id.hex() == CALLER_TRACE and root.parent_span_id.hex() == CALLER_SPAN
    chats = [attributes(s) for _, s in found if s.name == "chat script"]
    assert {c["bosun.role"] for c in chats} >= {"planner", "merger"}
    answer_call = next(c for c in chats if c["bosun.role"] == "merger")
    assert answer_call["gen_ai.usage.input_tokens"] == 40  # 30 + 10 read from the cache
    assert answer_call["gen_ai.usage.cache_read.input_tokens"] == 10
    # the shutdown flushes the metrics (their interval is a minute)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= (
        received.metric_names()
    ), output
    assert "xylophone" not in output and "Ahoy" not in output
    for _, span in found:  # no message text without the opt-in
        assert "xylophone" not in str(span) and "Ahoy" not in str(span)


def test_an_unsupported_otel_setting_stops_serve(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOSUN_", "OTEL_"))}
    env |= {
        "BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'otlp.db'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
    }
    result = subprocess.run(
        [*BOSUN, "serve", "--dev", "--port", str(free_port())], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "http/json" in result.stderr and "http/protobuf or grpc" in result.stderr


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False
