"""A scripted HTTP server that speaks a provider's wire protocol, for offline tests.

``FakeProvider`` is an ASGI app: every request takes the next scripted ``Exchange`` from
its queue and is recorded in ``requests``. ``FakeServer`` runs one on 127.0.0.1 with
uvicorn in a background thread, so the real SDKs (and a ``bosun serve`` subprocess) talk
to it over a real socket. The provider-specific helpers that build exchanges live in
``_fake_anthropic`` and ``_fake_openai``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Exchange:
    """One scripted HTTP reply.

    ``chunks`` are sent one after the other (a streamed body); ``cut_after`` closes the
    connection after that many chunks without finishing the body (a broken stream).
    ``respond``, when set, makes the chunks from the request's JSON body at request time
    (a reply whose usage depends on what was sent, like a simulated prompt cache).
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    chunks: tuple[bytes, ...] = ()
    cut_after: int | None = None
    chunk_delay_s: float = 0.0
    respond: Callable[[Any], tuple[bytes, ...]] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def json(self) -> dict[str, Any]:
        assert isinstance(self.body, dict), f"request body is not a JSON object: {self.body!r}"
        return self.body


def sse_frames(events: list[tuple[str | None, Any]]) -> tuple[bytes, ...]:
    """Encode ``(event name, JSON data)`` pairs as SSE frames; a ``str`` data is sent raw."""
    frames = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        frames.append(f"{head}data: {payload}\n\n".encode())
    return tuple(frames)


def transcript_chunks(text: str) -> tuple[bytes, ...]:
    """Split a recorded SSE transcript into its frames (one chunk each)."""
    normalised = text.replace("\r\n", "\n").strip("\n")
    return tuple(f"{frame}\n\n".encode() for frame in normalised.split("\n\n") if frame.strip())


def json_exchange(status: int, body: Any, headers: tuple[tuple[str, str], ...] = ()) -> Exchange:
    return Exchange(
        status=status,
        headers=(("content-type", "application/json"), *headers),
        chunks=(json.dumps(body).encode(),),
    )


@dataclass
class FakeProvider:
    """An ASGI app that replays scripted exchanges and records the requests it got."""

    request_id_header: str = "request-id"
    requests: list[RecordedRequest] = field(default_factory=list)
    disconnects: int = 0
    _queue: deque[Exchange] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enqueue(self, *exchanges: Exchange) -> FakeProvider:
        with self._lock:
            self._queue.extend(exchanges)
        return self

    @property
    def pending(self) -> int:
        return len(self._queue)

    def reset(self) -> None:
        """Forget scripted replies, recorded requests and disconnects (reuse across tests)."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.disconnects = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        assert scope["type"] == "http", scope["type"]
        body = await _read_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        parsed = _parse(body)
        with self._lock:
            number = len(self.requests) + 1
            self.requests.append(
                RecordedRequest(
                    method=scope["method"], path=scope["path"], headers=headers, body=parsed
                )
            )
            exchange = self._queue.popleft() if self._queue else None
            if exchange is not None and exchange.respond is not None:
                exchange = replace(exchange, chunks=exchange.respond(parsed))
        if exchange is None:
            exchange = json_exchange(
                500, {"error": {"type": "fake_exhausted", "message": "no scripted reply left"}}
            )
        await self._reply(exchange, f"req_fake_{number}", receive, send)

    async def _reply(self, exchange: Exchange, request_id: str, receive: Any, send: Any) -> None:
        headers = [(k.encode(), v.encode()) for k, v in exchange.headers]
        headers.append((self.request_id_header.encode(), request_id.encode()))
        await send({"type": "http.response.start", "status": exchange.status, "headers": headers})
        disconnected = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            for index, chunk in enumerate(exchange.chunks):
                if exchange.cut_after is not None and index >= exchange.cut_after:
                    return  # leave without finishing the body: the client sees a cut stream
                if exchange.chunk_delay_s:
                    await asyncio.sleep(exchange.chunk_delay_s)
                if disconnected.done():
                    self.disconnects += 1
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if exchange.cut_after is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnected.cancel()


async def _wait_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        piece: bytes = message.get("body", b"")
        body += piece
        if not message.get("more_body"):
            return body


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body.decode(errors="replace")


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class FakeServer:
    """Serves a ``FakeProvider`` on 127.0.0.1 from a background thread.

    >>> with FakeServer(FakeProvider()) as server:  # doctest: +SKIP
    ...     AsyncAnthropic(base_url=server.url, api_key="test")
    """

    def __init__(self, provider: FakeProvider, *, port: int = 0) -> None:
        self.provider = provider
        # IPPROTO_TCP named, or asyncio leaves Nagle on (it sets TCP_NODELAY only where the
        # socket's proto says TCP) and each reply's body waits 40 ms for a delayed ACK.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.bind(("127.0.0.1", port))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            provider, log_config=None, lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: self._server.run(sockets=[self._socket]), daemon=True
        )

    def start(self) -> FakeServer:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        raise RuntimeError(f"fake provider server on port {self.port} did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
