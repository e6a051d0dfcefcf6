"""One stable code per kind of provider failure (API.md), whatever the SDK said."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from providers._model import ProviderErrorCode

_BY_ERROR_TYPE: dict[str, ProviderErrorCode] = {
    "rate_limit_error": "provider_rate_limited",
    "overloaded_error": "provider_overloaded",
    "authentication_error": "provider_unauthorized",
    "permission_error": "provider_unauthorized",
    "invalid_request_error": "provider_invalid_request",
    "not_found_error": "provider_invalid_request",
    "request_too_large": "provider_invalid_request",
    "api_error": "provider_unavailable",
    "timeout_error": "provider_timeout",
}


def code_for(status: int | None, error_type: str | None = None) -> ProviderErrorCode:
    """Classify by the provider's error type when it names one, else by HTTP status.

    The type matters for errors sent inside a 200 stream (Anthropic's ``event: error``).
    """
    if error_type in _BY_ERROR_TYPE:
        return _BY_ERROR_TYPE[error_type]
    if status == 429:
        return "provider_rate_limited"
    if status == 529:
        return "provider_overloaded"
    if status in (401, 403):
        return "provider_unauthorized"
    if status in (408, 504):
        return "provider_timeout"
    if status is not None and 400 <= status < 500:
        return "provider_invalid_request"
    return "provider_unavailable"


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """The wait a provider asked for: ``retry-after-ms``, or ``retry-after`` in seconds or
    as an HTTP date; ``None`` when it named none (or nonsense)."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)
