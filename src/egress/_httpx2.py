"""The same guard for httpx2 (the fork of httpx the MCP SDK speaks; httpcore2 under
it): see ``egress._httpx``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from egress._policy import EgressPolicy
from egress._resolve import connect_checked

_SocketOption = Any  # httpcore2's SOCKET_OPTION union, passed through unread


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's anyio backend, connecting only to addresses ``policy`` allows."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        async def connect(address: str, left: float | None) -> httpcore2.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                address, port, timeout=left, local_address=local_address,
                socket_options=socket_options,
            )  # fmt: skip

        try:
            return await connect_checked(
                host, port, self._policy, timeout_s=timeout, connect=connect,
                failed=httpcore2.ConnectError,
            )  # fmt: skip
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"resolving the host took over {timeout} s") from exc
        except OSError as exc:  # the resolver's (gaierror): as httpcore2 reports it
            raise httpcore2.ConnectError(str(exc)) from exc

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport (its defaults: TLS verified, HTTP/1.1, its pool limits) over a
    ``GuardedBackend``. httpx2 takes no network backend, so the pool is replaced."""

    def __init__(self, policy: EgressPolicy) -> None:
        super().__init__()
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=100,  # httpx's default limits
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(policy),
        )


def httpx2_client(policy: EgressPolicy, **kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for requests made on a tenant's behalf: guarded, not
    following redirects unless asked (each hop is checked all the same), and deaf to
    ``HTTP(S)_PROXY`` (a proxy would connect where the check cannot see)."""
    kwargs.setdefault("follow_redirects", False)
    return httpx2.AsyncClient(transport=GuardedTransport(policy), trust_env=False, **kwargs)
