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
here: the tools layer may not import ``stream``, and ``tools.logged`` is the one place
every execution passes (a turn's calls, resumed ones, undos), with the runner's own
timing. So those two metrics count only where Bosun's logging is configured, as
``bosun serve`` does (whatever the log level: the level filter runs after it).

``METRICS`` is one registry per process (several apps in one process share it), rendered
in the Prometheus text format by ``GET /metrics`` (``_metrics``); ``reset`` is for tests.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol

import structlog
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


class _Family:
    """One metric family: its name, help, type and label names."""

    kind: Literal["counter", "histogram"]

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)

    def _key(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        assert set(labels) == set(self.labels), f"{self.name} takes labels {self.labels}"
        return tuple(labels[name] for name in self.labels)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Family):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self.values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        assert amount >= 0, f"{self.name} only goes up"
        key = self._key(labels)
        self.values[key] = self.values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        return [
            f"{self.name}{_labels(self.labels, key)} {_number(value)}"
            for key, value in sorted(self.values.items())
        ]


class Histogram(_Family):
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, buckets: Iterable[float], labels: Sequence[str] = ()
    ) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = tuple(sorted(buckets))
        self.series: dict[tuple[str, ...], tuple[list[int], float]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        counts, total = self.series.get(key) or ([0] * (len(self.buckets) + 1), 0.0)
        counts[next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))] += 1
        self.series[key] = counts, total + value

    def count(self, **labels: str) -> int:
        series = self.series.get(self._key(labels))
        return sum(series[0]) if series else 0

    def render(self) -> list[str]:
        lines: list[str] = []
        for key, (counts, total) in sorted(self.series.items()):
            cumulative = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                cumulative += n
                le = ("le", "+Inf" if bound == math.inf else _number(bound))
                labels = _labels((*self.labels, le[0]), (*key, le[1]))
                lines.append(f"{self.name}_bucket{labels} {cumulative}")
            lines.append(f"{self.name}_sum{_labels(self.labels, key)} {_number(total)}")
            lines.append(f"{self.name}_count{_labels(self.labels, key)} {cumulative}")
        return lines


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = (f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + ",".join(pairs) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    """The process's counters and histograms, in the Prometheus text exposition format."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # scrapes read while turns write; logs may come off-loop
        self.reset()

    def reset(self) -> None:
        self.turns = Counter("bosun_turns_total", "Turns that ended, by status.", ["status"])
        self.turn_errors = Counter(
            "bosun_turn_errors_total", "Failed or cancelled turns, by error code.", ["code"]
        )
        self.tokens = Counter(
            "bosun_model_tokens_total", "Model tokens used by turns, by kind.", ["kind"]
        )
        self.cost = Counter(
            "bosun_model_cost_usd_micros_total", "Model cost of turns in micro-dollars."
        )
        self.turn_duration = Histogram(
            "bosun_turn_duration_seconds", "Wall time of a turn (or of a resumed part).",
            TURN_BUCKETS_S,
        )  # fmt: skip
        self.tool_executions = Counter(
            "bosun_tool_executions_total", "Tool calls through the runner, by outcome.",
            ["tool", "outcome"],
        )  # fmt: skip
        self.tool_duration = Histogram(
            "bosun_tool_duration_seconds", "Run time of tool calls that ran.", TOOL_BUCKETS_S,
            ["tool"],
        )  # fmt: skip

    @property
    def families(self) -> tuple[Counter | Histogram, ...]:
        return (
            self.turns,
            self.turn_errors,
            self.tokens,
            self.cost,
            self.turn_duration,
            self.tool_executions,
            self.tool_duration,
        )

    def turn_ended(
        self, status: TurnStatus, code: str | None, usage: Usage, seconds: float
    ) -> None:
        with self._lock:
            self.turns.inc(status=status)
            if code is not None:
                self.turn_errors.inc(code=code)
            for kind in TOKEN_KINDS:
                self.tokens.inc(getattr(usage, f"{kind}_tokens"), kind=kind)
            self.cost.inc(usage.cost_usd_micros)
            self.turn_duration.observe(seconds)

    def tool_executed(self, tool: str, outcome: str, duration_ms: int) -> None:
        with self._lock:
            self.tool_executions.inc(tool=tool, outcome=outcome)
            # Refused, pending and replayed calls did not run (0 ms); nor, as far as the
            # log line tells, did one that took under half a millisecond.
            if duration_ms > 0:
                self.tool_duration.observe(duration_ms / 1000, tool=tool)

    def render(self) -> str:
        with self._lock:
            lines = [line for family in self.families for line in family.header() + family.render()]
        return "\n".join(lines) + "\n"


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
    the tool, its call id and ``confirm`` (``destructive``, ``always`` or ``pick``)."""
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
            confirm="pick" if call.needs == "pick" else call.confirm,
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
