"""The egress guard: every request Bosun makes on a tenant's behalf (outbound webhooks,
HTTP MCP servers, any HTTP tool) reaches public addresses only, unless the operator opens
more (``egress.allow_private``; ``bosun serve --dev``: loopback).

A URL is checked when it is saved (``check_url``: no connection made) and each connection
again when it is opened (``httpx_client``, ``httpx2_client``: the host is resolved, every
address checked, and the connection made to a checked address), so a name that later
resolves elsewhere (DNS rebinding) or a redirect to an internal address is refused too.
A refusal is ``EgressRefused``: its ``str()`` names the class of address, never the port
or anything the target said. docs/notifications.md and docs/mcp.md state the rules.
"""

from typing import TYPE_CHECKING, Any

from egress._policy import (
    PUBLIC_ONLY,
    AddressKind,
    EgressPolicy,
    EgressRefused,
    classify,
    literal_address,
)
from egress._resolve import check_url, checked_addresses, resolve

if TYPE_CHECKING:
    from egress._httpx import httpx_client
    from egress._httpx2 import httpx2_client


def __getattr__(name: str) -> Any:
    """The clients on first use: each imports its HTTP stack, which a process that makes
    no such request (most CLI commands) should not load."""
    if name == "httpx_client":
        from egress._httpx import httpx_client

        return httpx_client
    if name == "httpx2_client":
        from egress._httpx2 import httpx2_client

        return httpx2_client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PUBLIC_ONLY",
    "AddressKind",
    "EgressPolicy",
    "EgressRefused",
    "check_url",
    "checked_addresses",
    "classify",
    "httpx2_client",
    "httpx_client",
    "literal_address",
    "resolve",
]
