"""A request's ``traceparent`` as the parent of what it starts (when tracing is on).

A pure ASGI middleware, outermost, so the caller's span context is current for the whole
request: the turn a chat request starts (its task inherits the context) has its root span
under the caller's span.
"""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

import telemetry

_WANTED = (b"traceparent", b"tracestate")


def traced_requests(app: ASGIApp) -> ASGIApp:
    """``app``, with each HTTP request's trace context current while it is served."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if telemetry.STATE.tracer is None or scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        headers = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope["headers"]
            if key in _WANTED
        }
        with telemetry.incoming(headers):
            await app(scope, receive, send)

    return middleware
