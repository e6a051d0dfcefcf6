"""A whole conversation in this process, on a throwaway database: ``bosun.testing.converse``.

It runs a server's services (``stream.LocalServer``: the store, turn runner, agents and
models the routes share) around the caller's toolset and scripted models, and acts as one
user through the functions the routes call: messages, confirmations, picks, answers to
questions, undos. So a toolset's human-in-the-loop paths are tested on the server's own
code, with the toolset's own tables migrated, and no HTTP, network or server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from alembic import command
from sqlalchemy.engine import Connection

from bosun._harness import _database
from bosun._toolsets import Toolset, merge_sources, merge_tools, register_artifact_types
from bosun._views import Needs, TurnResult, UndoResult, turn_result
from bosun.migrate import alembic_config, script_location, upgrade
from context import Source, SourceRegistry
from events import ToolError
from providers import Model, ScriptedModel
from store import Store
from stream import ApiError, LocalServer, LocalUser
from tools import ToolRegistry, UserRole
from turn import TurnKit, TurnModels

ModelLike = Model | str | Path
"""A model double, or the path of a script file (``ScriptedModel.from_file``: YAML, JSON)."""
Sources = SourceRegistry | Callable[[Store], SourceRegistry]
"""Context sources, or a function making them over the conversation's store."""
T = TypeVar("T")


class ActionRefused(Exception):
    """The server refused a user action (as its HTTP route would: ``status``, ``code``),
    e.g. ``tool_already_resolved`` for a second answer, ``invalid_pick``, ``not_undoable``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message


class Conversation:
    """One user's session with the toolset: each action waits for the turn to end or to
    stop for the user, and returns what the user saw (``TurnResult``). ``store`` is the
    conversation's database (seed it, or check the toolset's tables)."""

    def __init__(self, server: LocalServer, user: LocalUser) -> None:
        self._server = server
        self._user = user
        self.store: Store = server.services.store
        self.session_id: str | None = None
        self.last: TurnResult | None = None
        """The latest step's result."""

    @property
    def org_id(self) -> str:
        return self._user.principal.org_id

    @property
    def user_id(self) -> str:
        return self._user.principal.user_id

    async def send(self, text: str) -> TurnResult:
        """The user's next message: a new turn in the session (the first opens it), or
        the answer to the question the session's turn waits on, as the server takes it."""
        handle = await self._act(self._user.send(text, session_id=self.session_id))
        self.session_id = handle.session_id
        return await self._result(handle.turn_id, handle.after)

    async def answer(self, text: str) -> TurnResult:
        """Answer the question the turn waits on with the message ``text``."""
        self._pending("question", None)  # there must be one: else ``send`` starts a turn
        return await self.send(text)

    async def confirm(self, tool_use_id: str | None = None) -> TurnResult:
        """Approve the call waiting for confirmation (``None``: the only one)."""
        call = self._pending("confirmation", tool_use_id)
        after, turn_id = await self._act(self._user.confirm(self._session(), call, approved=True))
        return await self._result(turn_id, after)

    async def reject(self, tool_use_id: str | None = None) -> TurnResult:
        """Decline the call waiting for confirmation (``None``: the only one): it never runs."""
        call = self._pending("confirmation", tool_use_id)
        after, turn_id = await self._act(self._user.confirm(self._session(), call, approved=False))
        return await self._result(turn_id, after)

    async def pick(self, candidate_id: str, tool_use_id: str | None = None) -> TurnResult:
        """Choose ``candidate_id`` for the pick that waits (``None``: the only one)."""
        call = self._pending("pick", tool_use_id)
        after, turn_id = await self._act(self._user.pick(self._session(), call, candidate_id))
        return await self._result(turn_id, after)

    async def undo(self, tool_use_id: str) -> UndoResult:
        """Run the declared inverse of the session's write ``tool_use_id``."""
        session_id = self._session()
        before = await self.store.log.read(session_id)
        done = await self._act(self._user.undo(session_id, tool_use_id))
        logged = await self.store.log.read(session_id, after=before[-1].seq if before else 0)
        events = tuple(e.event for e in logged)
        error = done.error
        return UndoResult(
            tool_use_id=done.tool_use_id,
            undone=done.undone,
            ok=done.ok,
            output=done.output,
            error=None if error is None else _tool_error(error),
            events=events,
        )

    async def _result(self, turn_id: str, after: int) -> TurnResult:
        await self._server.wait(turn_id)
        session_id = self._session()
        logged = await self.store.log.read(session_id, turn_id=turn_id)
        self.last = turn_result(logged, session_id=session_id, turn_id=turn_id, after=after)
        return self.last

    def _pending(self, needs: Needs, tool_use_id: str | None) -> str:
        """The id of the call waiting for ``needs`` (the only one, unless given)."""
        if tool_use_id is not None:
            return tool_use_id
        waiting = [p for p in self.last.pending if p.needs == needs] if self.last else []
        if len(waiting) != 1:
            ids = [p.tool_use_id for p in waiting]
            raise AssertionError(f"Expected one {needs} waiting, found {len(waiting)}: {ids}")
        return waiting[0].tool_use_id

    def _session(self) -> str:
        if self.session_id is None:
            raise AssertionError("No session yet: send a message first")
        return self.session_id

    @staticmethod
    async def _act(action: Awaitable[T]) -> T:
        """``action``'s result; the server's refusal as ``ActionRefused``."""
        try:
            return await action
        except ApiError as exc:
            raise ActionRefused(exc.status, exc.code, exc.message) from None


@contextlib.asynccontextmanager
async def converse(
    *,
    model: ModelLike,
    toolsets: Sequence[Toolset] = (),
    tools: ToolRegistry | None = None,
    planner: ModelLike | None = None,
    sources: Sources | None = None,
    migrations: Path | Sequence[Path] | None = None,
    org_id: str = "test-org",
    user_id: str = "test-user",
    role: UserRole = "owner",
    database_url: str | None = None,
    timeout_s: float = 60.0,
) -> AsyncIterator[Conversation]:
    """A conversation with ``toolsets`` (their tools, sources, artifact types and tables),
    or loose ``tools`` and ``sources``, on a throwaway SQLite database, or ``database_url``,
    migrated to the newest schema, each toolset's branch and each ``migrations`` folder's
    branch to its head: what ``bosun serve`` loads, without the server.

    ``model`` runs the plan's steps and writes the answers; ``planner`` plans (default:
    ``model``, so one script serves every call, in order or by ``match``). A model is a
    ``ScriptedModel``/``FunctionModel`` double or a script file's path. Leaving the block
    stops any turn still running and deletes the throwaway database.
    """
    executor = _model(model)
    models = TurnModels(
        executor=executor, planner=_model(planner) if planner is not None else executor
    )
    async with _database(database_url) as url:
        store = Store(url)
        server: LocalServer | None = None
        try:
            kit = await _prepare(store, toolsets, tools, sources, _folders(migrations))
            server = LocalServer(store, models=models, kit=kit, turn_timeout_s=timeout_s)
            yield Conversation(server, server.user(org_id=org_id, user_id=user_id, role=role))
        finally:
            if server is not None:
                await server.aclose()  # stops its turns, then closes the store
            else:
                await store.close()


async def _prepare(
    store: Store,
    toolsets: Sequence[Toolset],
    tools: ToolRegistry | None,
    sources: Sources | None,
    folders: Sequence[Path],
) -> TurnKit:
    """Migrate ``store`` (the core, the toolsets' branches, then loose folders) and the kit
    of the toolsets' tools and sources merged with the loose ones, as the server merges."""
    register_artifact_types(toolsets)
    await upgrade(store, toolsets=toolsets)
    await _upgrade_branches(store, folders)
    registry = merge_sources(toolsets, store)
    for source in _loose_sources(sources, store):
        registry.register(source)
    merged = merge_tools([*toolsets, Toolset(name="loose", tools=tools)] if tools else toolsets)
    return TurnKit(tools=merged, sources=registry)


def _loose_sources(sources: Sources | None, store: Store) -> list[Source]:
    made = sources(store) if callable(sources) else sources
    return list(made) if made is not None else []


def _tool_error(error: dict[str, str | None]) -> ToolError:
    return ToolError(code=str(error["code"]), message=str(error["message"]), hint=error.get("hint"))


def _model(model: ModelLike) -> Model:
    return ScriptedModel.from_file(model) if isinstance(model, str | Path) else model


def _folders(migrations: Path | Sequence[Path] | None) -> list[Path]:
    if migrations is None:
        return []
    return [migrations] if isinstance(migrations, Path) else list(migrations)


async def _upgrade_branches(store: Store, folders: Sequence[Path]) -> None:
    """Apply every branch of ``folders`` (alembic scripts whose base depends on core
    revisions) to its head, over a database the core is already at its head in."""
    if not folders:
        return
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise ValueError(f"Migration folders not found: {', '.join(missing)}")

    def _run(connection: Connection) -> None:
        config = alembic_config(connection)
        locations = [script_location() / "versions", *(f.resolve() for f in folders)]
        config.set_main_option("version_locations", os.pathsep.join(map(str, locations)))
        command.upgrade(config, "heads")

    async with store.db.write() as conn:
        await conn.run_sync(_run)
