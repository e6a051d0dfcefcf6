"""structlog set-up: JSON in production, pretty in a terminal, and nothing private.

The scrubbing processor runs last before rendering, so whatever a module binds, message
text, prompts, tool inputs/outputs, tokens and keys never leave the process.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

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


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return _SECRET_PATTERN.sub(SCRUBBED, value)
    if isinstance(value, MutableMapping):
        return _scrub_mapping(value)
    if isinstance(value, list | tuple):
        return [_scrub_value(v) for v in value]
    return value


def configure_logging(
    *, fmt: Literal["auto", "json", "console"] = "auto", level: str = "info"
) -> None:
    """Configure structlog (and route stdlib logging through the same renderer)."""
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
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
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
