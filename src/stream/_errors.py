"""The error envelope: every failure leaves as ``{"error": {code, message, trace_id}}``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import structlog
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    SerializationException,
    ValidationException,
)
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

import telemetry
from egress import EgressPolicy, EgressRefused, check_url
from providers import ModelError, ProviderErrorCode

ErrorCode = Literal[
    "unauthorized",
    "forbidden",
    "forbidden_role",
    "forbidden_parent",
    "not_found",
    "invalid_request",
    "payload_too_large",
    "rate_limited",
    "idempotency_conflict",
    "budget_exceeded",
    "agent_disabled",
    "not_undoable",
    "no_inverse",
    "already_undone",
    "tool_already_resolved",
    "tool_superseded",
    "tool_expired",
    "invalid_pick",
    "invalid_resume",
    "already_answered",
    "nothing_to_answer",
    "expired",
    "agent_exists",
    "agent_mismatch",
    "agent_paused",
    "agent_rate_limited",
    "turn_in_progress",
    "default_agent",
    "tool_blocked",
    "invalid_schedule",
    "unknown_tool",
    "unknown_source",
    "unknown_role",
    "model_not_allowed",
    "invalid_webhook_url",
    "invalid_webhook_secret",
    "webhook_limit",
    "subscription_limit",
    "invalid_toolset",
    "stdio_disabled",
    "secrets_unavailable",
    "egress_refused",
    "invalid_document",
    "openapi_unreachable",
    "toolset_exists",
    "internal",
]
_log = structlog.get_logger("bosun.http")


class ApiError(Exception):
    """A failure with a stable code, raised by handlers and turned into the envelope."""

    def __init__(
        self,
        status: int,
        code: ErrorCode | ProviderErrorCode,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code: ErrorCode | ProviderErrorCode = code
        self.message = message
        self.headers = dict(headers or {})


def provider_error(exc: ModelError) -> ApiError:
    """A provider failure met while answering a request: 504 for a timeout, else 502, with
    the provider's ``Retry-After`` when it sent one."""
    status = 504 if exc.code == "provider_timeout" else 502
    wait = exc.retry_after_s
    headers = {} if wait is None else {"Retry-After": str(max(1, math.ceil(wait)))}
    return ApiError(status, exc.code, exc.message, headers=headers)


async def check_egress(url: str, policy: EgressPolicy) -> None:
    """422 ``egress_refused`` for a URL Bosun may not send to (a webhook's, an MCP
    server's): its host is, or resolves to, an internal address. Nothing is connected.
    A malformed URL passes: the route's own check of it says what is wrong."""
    try:
        await check_url(url, policy)
    except ValueError:
        return
    except EgressRefused as exc:
        message = (
            f"{exc.message[0].upper()}{exc.message[1:]}: Bosun makes no requests to "
            "internal addresses; use a public URL"
        )
        raise ApiError(422, "egress_refused", message) from None


def trace_id_of(request: Request[Any, Any, Any]) -> str:
    """The request's trace id: its ``traceparent``'s (the caller's trace goes on), else a
    new one; made on first use and kept in the request state."""
    trace_id: str | None = request.state.get("trace_id")
    if trace_id is None:
        trace_id = telemetry.trace_id_from(request.headers.get("traceparent"))
        trace_id = trace_id or telemetry.new_trace_id()
        request.state["trace_id"] = trace_id
    return trace_id


def envelope(
    request: Request[Any, Any, Any],
    status: int,
    code: str,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
) -> Response[Any]:
    body = {"error": {"code": code, "message": message, "trace_id": trace_id_of(request)}}
    return Response(content=body, status_code=status, headers=headers)


def _api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return envelope(request, exc.status, exc.code, exc.message, headers=exc.headers)


def _validation(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    details = [d for d in (exc.extra if isinstance(exc.extra, list) else []) if isinstance(d, dict)]
    problems = "; ".join(
        f"{d.get('key') or 'body'} ({getattr(d.get('source'), 'value', 'body')}): "
        f"{d.get('message')}"
        for d in details
    )
    message = f"Invalid request: {problems}" if problems else f"Invalid request: {exc.detail}"
    return envelope(request, 400, "invalid_request", message)


_HTTP_CODES: dict[type[HTTPException], tuple[str, str]] = {
    NotAuthorizedException: (
        "unauthorized",
        "Missing, invalid or expired bearer token: send Authorization: Bearer <JWT>",
    ),
    PermissionDeniedException: ("forbidden", "Your role may not do this"),
    NotFoundException: ("not_found", "No such resource"),
    RequestEntityTooLarge: ("payload_too_large", "Request body exceeds the size limit"),
}


def _http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    headers = exc.headers  # a 405's Allow, say
    for cls, (code, message) in _HTTP_CODES.items():
        if isinstance(exc, cls):
            return envelope(request, exc.status_code, code, message, headers=headers)
    if exc.status_code >= 500:
        return _internal(request, exc)
    if isinstance(exc.__cause__, SerializationException):
        message = f"Request body is not valid JSON: {exc.detail}"
        return envelope(request, exc.status_code, "invalid_request", message, headers=headers)
    return envelope(request, exc.status_code, "invalid_request", exc.detail, headers=headers)


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    _log.error("http.internal_error", trace_id=trace_id_of(request), error_type=type(exc).__name__)
    return envelope(
        request,
        HTTP_500_INTERNAL_SERVER_ERROR,
        "internal",
        "Internal error; quote the trace id when reporting it",
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ApiError: _api_error,
    ValidationException: _validation,
    HTTPException: _http,
    Exception: _internal,
}
