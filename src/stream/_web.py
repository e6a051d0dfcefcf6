"""The web chat: one static page at ``/`` and its assets at ``/web/{name}``, without auth.

The files ship as package data in ``stream/web`` (no build step, nothing from a CDN). The
page holds no secret: it asks for a bearer token and sends it with every API call.
"""

from __future__ import annotations

import asyncio
import re
from importlib.resources import files

from litestar import Response, get
from litestar.params import FromPath

from stream._errors import ApiError

# Scripts, styles, images and connections from this origin only: no inline code, no CDN.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ASSET_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
MEDIA_TYPES = {  # Litestar adds "; charset=utf-8" to the text types
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*(\.[a-z0-9]+)$")
_cache: dict[str, bytes] = {}


def _read(name: str) -> bytes | None:
    resource = files("stream").joinpath("web", name)
    return resource.read_bytes() if resource.is_file() else None


async def _asset(name: str) -> bytes | None:
    """The packaged file ``name``, read once (off the event loop) and then kept."""
    if name not in _cache:
        body = await asyncio.to_thread(_read, name)
        if body is None:
            return None
        _cache[name] = body
    return _cache[name]


@get("/", summary="The web chat page", include_in_schema=False)
async def web_page() -> Response[bytes]:
    body = await _asset("index.html")
    assert body is not None, "stream/web/index.html is missing from the package"
    return Response(body, media_type="text/html", headers=PAGE_HEADERS)


@get("/web/{name:str}", summary="The web chat's scripts and styles", include_in_schema=False)
async def web_asset(name: FromPath[str]) -> Response[bytes]:
    match = _NAME.match(name)
    media_type = MEDIA_TYPES.get(match.group(1)) if match else None
    body = await _asset(name) if media_type is not None else None
    if media_type is None or body is None:
        raise ApiError(404, "not_found", f"No web asset {name!r}")
    return Response(body, media_type=media_type, headers=ASSET_HEADERS)
