"""The HTTP edge: Litestar routes, auth, SSE framing of the log, errors, limits and the web
page. The turn itself lives in ``turn``: routes start it and only tail the log it writes.
"""

from stream._api import Services, StreamConfig
from stream._app import create_app
from stream._auth import ROLES_HELP, Principal, TokenConfig, decode_token, mint_token
from stream._sse import encode_frame, tail

__all__ = [
    "ROLES_HELP",
    "Principal",
    "Services",
    "StreamConfig",
    "TokenConfig",
    "create_app",
    "decode_token",
    "encode_frame",
    "mint_token",
    "tail",
]
