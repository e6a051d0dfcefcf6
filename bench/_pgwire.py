"""Count what clients ask of PostgreSQL: a TCP proxy that reads the wire as it forwards it.

Point a server's database URL at ``counter.port`` and every byte goes through unchanged;
the message headers are read on the way (no timing: a count is the same on a loaded
machine, so tests may assert on it):

- **round trips**: the points where a client waits for the server: a ``Sync`` (the end of
  an extended-query pipeline: Parse/Bind/Execute...), a simple ``Query``, or a ``Flush``
  (asyncpg prepares a statement with Parse, Describe, Flush and waits for the answer);
- **statements**: ``Execute`` and ``Query`` messages;
- **notifies**: ``NOTIFY`` statements and ``pg_notify(...)`` calls run (a prepared
  statement is known by the text its ``Parse`` gave it, so each ``Bind`` of it counts);
- **transactions**: what PostgreSQL ran as one, read from the server's ``ReadyForQuery``
  status: an explicit ``BEGIN`` ... ``COMMIT``/``ROLLBACK``, or one Sync's (or Query's)
  statements outside one (an implicit transaction, e.g. a read in autocommit);
  **explicit**: the first kind alone.

The proxy answers the client's ``SSLRequest`` (and GSS request) with ``N`` itself, so the
stream stays readable; asyncpg's default ``sslmode=prefer`` then goes on in plain text.
Frontend messages after the start-up are a type byte and an int32 length; the start-up,
SSL and cancel requests have no type byte. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections import deque
from dataclasses import asdict, dataclass, fields
from types import TracebackType
from typing import cast

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_NOTIFY = re.compile(rb"(?:^|;)\s*notify\b|\bpg_notify\s*\(", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PgCounts:
    """The counters at one moment; subtract two to get what happened between them."""

    round_trips: int = 0
    statements: int = 0
    notifies: int = 0
    transactions: int = 0
    explicit: int = 0

    def __sub__(self, other: PgCounts) -> PgCounts:
        return PgCounts(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


class _Wire:
    """One connection's parser: typed messages split out of a byte stream."""

    def __init__(self, *, typed: bool) -> None:
        self.typed = typed  # the server's stream always is; the client's after its start-up
        self._buffer = bytearray()

    def untyped(self, data: bytes) -> tuple[bytes, bytes, bytes]:
        """Before the start-up: (what to forward, what to answer the client with, the rest
        of ``data`` once typed messages begin)."""
        self._buffer += data
        forward, reply = b"", b""
        while not self.typed and len(self._buffer) >= 8:
            length = int.from_bytes(self._buffer[:4], "big")
            if len(self._buffer) < length:
                break
            message = bytes(self._buffer[:length])
            code = int.from_bytes(message[4:8], "big")
            del self._buffer[:length]
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                reply += b"N"  # no encryption: keep the stream readable
                continue
            forward += message
            self.typed = code != _CANCEL_REQUEST
        rest = b""
        if self.typed:
            rest, self._buffer = bytes(self._buffer), bytearray()
        return forward, reply, rest

    def messages(self, data: bytes, wanted: bytes) -> list[tuple[int, bytes]]:
        """The typed messages ``data`` completes: (type, body), the body only for the
        types in ``wanted`` (empty for the others, which are skipped uncopied)."""
        buffer = self._buffer
        buffer += data
        found, at = [], 0
        while len(buffer) - at >= 5:
            end = at + 1 + int.from_bytes(buffer[at + 1 : at + 5], "big")
            if len(buffer) < end:
                break
            kind = buffer[at]
            found.append((kind, bytes(buffer[at + 5 : end]) if kind in wanted else b""))
            at = end
        del buffer[:at]
        return found


def _cstring(body: bytes, at: int) -> tuple[bytes, int]:
    end = body.index(b"\0", at)
    return body[at:end], end + 1


class _Connection:
    """What one client connection did: its prepared statements and its pending Syncs."""

    def __init__(self, counter: PgCounter) -> None:
        self._counter = counter
        self.client = _Wire(typed=False)
        self.server = _Wire(typed=True)
        self._notifying: dict[bytes, bool] = {}  # prepared statement name -> runs a NOTIFY
        self._executed = False  # a statement ran since the last Sync or Query
        self._pending: deque[bool] = deque()  # per Sync/Query sent: did it run a statement
        self._status = b"I"

    def from_client(self, messages: list[tuple[int, bytes]]) -> None:
        counter = self._counter
        for kind, body in messages:
            if kind == ord("Q"):
                counter.round_trips += 1
                counter.statements += 1
                counter.notifies += len(_NOTIFY.findall(body))
                self._pending.append(True)
                self._executed = False
            elif kind == ord("P"):
                name, at = _cstring(body, 0)
                self._notifying[name] = bool(_NOTIFY.search(_cstring(body, at)[0]))
            elif kind == ord("B"):
                statement = _cstring(body, _cstring(body, 0)[1])[0]
                counter.notifies += self._notifying.get(statement, False)
            elif kind == ord("E"):
                counter.statements += 1
                self._executed = True
            elif kind == ord("H"):
                counter.round_trips += 1
            elif kind == ord("S"):
                counter.round_trips += 1
                self._pending.append(self._executed)
                self._executed = False

    def from_server(self, messages: list[tuple[int, bytes]]) -> None:
        """``ReadyForQuery``: a transaction ended when the server is idle again after one,
        or after statements that ran outside one."""
        for _kind, body in messages:
            status = body[:1]
            executed = self._pending.popleft() if self._pending else False
            if status == b"I" and self._status != b"I":
                self._counter.transactions += 1
                self._counter.explicit += 1
            elif status == b"I" and executed:
                self._counter.transactions += 1
            self._status = status


class PgCounter:
    """A counting proxy on 127.0.0.1 in front of ``upstream_host:upstream_port``::

    async with PgCounter("127.0.0.1", 5432) as counter:
        url = f"postgresql+asyncpg://user:pw@127.0.0.1:{counter.port}/db"
        before = counter.snapshot()
        ...
        print((counter.snapshot() - before).round_trips)

    Built on asyncio protocols, not streams: a chunk costs one callback and one write
    (still tens of microseconds of CPU per round trip, two more trips through the kernel:
    a bench should run it in a process of its own and say what it cost).
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self.open: set[_ClientSide] = set()
        self.port = 0
        self.round_trips = 0
        self.statements = 0
        self.notifies = 0
        self.transactions = 0
        self.explicit = 0

    def snapshot(self) -> PgCounts:
        return PgCounts(
            self.round_trips, self.statements, self.notifies, self.transactions, self.explicit
        )

    async def __aenter__(self) -> PgCounter:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ClientSide(self), "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for side in list(self.open):
            side.close()
        await self._server.wait_closed()


class _ClientSide(asyncio.Protocol):
    """A client's connection: what it sends is counted, then forwarded upstream."""

    def __init__(self, counter: PgCounter) -> None:
        self._counter = counter
        self.connection = _Connection(counter)
        self.transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._early: list[bytes] = []  # what came before the server's end was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport = transport
        self._counter.open.add(self)
        transport.pause_reading()  # until the server's end is connected (a hint to uvloop)
        self._connecting = asyncio.ensure_future(self._connect(transport))

    async def _connect(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(
                lambda: _ServerSide(self), *self._counter.upstream
            )
        except OSError:
            transport.close()
            return
        self._upstream = upstream
        if transport.is_closing():
            upstream.close()
            return
        for data in self._early:
            self.data_received(data)
        transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self._upstream is None:
            self._early.append(data)
            return
        wire = self.connection.client
        if not wire.typed:
            forward, reply, data = wire.untyped(data)
            self.transport.write(reply)
            self._upstream.write(forward)
        if data:
            self._upstream.write(data)  # counted after: the answer cannot come before
            self.connection.from_client(wire.messages(data, b"QPB"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._counter.open.discard(self)
        if self._upstream is not None:
            self._upstream.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self._connecting is not None:
            self._connecting.cancel()

    # Flow control: a slow reader on one end pauses reading from the other.
    def pause_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.resume_reading()


class _ServerSide(asyncio.Protocol):
    """The server's end of a client's connection: forwarded back, ReadyForQuery read."""

    def __init__(self, client: _ClientSide) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        assert self._client.transport is not None
        self._client.transport.write(data)
        connection = self._client.connection
        connection.from_server([m for m in connection.server.messages(data, b"Z") if m[0] == 90])

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.close()

    def pause_writing(self) -> None:
        if self._client.transport is not None:
            self._client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._client.transport is not None:
            self._client.transport.resume_reading()


async def _serve_stdio(host: str, port: int) -> None:
    """``python bench/_pgwire.py HOST PORT``: prints ``port N``, then answers every line
    read on stdin with the counts as JSON (a bench keeps the proxy out of its own process,
    so neither slows the other)."""
    loop = asyncio.get_running_loop()
    async with PgCounter(host, port) as counter:
        print(f"port {counter.port}", flush=True)
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(json.dumps(asdict(counter.snapshot())), flush=True)


if __name__ == "__main__":
    try:  # uvloop when installed: the proxy's own cost per message is then smaller
        from uvloop import run
    except ImportError:
        from asyncio import run
    with contextlib.suppress(KeyboardInterrupt):
        run(_serve_stdio(sys.argv[1], int(sys.argv[2])))
