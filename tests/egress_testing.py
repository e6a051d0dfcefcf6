"""For tests of the egress guard: a fake DNS (names the test chooses resolve to the
addresses it chooses, and may change their answer, as a rebinding attacker's would) and
a local HTTP listener that records every request it gets."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

PUBLIC_IP = "93.184.215.14"
"""A public address a fake name may resolve to: checked, never connected to."""


class FakeDns:
    """``socket.getaddrinfo`` answering for the names in ``answers`` (each call takes the
    next answer of its list, the last one repeating; an answer is addresses joined by
    commas; an empty list: no such name); any other host as before (the suite's network
    guard)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: dict[str, list[str]] = {}
        self.asked: list[str] = []
        before = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            name = host.decode() if isinstance(host, bytes) else host
            if name not in self.answers:
                return before(host, port, *args, **kwargs)
            self.asked.append(name)
            queue = self.answers[name]
            if not queue:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            return [_info(address, int(port or 0)) for address in answer.split(",")]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _info(address: str, port: int) -> tuple[Any, ...]:
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))


@dataclass
class Listener:
    """An HTTP server on 127.0.0.1: answers 200, or 302 to ``redirect`` when set."""

    port: int = 0
    redirect: str | None = None
    got: list[str] = field(default_factory=list)


@contextmanager
def listener(redirect: str | None = None) -> Iterator[Listener]:
    rx = Listener(redirect=redirect)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            rx.got.append(f"{self.command} {self.path}")
            self.send_response(302 if rx.redirect else 200)
            if rx.redirect:
                self.send_header("location", rx.redirect)
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rx.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield rx
    finally:
        server.shutdown()
        server.server_close()
