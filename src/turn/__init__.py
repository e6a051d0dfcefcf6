"""One turn, with no HTTP in sight: plan, load context, execute or answer, log every event.

A turn is started by a chat request, by ``bosun chat``, or later by a background trigger:
it only appends to the session's log, which whoever asked reads. The package holds the
turn's phases, its metering against the daily cap, the job runner that owns running
turns under leases, the keeper that renews them and takes over dead workers' turns, and
the turn's observability. Nothing here knows HTTP (import-linter keeps it so).
"""

from turn._keeper import Keeper
from turn._metering import UNMETERED, BudgetExceededError, CapPolicy, TurnMeter
from turn._models import ModelNotAllowedError, ModelResolver, TurnRoleModels
from turn._observe import METRICS, count_tool_executions
from turn._phases import TurnKit
from turn._runner import TurnEnded, TurnHandle, TurnOrder, TurnRunner, TurnSetup, new_session
from turn._turn import AGENT_DISABLED, Turn, TurnModels, run_turn

__all__ = [
    "AGENT_DISABLED",
    "METRICS",
    "UNMETERED",
    "BudgetExceededError",
    "CapPolicy",
    "Keeper",
    "ModelNotAllowedError",
    "ModelResolver",
    "Turn",
    "TurnEnded",
    "TurnHandle",
    "TurnKit",
    "TurnMeter",
    "TurnModels",
    "TurnOrder",
    "TurnRoleModels",
    "TurnRunner",
    "TurnSetup",
    "count_tool_executions",
    "new_session",
    "run_turn",
]
