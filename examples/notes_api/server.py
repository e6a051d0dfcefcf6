"""A tiny notes API that Bosun calls as an OpenAPI toolset (docs/openapi.md).

It serves its OpenAPI document at ``/openapi.json`` and four operations (list, get,
create, delete), and applies its own permissions to the identity on every request:

- ``--secret`` (or ``NOTES_SECRET``): the toolset's signing secret, which Bosun returned
  once when the toolset was created. Bosun signs a JWT per call (HS256, ``aud`` = the
  toolset's name, a minute at most) naming the user (``sub``), ``org``, ``role``,
  ``agent`` and ``turn``.
- ``--forward-secret`` (or ``NOTES_FORWARD_SECRET``): the secret of the tokens users
  sign in with (Bosun's ``jwt_secret`` too), for a toolset in ``forward`` mode.

A token that is missing, forged, expired or for another audience is refused with 401.
Notes are kept in memory, per org; members may not delete (403).

    python examples/notes_api/server.py --port 8081 --secret "$NOTES_SECRET"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt

DOCUMENT = Path(__file__).with_name("openapi.json")
NOTE = re.compile(r"^/notes/([^/]+)$")


@dataclass
class Notes:
    """The API's state: the secrets it trusts, its notes, and every request it accepted
    (method, path, claims) so a test can see who each call acted for."""

    secret: str | None = None
    forward_secret: str | None = None
    audience: str = "notes"
    delay_s: float = 0.0
    """How long each operation waits before it answers (to see a slow API time out)."""
    failures: int = 0
    """How many of the next operations answer 503 (to see a failing API retried)."""
    notes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    received: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    """The W3C ``traceparent`` of every accepted request: a host continues Bosun's trace."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def identity(self, header: str) -> dict[str, Any]:
        """The verified claims of ``Authorization: Bearer <jwt>`` (``PermissionError``)."""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise PermissionError("no bearer token")
        if self.secret:
            try:
                return jwt.decode(
                    token, self.secret, algorithms=["HS256"], audience=self.audience,
                    options={"require": ["exp", "sub", "org"]},
                )  # fmt: skip
            except jwt.InvalidTokenError as exc:
                if not self.forward_secret:
                    raise PermissionError(str(exc)) from None
        if self.forward_secret:
            try:
                return jwt.decode(
                    token, self.forward_secret, algorithms=["HS256"],
                    options={"require": ["exp", "sub", "org"], "verify_aud": False},
                )  # fmt: skip
            except jwt.InvalidTokenError as exc:
                raise PermissionError(str(exc)) from None
        raise PermissionError("this API trusts no tokens (start it with --secret)")


class Handler(BaseHTTPRequestHandler):
    """The routes; ``self.server.notes`` is the state."""

    server: _Server

    def do_GET(self) -> None:
        if self.path == "/openapi.json":
            self._send(200, json.loads(DOCUMENT.read_text()))
            return
        claims = self._who()
        if claims is None:
            return
        url = urlsplit(self.path)
        mine = self.server.notes.notes.setdefault(claims["org"], {})
        if url.path == "/notes":
            q = parse_qs(url.query).get("q", [""])[0]
            self._send(200, [n for n in reversed(mine.values()) if q in n["title"]])
        elif (match := NOTE.match(url.path)) and match[1] in mine:
            self._send(200, mine[match[1]])
        else:
            self._send(404, {"detail": f"No note {url.path.rsplit('/', 1)[-1]!r} here"})

    def do_POST(self) -> None:
        claims = self._who()
        if claims is None:
            return
        if self.path != "/notes":
            self._send(404, {"detail": "No such route"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if not isinstance(body.get("title"), str) or not body["title"]:
            self._send(422, {"detail": "A note needs a title"})
            return
        note = {"id": uuid.uuid4().hex[:8], "title": body["title"],
                "text": str(body.get("text", "")), "author": claims["sub"]}  # fmt: skip
        self.server.notes.notes.setdefault(claims["org"], {})[note["id"]] = note
        self._send(201, note)

    def do_DELETE(self) -> None:
        claims = self._who()
        if claims is None:
            return
        mine = self.server.notes.notes.setdefault(claims["org"], {})
        match = NOTE.match(self.path)
        if match is None or match[1] not in mine:
            self._send(404, {"detail": f"No note {self.path.rsplit('/', 1)[-1]!r} here"})
        elif claims.get("role") == "member":
            self._send(403, {"detail": "Members may not delete notes"})
        else:
            del mine[match[1]]
            self._send(204, None)

    def _who(self) -> dict[str, Any] | None:
        """The caller's verified claims, recorded; ``None`` once it has been answered
        (refused, or a failure on purpose)."""
        notes = self.server.notes
        try:
            claims = notes.identity(self.headers.get("authorization", ""))
        except PermissionError as exc:
            with notes.lock:
                notes.refused.append((self.command, self.path, str(exc)))
            self._send(401, {"detail": f"Unauthorized: {exc}"})
            return None
        with notes.lock:
            notes.received.append((self.command, self.path, claims))
            notes.traceparents.append(self.headers.get("traceparent"))
            failing, notes.failures = notes.failures > 0, max(0, notes.failures - 1)
        time.sleep(notes.delay_s)
        if failing:
            self._send(503, {"detail": "Try again shortly"})
            return None
        return claims

    def _send(self, status: int, body: Any) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if data:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test runs many requests."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, notes: Notes) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.notes = notes

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a caller's timeout) is no error of the API's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(notes: Notes, port: int = 0) -> _Server:
    """Start the API on 127.0.0.1 in a thread (``port`` 0: any free one); ``shutdown()``
    stops it. ``server.server_address[1]`` is the port."""
    server = _Server(port, notes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--secret", default=os.environ.get("NOTES_SECRET"))
    parser.add_argument("--forward-secret", default=os.environ.get("NOTES_FORWARD_SECRET"))
    parser.add_argument("--audience", default="notes", help="the toolset's name in Bosun")
    args = parser.parse_args()
    notes = Notes(secret=args.secret, forward_secret=args.forward_secret, audience=args.audience)
    server = _Server(args.port, notes)
    print(f"notes API on http://127.0.0.1:{args.port} (document: /openapi.json)")
    server.serve_forever()


if __name__ == "__main__":
    main()
