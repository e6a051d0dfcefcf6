"""``bosun agents`` and ``bosun run``: an org's agent profiles and background runs, from
the command line, straight on the database (no server needed).

``agents apply FILE.yaml`` saves each profile in the file (one mapping, or a list) unless
it equals the agent's current version, so applying the same file twice changes nothing.
``run HANDLE TASK`` queues a run for a server's workers; with ``--wait`` this process
runs it as a server's worker would (``bosun.app.local_server``: the same models, toolsets,
the org's MCP and OpenAPI toolsets, and the notices its end publishes) and prints its
events as ``bosun chat`` does. Ids go to stdout, what is said to the person to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bosun._dev_key import cli_model, missing_key_help
from bosun.chat_cli import heartbeat, print_events
from bosun.log import quiet_logging
from bosun.migrate import upgrade
from bosun.settings import ROLE_NAMES, Settings
from bosun.wiring import build_kit, configured_toolsets
from fleet import (
    AgentDirectory,
    AgentNotFoundError,
    AgentPausedError,
    AgentProfile,
    AgentRateLimitedError,
    ProfileError,
    RunRequest,
    default_policy,
    default_profile,
)
from providers import ModelSpecError
from store import SecretsKeyError, Store
from turn import TurnHandle

if TYPE_CHECKING:
    from stream import LocalServer

NO_MODEL = (
    "--wait runs the agent in this process, with this command's models, and none is "
    "configured: pass --model SPEC (the server's, e.g. make serve's "
    "scripted:examples/hello.yaml) or set BOSUN_MODELS__DEFAULT; without --wait, the "
    "server's workers run it with theirs"
)


def _store(settings: Settings) -> Store:
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    return Store(settings.database_url, secrets_key=secrets_key)


def _directory(settings: Settings, store: Store) -> AgentDirectory:
    kit = build_kit(settings, store)
    policy = default_policy(kit, settings.models.allowed, settings.agents.always_allowed)
    return AgentDirectory(store, policy, kit, default_profile(kit))


def run_agents(args: argparse.Namespace, settings: Settings) -> int:
    quiet_logging(settings)
    try:
        loaded = _load(Path(args.file)) if args.action == "apply" else []
        return asyncio.run(_agents(args, settings, loaded))
    except (ValueError, AgentNotFoundError, OSError, yaml.YAMLError) as exc:
        print(f"bosun agents: {_message(exc)}", file=sys.stderr)
        return 2


def _message(exc: Exception) -> str:
    return f"{exc.code}: {exc.message}" if isinstance(exc, ProfileError) else str(exc)


def _load(path: Path) -> list[Any]:
    """The profiles of a YAML file: one mapping, or a list of them."""
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, list) else [loaded]


async def _agents(args: argparse.Namespace, settings: Settings, loaded: list[Any]) -> int:
    store = _store(settings)
    try:
        await upgrade(store, toolsets=configured_toolsets(settings))
        directory = _directory(settings, store)
        if args.action == "list":
            for agent in await directory.list(args.org):
                paused = " (paused)" if agent.paused else ""
                print(f"{agent.handle}\tv{agent.version}\t{agent.profile.name}{paused}")
        elif args.action == "show":
            agent = await directory.get(args.org, args.handle)
            shown = {"handle": agent.handle, "version": agent.version}
            print(json.dumps({**shown, **agent.profile.model_dump(mode="json")}, indent=2))
        else:  # what was saved is said to the person; nothing new to capture
            for line in await _apply(directory, args.org, args.user, loaded):
                print(line, file=sys.stderr)
        return 0
    finally:
        await store.close()


async def _apply(directory: AgentDirectory, org_id: str, user: str, items: list[Any]) -> list[str]:
    """Save each profile that differs from its agent's current version; every profile is
    checked before any is saved, so a bad file changes nothing."""
    profiles: list[tuple[str, AgentProfile]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("handle"), str):
            raise ValueError("each profile needs a 'handle'")
        profile = AgentProfile.model_validate({k: v for k, v in item.items() if k != "handle"})
        await directory.check(org_id, profile)
        profiles.append((item["handle"], profile))
    lines = []
    for handle, profile in profiles:
        try:
            current = await directory.get(org_id, handle)
        except AgentNotFoundError:
            current = None
        if current is not None and current.version > 0 and current.profile == profile:
            lines.append(f"{handle}: unchanged (version {current.version})")
            continue
        saved = await directory.save(org_id, handle, profile, by=user, create=False)
        lines.append(f"{handle}: saved version {saved.version}")
    return lines


def run_run(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when the run was queued (or, with ``--wait``, completed or waits for a
    human), 1 when it did not complete, 2 when it could not be queued."""
    quiet_logging(settings)
    if args.wait and not _has_model(settings) and not _dev_server_model(settings):
        print(f"bosun run: {NO_MODEL}", file=sys.stderr)
        return 2
    try:
        context = _context(args.context)
    except ValueError as exc:
        print(f"bosun run: {exc}", file=sys.stderr)
        return 2
    try:
        status = asyncio.run(_run(args, settings, context))
    except SecretsKeyError as exc:
        print(f"bosun run: {missing_key_help(exc, 'run')}", file=sys.stderr)
        return 2
    except (AgentNotFoundError, AgentPausedError, AgentRateLimitedError, ModelSpecError) as exc:
        print(f"bosun run: {exc}", file=sys.stderr)
        return 2
    return 0 if status in ("queued", "completed", "suspended") else 1


def _context(text: str | None) -> dict[str, Any] | None:
    """``--context``: a JSON object (``ValueError`` for anything else)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"--context must be a JSON object, not {text!r:.60}")
    return value


def _has_model(settings: Settings) -> bool:
    """Whether a turn here could have a model at all (a role's, or one agents may pick)."""
    models = settings.models
    return bool(models.allowed) or any(models.for_role(role) for role in ROLE_NAMES)


def _dev_server_model(settings: Settings) -> bool:
    """Beside ``serve --dev --model SPEC``, in a development setup (no JWT secret of its
    own), take the server's model: ``--wait`` then runs as that server's worker would."""
    found = None if settings.secret_is_safe() else cli_model(Path.cwd())
    if found is None:
        return False
    path, spec = found
    settings.models.default = spec
    print(f"note: --wait runs with serve --dev's model {spec} (from {path})", file=sys.stderr)
    return True


async def _run(args: argparse.Namespace, settings: Settings, context: dict[str, Any] | None) -> str:
    from bosun.app import local_server  # the HTTP stack's services: only `run` needs them

    store = _store(settings)
    server = None
    try:
        toolsets = configured_toolsets(settings)
        await upgrade(store, toolsets=toolsets)
        server = local_server(settings, store, toolsets)
        return await _submit(args, server, context)
    finally:
        await (store.close() if server is None else server.aclose())  # aclose: the store too


async def _submit(
    args: argparse.Namespace, server: LocalServer, context: dict[str, Any] | None
) -> str:
    """Queue the run (its id to stdout), and with ``--wait`` run it here to its end."""
    services = server.services
    run, _ = await services.runs.submit(
        RunRequest(
            org_id=args.org, user_id=args.user, role=args.role, agent=args.handle,
            task=args.task, context=context,
        )
    )  # fmt: skip
    ids = {"run_id": run.id, "session_id": run.session_id}
    print(json.dumps(ids) if args.json else run.id, flush=True)
    print(f"run {run.id} queued (session {run.session_id})", file=sys.stderr)
    if not args.wait:
        return "queued"
    turn_id = await services.runs.claim_and_start(run)
    if turn_id is None:  # a server's worker took it first: nothing to print here
        print(f"run {run.id} was claimed by a server's worker", file=sys.stderr)
        return "queued"
    handle = TurnHandle(session_id=run.session_id, turn_id=turn_id, trace_id="")
    async with heartbeat(services.store, services.runner, handle):
        status = await print_events(services.store, handle, as_json=args.json)
    await services.runner.wait(turn_id)  # its end's hooks too: costs, run_finished
    print(f"\nrun {run.id}: {status}", file=sys.stderr)
    return status
