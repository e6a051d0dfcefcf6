"""The process's tracing state: a tracer when tracing is on, ``None`` when it is off.

Every helper in this package reads ``STATE.tracer`` first and returns at once when it is
``None``, so a server with no ``OTEL_*`` configuration pays one attribute read per span
and never imports the SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram
    from opentelemetry.trace import Tracer

SEMCONV_VERSION = "1.41.0"
"""The OpenTelemetry semantic conventions version whose GenAI spans and metrics Bosun
emits (the GenAI conventions are still marked Development)."""
SCOPE = "bosun"


def _keep(value: Any) -> Any:
    return value


@dataclass(slots=True)
class TracingState:
    """What ``configure`` (or a test's ``use``) installed."""

    tracer: Tracer | None = None
    token_usage: Histogram | None = None
    duration: Histogram | None = None
    capture_content: bool = False
    scrub: Callable[[Any], Any] = field(default=_keep)
    shutdown: Callable[[], None] | None = None
    flush: Callable[[], None] | None = None


STATE = TracingState()


def active() -> bool:
    """Whether anything is traced or measured: callers skip building attributes if not."""
    return STATE.tracer is not None or STATE.duration is not None
