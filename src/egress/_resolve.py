"""Resolving a host and checking every address it resolves to, before a connection is
made (``connect_checked``, the network backends' one path) or a URL is saved
(``check_url``, at registration).

Resolution goes through ``loop.getaddrinfo`` (the system resolver, in a thread), so the
address checked is the address connected to: a name that resolved to a public address
when it was registered and to ``127.0.0.1`` later (DNS rebinding) is refused then.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from egress._policy import EgressPolicy, EgressRefused, IPAddress, literal_address

REGISTRATION_TIMEOUT_S = 5.0
"""How long ``check_url`` waits for the resolver before leaving the check to connect time."""
DEFAULT_PORTS = {"http": 80, "https": 443}
_Stream = TypeVar("_Stream")


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` stands for, in the resolver's order (a literal: itself)."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found = (
        ipaddress.ip_address(sockaddr[0])
        for family, _type, _proto, _name, sockaddr in infos
        if family in (socket.AF_INET, socket.AF_INET6)
    )
    return list(dict.fromkeys(found))


async def checked_addresses(host: str, port: int, policy: EgressPolicy) -> list[IPAddress]:
    """``host``'s addresses, or ``EgressRefused`` if any of them is refused (a name with
    one private address among public ones is refused whole: any may be picked)."""
    addresses = await resolve(host, port)
    for address in addresses:
        kind = policy.refusal(address)
        if kind is not None:
            raise EgressRefused(kind)
    return addresses


async def check_url(
    url: str, policy: EgressPolicy, *, timeout_s: float = REGISTRATION_TIMEOUT_S
) -> None:
    """Refuse (``EgressRefused``) a URL whose host is or resolves to a refused address;
    ``ValueError`` if it is not an http(s) URL with a host.

    For a URL being saved: a name that does not resolve now (or not within
    ``timeout_s``) passes, since every connection is checked again when it is made. No
    connection is opened, so no port is probed."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme)  # may raise
    if not host or port is None or parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    if policy.allow_private:
        return
    try:
        async with asyncio.timeout(timeout_s):
            await checked_addresses(host, port, policy)
    except (OSError, TimeoutError):  # unresolvable now: connect time decides
        return


async def connect_checked(
    host: str,
    port: int,
    policy: EgressPolicy,
    *,
    timeout_s: float | None,
    connect: Callable[[str, float | None], Awaitable[_Stream]],
    failed: type[Exception],
) -> _Stream:
    """``connect(address, timeout_s)`` to the first of ``host``'s checked addresses that
    answers (a ``failed`` connection tries the next), within ``timeout_s`` in all.

    Raises ``EgressRefused`` before any connection if one address is refused; resolver
    errors (``OSError``, ``TimeoutError``) are the caller's to map."""
    if policy.allow_private:
        return await connect(host, timeout_s)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    async with asyncio.timeout(timeout_s):
        addresses = await checked_addresses(host, port, policy)
    error: Exception | None = None
    for address in addresses:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        try:
            return await connect(str(mapped or address), left)
        except failed as exc:
            error = exc
    assert error is not None, "getaddrinfo returns at least one address or raises"
    raise error
