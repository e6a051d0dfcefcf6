"""The server's user actions in this process, below HTTP: ``bosun.testing``'s conversations.

``LocalServer`` holds the services the app's routes share (the same turn runner, store,
agents and models), without the app or its background workers; ``LocalServer.user(...)``
acts as one user through the very functions the routes call (chat, confirm, pick, undo),
so a test of a toolset exercises the server's own path, with its refusals as ``ApiError``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fleet import AgentPolicy
from store import Store
from stream._actions import UndoOut, undo_call
from stream._api import Services, StreamConfig
from stream._app import _services
from stream._auth import Principal, TokenConfig
from stream._resolve import ConfirmIn, PickIn, answer_call
from stream._routes import send_message
from tools import UserRole
from turn import TurnHandle, TurnKit, TurnModels


class LocalServer:
    """The services of a server over ``store`` with ``kit`` and ``models``; ``aclose``
    stops its turns at once and closes the store.

    ``config`` and ``policy``: a server's own (``bosun run`` runs a run as its workers
    would); by default a test's, whose leases outlive ``turn_timeout_s`` (no keeper)."""

    def __init__(
        self,
        store: Store,
        *,
        models: TurnModels,
        kit: TurnKit,
        turn_timeout_s: float = 300.0,
        config: StreamConfig | None = None,
        policy: AgentPolicy | None = None,
    ) -> None:
        # No token is ever checked here: the caller says who acts (``user``).
        config = config or StreamConfig(
            tokens=TokenConfig(secret=uuid.uuid4().hex),
            turn_timeout_s=turn_timeout_s,
            lease_s=turn_timeout_s + 30.0,  # no keeper renews leases: they outlive a turn
            webhook_deliveries=False,
        )
        self.services: Services = _services(store, models, config, kit, policy)

    def user(self, *, org_id: str, user_id: str, role: UserRole) -> LocalUser:
        return LocalUser(self.services, Principal(user_id=user_id, org_id=org_id, role=role))

    async def wait(self, turn_id: str) -> None:
        """Until the turn, if it runs in this process, has ended or stopped for the user."""
        await self.services.runner.wait(turn_id)

    async def aclose(self) -> None:
        services = self.services
        await services.runner.shutdown(0)  # a cancelled caller leaves no turn running
        await services.mcp.aclose()
        await services.openapi.aclose()
        await services.store.close()


@dataclass(frozen=True, slots=True)
class LocalUser:
    """One user's requests, as the routes handle them once the token named the user."""

    services: Services
    principal: Principal

    async def send(self, text: str, *, session_id: str | None) -> TurnHandle:
        """``POST /v1/chat``: a new turn, or the answer to the question that waits."""
        trace_id = uuid.uuid4().hex
        return await send_message(
            self.services, self.principal, text, session_id=session_id, trace_id=trace_id
        )

    async def confirm(
        self, session_id: str, tool_use_id: str, *, approved: bool
    ) -> tuple[int, str]:
        """``POST .../confirm/{tool_use_id}``: where the turn's stream goes on from, and
        the turn."""
        answer = ConfirmIn(approved=approved)
        return await answer_call(self.services, self.principal, session_id, tool_use_id, answer)

    async def pick(self, session_id: str, tool_use_id: str, candidate_id: str) -> tuple[int, str]:
        """``POST .../pick/{tool_use_id}``: where the turn's stream goes on from, and the
        turn."""
        answer = PickIn(id=candidate_id)
        return await answer_call(self.services, self.principal, session_id, tool_use_id, answer)

    async def undo(self, session_id: str, tool_use_id: str) -> UndoOut:
        """``POST .../undo/{tool_use_id}``."""
        return await undo_call(self.services, self.principal, session_id, tool_use_id)
