"""httpx clients whose every connection goes through the egress check: a network
backend (httpcore's hook for opening sockets) that resolves the host, checks each
address and connects to a checked one, so redirects, keep-alive reconnects and DNS
changes are all covered. TLS still names the URL's host (SNI and certificate check).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from egress._policy import EgressPolicy
from egress._resolve import connect_checked
from telemetry import inject

_SocketOption = Any  # httpcore's SOCKET_OPTION union, passed through unread


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, connecting only to addresses ``policy`` allows."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        async def connect(address: str, left: float | None) -> httpcore.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                address, port, timeout=left, local_address=local_address,
                socket_options=socket_options,
            )  # fmt: skip

        try:
            return await connect_checked(
                host, port, self._policy, timeout_s=timeout, connect=connect,
                failed=httpcore.ConnectError,
            )  # fmt: skip
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving the host took over {timeout} s") from exc
        except OSError as exc:  # the resolver's (gaierror): as httpcore reports it
            raise httpcore.ConnectError(str(exc)) from exc

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (its defaults: TLS verified, HTTP/1.1, its pool limits) over a
    ``GuardedBackend``. httpx takes no network backend, so the pool is replaced."""

    def __init__(self, policy: EgressPolicy) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=100,  # httpx's default limits
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        inject(request.headers)  # the current span's traceparent, when tracing is on
        # (httpx2, the MCP SDK's client, gets none: it sends from its connection's task,
        # whose context names no call; MCP calls carry it in their ``_meta`` instead)
        return await super().handle_async_request(request)


def httpx_client(policy: EgressPolicy, **kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for requests made on a tenant's behalf: guarded, not
    following redirects unless asked (each hop is checked all the same), and deaf to
    ``HTTP(S)_PROXY`` (a proxy would connect where the check cannot see)."""
    kwargs.setdefault("follow_redirects", False)
    return httpx.AsyncClient(transport=GuardedTransport(policy), trust_env=False, **kwargs)
