"""Small helpers for API tests: run a turn over SSE, read the log's rows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from providers import FunctionModel, ModelRequest


@dataclass(frozen=True)
class Frame:
    id: int
    event: str
    data: dict[str, Any]


async def stream_turn(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
) -> list[Frame]:
    """POST /v1/chat/stream and read every frame to the end of the stream."""
    return await stream_post(client, "/v1/chat/stream", body, headers)


async def stream_post(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> list[Frame]:
    """POST ``body`` to an SSE route and read every frame to the end of the stream."""
    async with aconnect_sse(client, "POST", path, json=body, headers=headers) as es:
        assert es.response.status_code == 200, await es.response.aread()
        return [Frame(int(s.id), s.event, json.loads(s.data)) async for s in es.aiter_sse()]


def streaming_model(pieces: list[str]) -> FunctionModel:
    """A zero-latency model that streams ``pieces``."""

    async def reply(_request: ModelRequest) -> AsyncIterator[str]:
        for piece in pieces:
            yield piece

    return FunctionModel(reply)


def types(frames: list[Frame]) -> list[str]:
    return [f.event for f in frames]


def shown_answer(frames: Iterable[tuple[int, str, dict[str, Any]]]) -> str:
    """The answer a client of one turn's stream shows, written as a client would: its
    ``text_delta``s without ``step_id`` (frame ``(id, event, data)``), less those a
    ``message_reset`` drops (``id >= from_seq``)."""
    kept: list[tuple[int, str]] = []
    for seq, event, data in frames:
        if event == "text_delta" and "step_id" not in data:
            kept.append((seq, data["delta"]))
        elif event == "message_reset" and "step_id" not in data:
            kept = [(s, delta) for s, delta in kept if s < data["from_seq"]]
    return "".join(delta for _, delta in kept)
