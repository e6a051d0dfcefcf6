"""structlog set-up: JSON in production, pretty in a terminal, and nothing private.

The scrubbing processor runs last before rendering, so whatever a module binds, message
text, prompts, tool inputs/outputs, tokens and keys never leave the process. Context
variables (a turn binds its ``trace_id``, ``org_id``, ``session_id`` and ``turn_id``) are
merged into every event. ``tool.executed`` events also feed the ``/metrics`` tool counters
(``turn._observe.count_tool_executions``), ahead of the level filter so that a quieter
log level does not stop them.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from turn import count_tool_executions

if TYPE_CHECKING:
    from bosun.settings import Settings

SCRUBBED = "[scrubbed]"
PRIVATE_KEYS = frozenset(
    {
        "text",
        "message_text",
        "delta",
        "prompt",
        "system",
        "messages",
        "content",
        "input",
        "output",
        "tool_input",
        "tool_output",
        "answer",
        "token",
        "access_token",
        "authorization",
        "api_key",
        "jwt_secret",
        "secret",
        "password",
        "cookie",
    }
)
CREDENTIAL_KEYS = frozenset(
    {"token", "access_token", "authorization", "api_key", "jwt_secret", "secret", "password",
     "cookie"}
)  # fmt: skip
"""The private keys that are credentials (the others are user text)."""
# Bearer tokens, JWTs and provider keys that slip into free-form values.
_SECRET_PATTERN = re.compile(
    r"((?i:bearer)\s+\S+|eyJ[\w-]+\.[\w-]+\.[\w-]+|\bsk-[\w-]{8,}|\bsk-ant-[\w-]{8,})"
)


def scrub(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Drop private fields and mask secrets in every other string value."""
    return _scrub_mapping(event_dict)


def _scrub_mapping(data: MutableMapping[str, Any]) -> EventDict:
    return {
        key: SCRUBBED if str(key).lower() in PRIVATE_KEYS else _scrub_value(value)
        for key, value in data.items()
    }


def scrub_secrets(value: Any) -> Any:
    """``value`` with credentials dropped and secrets masked, its text kept: the log's
    rules for span content the operator opted in to (``telemetry.content``)."""
    return _scrub_value(value, CREDENTIAL_KEYS)


def _scrub_value(value: Any, private: frozenset[str] = PRIVATE_KEYS) -> Any:
    if isinstance(value, str):
        return _SECRET_PATTERN.sub(SCRUBBED, value)
    if isinstance(value, MutableMapping):
        return {
            key: SCRUBBED if str(key).lower() in private else _scrub_value(item, private)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub_value(v, private) for v in value]
    return value


_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def _drop_below(threshold: int) -> Processor:
    """A processor dropping events below ``threshold`` (after the metrics have seen them)."""

    def drop(_logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
        if _METHOD_LEVELS.get(method, logging.CRITICAL) < threshold:
            raise structlog.DropEvent
        return event_dict

    return drop


def quiet_logging(settings: Settings) -> None:
    """For commands that print their own lines: only warnings are logged, unless
    ``BOSUN_LOG_LEVEL`` asks for more."""
    if "log_level" not in settings.model_fields_set:
        configure_logging(fmt=settings.log_format, level="warning")


def configure_logging(
    *, fmt: Literal["auto", "json", "console"] = "auto", level: str = "info"
) -> None:
    """Configure structlog (and route stdlib logging through the same renderer)."""
    threshold: int = logging.getLevelName(level.upper())
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            exception_formatter=structlog.dev.plain_traceback,  # rich would print locals
        )
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        scrub,
    ]
    # Info events reach the metrics processor even when the log level is quieter.
    metered: list[Processor] = [count_tool_executions]
    if threshold > logging.INFO:
        metered.append(_drop_below(threshold))
    structlog.configure(
        processors=[*metered, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(min(threshold, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
