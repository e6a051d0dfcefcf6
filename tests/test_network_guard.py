"""The suite's guard: reaching any host but this machine fails loudly."""

from __future__ import annotations

import socket

import httpx
import pytest

from conftest import NetworkBlockedError


def test_a_remote_host_is_refused(_no_network: list[str]) -> None:
    with pytest.raises(httpx.ConnectError, match=r"must not reach 'api\.anthropic\.com'"):
        httpx.get("https://api.anthropic.com/v1/messages")
    with pytest.raises(NetworkBlockedError):
        socket.create_connection(("198.51.100.7", 443), timeout=1)
    assert _no_network == ["api.anthropic.com", "198.51.100.7"]
    _no_network.clear()  # the attempts were the point of this test


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=1):
            pass
