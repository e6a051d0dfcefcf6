"""Count PostgreSQL round trips by statement: a TCP proxy on 127.0.0.1 reading the client's
messages, in the test's own event loop (``bench/_pgwire.py``'s ``PgCounter`` is the bench's
separate-process counter; the two are to be made one).

Point the app's database URL at ``WireCounter.url(...)``: every byte goes through to the
real server unchanged, and the frontend messages are parsed on the way. A round trip is a
point where the client waits for the server: a ``Sync`` (the end of an extended-query
pipeline: Parse/Bind/Execute...) or a simple ``Query``. Beside them it counts
transactions (``BEGIN``), commits and ``NOTIFY``/``pg_notify`` statements, and sorts round
trips by the statement they carry (``kinds``: the first words of its SQL; a prepared
statement bound again is known by the text its ``Parse`` gave it on that connection).

The proxy refuses SSL (it answers the client's ``SSLRequest`` with ``N`` itself), so the
stream stays readable; asyncpg's default ``prefer`` then goes on in plain text. Stdlib
only: the benches import it (``from _pgtrace import WireCounter``) and so do the tests
(with ``bench/`` on ``sys.path``). It counts, it does not time: a count is the same on a
loaded machine, so a test may assert on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_WORDS = re.compile(r"[A-Za-z_]+")
_NOTIFY = re.compile(r"\bnotify\b|\bpg_notify\b", re.IGNORECASE)


@dataclass
class WireCounts:
    """What the clients sent, from ``reset`` (or the start) on."""

    round_trips: int = 0
    transactions: int = 0
    commits: int = 0
    notifies: int = 0
    kinds: Counter[str] = field(default_factory=Counter)

    def copy(self) -> WireCounts:
        return WireCounts(
            self.round_trips, self.transactions, self.commits, self.notifies, Counter(self.kinds)
        )

    def __sub__(self, other: WireCounts) -> WireCounts:
        kinds = Counter(self.kinds)
        kinds.subtract(other.kinds)
        return WireCounts(
            self.round_trips - other.round_trips,
            self.transactions - other.transactions,
            self.commits - other.commits,
            self.notifies - other.notifies,
            +kinds,
        )


def kind(sql: str) -> str:
    """A statement's kind: its verb and the table it names (``INSERT events``, ``BEGIN``);
    a CTE by the first write it makes (``WITH UPDATE sessions``)."""
    words = [w.lower() for w in _WORDS.findall(sql)]
    if not words:
        return "?"
    verb = words[0].upper()
    if verb == "WITH":
        for at, word in enumerate(words):
            if word in ("insert", "update", "delete") and words[at - 1] == "as":
                return "WITH " + kind(" ".join(words[at:]))
    if "pg_notify" in words and verb == "SELECT":
        return "SELECT pg_notify"
    anchor = {"insert": "into", "update": "update", "delete": "from", "select": "from"}
    at = words.index(anchor[words[0]]) if anchor.get(words[0]) in words else -1
    return f"{verb} {words[at + 1]}" if 0 <= at < len(words) - 1 else verb


class _Connection:
    """One client connection's parser: statement texts by name, the pending pipeline."""

    def __init__(self, record: Callable[[list[str]], None]) -> None:
        self._record = record
        self._buffer = b""
        self._started = False
        self._prepared: dict[str, str] = {}
        self._pipeline: list[str] = []

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """Parse what arrived: the bytes to forward to the server, and those the proxy
        answers the client with itself (``N`` to an SSL or GSS request, not forwarded)."""
        forward = data if self._started else b""
        reply = b""
        self._buffer += data
        while not self._started and len(self._buffer) >= 8:
            (length, code) = struct.unpack("!ii", self._buffer[:8])
            if len(self._buffer) < length:
                return forward, reply
            message, self._buffer = self._buffer[:length], self._buffer[length:]
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                reply += b"N"
                continue
            forward += message
            self._started = code != _CANCEL_REQUEST
            if self._started:
                forward += self._buffer  # the rest goes through as it came
        while self._started and len(self._buffer) >= 5:
            (length,) = struct.unpack("!i", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                break
            tag, body = self._buffer[:1], self._buffer[5 : 1 + length]
            self._buffer = self._buffer[1 + length :]
            self._message(tag, body)
        return forward, reply

    def _message(self, tag: bytes, body: bytes) -> None:
        if tag == b"Q":
            self._pipeline.append(_cstring(body, 0)[0])
            self._round_trip()
        elif tag == b"P":
            name, at = _cstring(body, 0)
            sql, _ = _cstring(body, at)
            if name:
                self._prepared[name] = sql
            self._pipeline.append(sql)
        elif tag == b"B":
            _portal, at = _cstring(body, 0)
            statement, _ = _cstring(body, at)
            self._pipeline.append(self._prepared.get(statement, "?"))
        elif tag == b"S":
            self._round_trip()

    def _round_trip(self) -> None:
        sqls, self._pipeline = self._pipeline, []
        # A Parse and the Bind of the same statement are one statement.
        self._record([s for i, s in enumerate(sqls) if i == 0 or s != sqls[i - 1]])


def _cstring(body: bytes, at: int) -> tuple[str, int]:
    end = body.index(b"\0", at)
    return body[at:end].decode("utf-8", "replace"), end + 1


class WireCounter:
    """A counting proxy in front of ``host:port`` (``await start()`` in a running loop, or
    ``start_thread()`` for a server in another process)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5432) -> None:
        self._target = (host, port)
        self._lock = threading.Lock()
        self._counts = WireCounts()
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.trace: list[str] | None = None
        """Set it to a list to record every round trip's kind, in order (to debug)."""

    @classmethod
    def for_url(cls, url: str) -> WireCounter:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 5432)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}" if credentials else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def counts(self) -> WireCounts:
        with self._lock:
            return self._counts.copy()

    def reset(self) -> None:
        with self._lock:
            self._counts = WireCounts()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    async def __aenter__(self) -> WireCounter:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    def start_thread(self) -> None:
        """Serve on a thread of its own with its own loop (a bench's server is a child
        process; the bench's loop may be busy)."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="pgwire", daemon=True)
        self._thread.start()
        ready.wait()

    def stop_thread(self) -> None:
        if self._loop is not None and self._thread is not None:
            asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def _record(self, executed: list[str]) -> None:
        with self._lock:
            counts = self._counts
            counts.round_trips += 1
            what = " + ".join(kind(s) for s in executed) or "sync"
            counts.kinds[what] += 1
            if self.trace is not None:
                self.trace.append(what)
            for sql in executed:
                head = sql.split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
                if head in ("BEGIN", "START"):
                    counts.transactions += 1
                elif head in ("COMMIT", "END"):
                    counts.commits += 1
                if _NOTIFY.search(sql):
                    counts.notifies += 1

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self._target)
        except OSError:
            client_w.close()
            return
        parser = _Connection(self._record)
        tasks = (
            asyncio.create_task(_pump_client(parser, client_r, client_w, server_w)),
            asyncio.create_task(_pump(server_r, client_w)),
        )
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (client_w, server_w):
            writer.close()


async def _pump_client(
    parser: _Connection,
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    server_w: asyncio.StreamWriter,
) -> None:
    while data := await client_r.read(65536):
        forward, reply = parser.feed(data)
        if reply:
            client_w.write(reply)
            await client_w.drain()
        if forward:
            server_w.write(forward)
            await server_w.drain()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
