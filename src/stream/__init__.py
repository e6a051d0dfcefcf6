"""The HTTP edge: Litestar routes, SSE encoding of the log, auth; and the turn task.

Nothing below this package knows about HTTP. The turn (``_turn``) is HTTP-free: routes
start it as a task and only tail the log it writes.
"""

from stream._api import Services, StreamConfig
from stream._app import create_app
from stream._auth import ROLES_HELP, Principal, Role, TokenConfig, decode_token, mint_token
from stream._metering import UNMETERED, BudgetExceededError, CapPolicy, TurnMeter
from stream._models import ModelResolver, TurnRoleModels
from stream._phases import TurnKit
from stream._runner import TurnHandle, TurnRunner
from stream._sse import encode_frame, tail
from stream._turn import AGENT_DISABLED, Turn, TurnModels, run_turn

__all__ = [
    "AGENT_DISABLED",
    "ROLES_HELP",
    "UNMETERED",
    "BudgetExceededError",
    "CapPolicy",
    "ModelResolver",
    "Principal",
    "Role",
    "Services",
    "StreamConfig",
    "TokenConfig",
    "Turn",
    "TurnHandle",
    "TurnKit",
    "TurnMeter",
    "TurnModels",
    "TurnRoleModels",
    "TurnRunner",
    "create_app",
    "decode_token",
    "encode_frame",
    "mint_token",
    "run_turn",
    "tail",
]
