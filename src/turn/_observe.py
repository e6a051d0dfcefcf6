"""Typed observability events and the in-process metrics they feed.

Each function here logs one structlog event with a fixed set of fields (names, ids, codes,
counts, timings: never text, inputs or outputs) and updates ``METRICS``, so every event
name and field lives in this one place:

- ``turn.started`` / ``turn.completed`` / ``turn.failed`` (``run_turn``);
- ``confirmation_pending``, one per call a suspended turn waits on (``execute_plan``).

``run_turn`` also binds ``trace_id``, ``org_id``, ``session_id`` and ``turn_id`` as
structlog context variables for the whole turn, so every other event logged while it
runs carries them too: ``tool.executed`` (``tools.logged``), ``replay.violation``
(``executors``) and ``cap.threshold`` (``_metering``).

Tool metrics come from the ``tool.executed`` log events through a structlog processor
(``count_tool_executions``, installed by ``bosun.log.configure_logging``), not from a call
here: the tools layer may not import ``turn`` (tools drive no loops: docs/architecture.md),
and ``tools.logged`` is the one place every execution passes (a turn's calls, resumed
ones, undos), with the runner's own timing. So those two metrics count only where Bosun's
logging is configured, as ``bosun serve`` does (whatever the log level: the level filter
runs after it).

``METRICS`` holds the process's metrics (several apps in one process share it) in a
prometheus-client ``CollectorRegistry`` of its own, which ``GET /metrics`` (``stream``)
serves in the library's text format; ``reset`` is for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from structlog.typing import EventDict, WrappedLogger

from events import Error, Event, TurnStatus, Usage
from executors import Suspended

_log = structlog.get_logger("bosun.observe")

TURN_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOOL_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


class TurnIdentity(Protocol):
    """What every turn event names (a ``Turn`` is one)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def org_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def turn_id(self) -> str: ...


# metrics


class Metrics:
    """The process's counters and histograms, in a prometheus-client registry of their own.

    Not the library's global ``REGISTRY``: a ``Metrics()`` made in a test counts alone, and
    nothing another library registers ends up on Bosun's ``/metrics``."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new, empty registry with every metric at zero (tests)."""
        registry = self.registry = CollectorRegistry()
        self.turns = Counter(
            "bosun_turns", "Turns that ended, by status.", ["status"], registry=registry
        )
        self.turn_errors = Counter(
            "bosun_turn_errors", "Failed or cancelled turns, by error code.", ["code"],
            registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "bosun_model_tokens", "Model tokens used by turns, by kind.", ["kind"],
            registry=registry,
        )  # fmt: skip
        self.cost = Counter(
            "bosun_model_cost_usd_micros", "Model cost of turns in micro-dollars.",
            registry=registry,
        )  # fmt: skip
        self.turn_duration = Histogram(
            "bosun_turn_duration_seconds", "Wall time of a turn (or of a resumed part).",
            buckets=TURN_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.tool_executions = Counter(
            "bosun_tool_executions", "Tool calls through the runner, by outcome.",
            ["tool", "outcome"], registry=registry,
        )  # fmt: skip
        self.tool_duration = Histogram(
            "bosun_tool_duration_seconds", "Run time of tool calls that ran.", ["tool"],
            buckets=TOOL_BUCKETS_S, registry=registry,
        )  # fmt: skip

    def turn_ended(
        self, status: TurnStatus, code: str | None, usage: Usage, seconds: float
    ) -> None:
        self.turns.labels(status=status).inc()
        if code is not None:
            self.turn_errors.labels(code=code).inc()
        for kind in TOKEN_KINDS:
            self.tokens.labels(kind=kind).inc(getattr(usage, f"{kind}_tokens"))
        self.cost.inc(usage.cost_usd_micros)
        self.turn_duration.observe(seconds)

    def tool_executed(self, tool: str, outcome: str, duration_ms: int) -> None:
        self.tool_executions.labels(tool=tool, outcome=outcome).inc()
        # Refused, pending and replayed calls did not run (0 ms); nor, as far as the log
        # line tells, did one that took under half a millisecond.
        if duration_ms > 0:
            self.tool_duration.labels(tool=tool).observe(duration_ms / 1000)

    def value(self, sample: str, **labels: str) -> float:
        """One sample's value as a scrape would show it (0 before its first count), e.g.
        ``value("bosun_turns_total", status="failed")``; slow, for tests."""
        return self.registry.get_sample_value(sample, labels) or 0.0

    def render(self) -> bytes:
        """Every metric in the Prometheus text format (``CONTENT_TYPE_PLAIN_0_0_4``)."""
        return generate_latest(self.registry)


METRICS = Metrics()


def reset() -> None:
    """Zero every metric (tests)."""
    METRICS.reset()


# events


def _ids(turn: TurnIdentity) -> dict[str, str]:
    return {
        "trace_id": turn.trace_id,
        "org_id": turn.org_id,
        "session_id": turn.session_id,
        "turn_id": turn.turn_id,
    }


def _usage_fields(usage: Usage) -> dict[str, int | float | None]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "cost_usd_micros": usage.cost_usd_micros,
        "cache_hit_ratio": usage.cache_hit_ratio,
    }


def turn_started(turn: TurnIdentity, *, resumed: bool) -> None:
    """``turn.started``: a turn (or, ``resumed``, the rest of a suspended one) begins."""
    _log.info("turn.started", **_ids(turn), resumed=resumed)


def turn_completed(
    turn: TurnIdentity,
    *,
    status: Literal["completed", "suspended"],
    usage: Usage,
    duration_ms: int,
) -> None:
    """``turn.completed``: it answered, or stopped to wait for the user (``suspended``)."""
    _log.info(
        "turn.completed", **_ids(turn), status=status, **_usage_fields(usage),
        duration_ms=duration_ms,
    )  # fmt: skip
    METRICS.turn_ended(status, None, usage, duration_ms / 1000)


def turn_failed(
    turn: TurnIdentity,
    *,
    status: Literal["failed", "cancelled"],
    code: str,
    usage: Usage,
    duration_ms: int,
) -> None:
    """``turn.failed``: it ended with an ``error`` event of ``code`` (the one the client got,
    with the same ``trace_id``). What it spent until then is counted all the same."""
    level = _log.info if status == "cancelled" else _log.warning
    level(
        "turn.failed", **_ids(turn), status=status, code=code, **_usage_fields(usage),
        duration_ms=duration_ms,
    )  # fmt: skip
    METRICS.turn_ended(status, code, usage, duration_ms / 1000)


def turn_ended(
    turn: TurnIdentity,
    *,
    status: TurnStatus,
    closing: Sequence[Event],
    usage: Usage,
    duration_ms: int,
) -> None:
    """``turn.completed`` or ``turn.failed`` for a turn closing with ``closing`` events
    (a failed or cancelled turn's code is its closing ``error`` event's)."""
    if status == "completed" or status == "suspended":
        turn_completed(turn, status=status, usage=usage, duration_ms=duration_ms)
        return
    assert status == "failed" or status == "cancelled", status  # the others end unanswered
    code = next((e.code for e in closing if isinstance(e, Error)), None)
    code = code or ("cancelled" if status == "cancelled" else "internal")
    turn_failed(turn, status=status, code=code, usage=usage, duration_ms=duration_ms)


def confirmation_pending(*, session_id: str, turn_id: str, waiting: Suspended) -> None:
    """``confirmation_pending``, once per call of a suspended step that waits for the user:
    the tool, its call id and ``confirm`` (``destructive``, ``always``, ``pick`` or
    ``answer``: a question; the question's text is the user's business and never logged)."""
    for call in waiting.pending:
        if call.needs is None:
            continue
        _log.info(
            "confirmation_pending",
            session_id=session_id,
            turn_id=turn_id,
            step_id=waiting.step_id,
            tool=call.tool,
            tool_use_id=call.tool_use_id,
            confirm=call.confirm if call.needs == "confirmation" else call.needs,
        )


def count_tool_executions(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """A structlog processor: count each ``tool.executed`` event in ``METRICS``."""
    if event_dict.get("event") == "tool.executed":
        tool, outcome = event_dict.get("tool"), event_dict.get("outcome")
        duration = event_dict.get("duration_ms")
        if isinstance(tool, str) and isinstance(outcome, str):
            known = outcome != "unknown_tool"  # a made-up name must not become a label
            METRICS.tool_executed(
                tool if known else "(unknown)",
                outcome,
                duration if isinstance(duration, int) else 0,
            )
    return event_dict
