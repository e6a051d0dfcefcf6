"""Which addresses a request made on a tenant's behalf may reach, and why not.

Pure: no I/O. ``classify`` names the class of a non-public address (the IPv4 inside an
IPv4-mapped, 6to4 or NAT64 IPv6 address decides for it), ``literal_address`` reads a
host the way the system resolver reads numbers (``0x7f000001``, ``2130706433``,
``017700000001``, ``127.1``), and ``EgressPolicy`` says which classes the operator opened.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Literal

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressKind = Literal[
    "loopback",
    "unspecified",
    "link_local",
    "private",
    "shared",
    "multicast",
    "reserved",
    "non_public",
]
"""The class of a refused address."""

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix (RFC 6052)
_NUMERIC = re.compile(r"[0-9a-fA-FxX.]+")
_WHAT = {
    "loopback": "a loopback address",
    "unspecified": "an unspecified address (0.0.0.0 or ::)",
    "link_local": "a link-local address",
    "private": "a private address",
    "shared": "a shared (carrier-grade NAT) address",
    "multicast": "a multicast address",
    "reserved": "a reserved address",
    "non_public": "a special-purpose, non-public address",
}


class EgressRefused(Exception):
    """A request Bosun will not make: its host is (or resolves to) a refused address.

    ``str()`` is what a tenant is shown (a delivery's error, an MCP toolset's status):
    the class of the address, never the address, port or any answer from it."""

    code = "egress_refused"

    def __init__(self, kind: AddressKind) -> None:
        self.kind = kind
        self.message = f"the URL resolves to {_WHAT[kind]}"
        super().__init__(f"{self.code}: {self.message}")


@dataclass(frozen=True, slots=True, kw_only=True)
class EgressPolicy:
    """What the operator opened: ``allow_private`` every address (the guard is off),
    ``allow_loopback`` this machine only (``bosun serve --dev``: a local receiver)."""

    allow_private: bool = False
    allow_loopback: bool = False

    def refusal(self, address: IPAddress) -> AddressKind | None:
        """Why ``address`` is refused, or ``None`` when it may be reached."""
        if self.allow_private:
            return None
        kind = classify(address)
        if kind == "loopback" and self.allow_loopback:
            return None
        return kind


def classify(address: IPAddress) -> AddressKind | None:
    """The class of a non-public address; ``None`` for a public (global) one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:  # where the packets really go
            return classify(embedded)
    checks: tuple[tuple[bool, AddressKind], ...] = (
        (address.is_loopback, "loopback"),
        (address.is_unspecified, "unspecified"),
        (address.is_link_local, "link_local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "shared"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
        (not address.is_global, "non_public"),
    )
    return next((kind for hit, kind in checks if hit), None)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 address stands for."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address if it is one in any form the system resolver reads as
    a number (the legacy IPv4 forms included), else ``None``: a name to resolve."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not _NUMERIC.fullmatch(host):
        return None
    try:  # inet_aton's reading is getaddrinfo's: hex, octal, and fewer than four parts
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


PUBLIC_ONLY = EgressPolicy()
"""The default: public addresses only."""
