"""The GenAI client metrics (``gen_ai.client.token.usage``, ``gen_ai.client.operation
.duration``), recorded beside Bosun's Prometheus counters when an OTLP metrics exporter is
configured."""

from __future__ import annotations

from telemetry._spans import Attributes
from telemetry._state import STATE

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                      20.48, 40.96, 81.92)  # fmt: skip
"""The bucket boundaries the conventions advise for the two histograms."""


def model_call(
    attributes: Attributes, *, input_tokens: int, output_tokens: int, duration_s: float
) -> None:
    """Record one model call: its duration (with ``error.type`` when it failed), and its
    input and output tokens when it answered."""
    if STATE.duration is not None:
        STATE.duration.record(duration_s, attributes)
    if STATE.token_usage is None or "error.type" in attributes:
        return
    STATE.token_usage.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
    STATE.token_usage.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})
