"""The HTTP edge: Litestar routes, auth, SSE framing of the log, errors, limits and the web
page. The turn itself lives in ``turn``: routes start it and only tail the log it writes.
"""

from stream._api import StreamConfig
from stream._app import create_app
from stream._auth import TokenConfig, mint_token
from stream._deliveries import DeliveryLimits
from stream._errors import ApiError
from stream._local import LocalServer, LocalUser

__all__ = [
    "ApiError",
    "DeliveryLimits",
    "LocalServer",
    "LocalUser",
    "StreamConfig",
    "TokenConfig",
    "create_app",
    "mint_token",
]
