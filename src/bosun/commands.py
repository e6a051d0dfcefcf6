"""Running a parsed ``bosun`` command line: the settings and logging, then its command.

``bosun.cli`` imports this module only once the line has parsed: from here on the
settings, providers, the store and the HTTP stack load. ``serve``, ``migrate``, ``token``,
``org-tier`` and ``toolsets`` are here; ``chat``, ``plan``, ``budget``, ``prune``,
``agents``, ``run``, ``mcp`` and ``openapi`` have their own modules.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from pydantic import SecretStr, ValidationError

import telemetry
from bosun import (
    agents_cli,
    budget_report,
    chat_cli,
    config_cli,
    mcp_cli,
    openapi_cli,
    plan_cli,
    prune_cli,
)
from bosun._dev_key import (
    DEV_KEY_COMMANDS,
    DevKeyError,
    cli_key,
    remember_model,
    serve_key,
    serve_note,
)
from bosun._toolsets import Toolset, ToolsetError, installed_toolsets
from bosun.cli_args import DEV_ORG, DEV_TOOLSET, DEV_USER
from bosun.log import configure_logging, scrub_secrets
from bosun.settings import UNSAFE_SECRET_HELP, Settings, load_settings
from bosun.wiring import configured_toolsets
from providers import ModelSpecError
from store import SecretsKeyError, Store
from tools import UserRole

_log = structlog.get_logger("bosun.egress")
_boot = structlog.get_logger("bosun.serve")


_COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], int]] = {
    "plan": plan_cli.run, "chat": chat_cli.run, "budget": budget_report.run_budget,
    "prune": prune_cli.run, "agents": agents_cli.run_agents, "run": agents_cli.run_run,
    "mcp": mcp_cli.run, "openapi": openapi_cli.run, "config": config_cli.run,
}  # fmt: skip
"""The commands that live in their own modules."""


def run(args: argparse.Namespace) -> int:
    """Load the settings (the flags over the environment), set up logging, run the command."""
    try:
        settings = _settings(args)
    except (ValidationError, FileNotFoundError) as exc:
        print(f"bosun: invalid settings: {exc}", file=sys.stderr)
        return 2
    configure_logging(fmt=settings.log_format, level=settings.log_level)
    try:
        if args.command in DEV_KEY_COMMANDS:
            _dev_key(settings)
        return _command(args, settings)
    except (ToolsetError, DevKeyError) as exc:  # a toolset that does not load, a bad key file
        print(f"bosun {args.command}: {exc}", file=sys.stderr)
        return 2


def _dev_key(settings: Settings) -> None:
    """In a development setup (no secrets key, no JWT secret of its own: a server here
    would need ``--dev``), use the key ``serve --dev`` keeps in this directory, if any."""
    if settings.secrets_key is not None or settings.secret_is_safe():
        return
    if found := cli_key(Path.cwd()):
        path, key = found
        settings.secrets_key = SecretStr(key)
        print(f"note: using the development secrets key in {path}", file=sys.stderr)


def _command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "serve":
        return _serve(args, settings)
    if args.command in _COMMANDS:
        return _COMMANDS[args.command](args, settings)
    if args.command == "migrate":
        toolsets = configured_toolsets(settings)
        asyncio.run(_migrate(settings.database_url, args.revision, toolsets=toolsets))
        with_toolsets = "".join(f", {t.name}" for t in toolsets if t.migrations)
        where = settings.database_url.split("@")[-1]
        print(f"migrated {where} to {args.revision}{with_toolsets}", file=sys.stderr)
        return 0
    if args.command == "toolsets":
        return _toolsets(settings)
    if args.command == "org-tier":
        return _org_tier(args, settings)
    assert args.command == "token", args.command
    return _token(args, settings)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    if getattr(args, "toolset", None):  # the flags name the toolsets, instead of the settings
        overrides["toolsets"], overrides["demo"] = args.toolset, False
    settings = load_settings(**overrides)
    if getattr(args, "model", None):
        settings.models.default = args.model
        settings.models.planner = settings.models.executor = None
        settings.models.merger = settings.models.summariser = None
    return settings


async def _migrate(url: str, revision: str = "head", *, toolsets: Sequence[Toolset]) -> None:
    from bosun.migrate import upgrade  # alembic is only needed when migrating

    store = Store(url)
    try:
        await upgrade(store, revision, toolsets=toolsets)
    finally:
        await store.close()


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from bosun.app import build_app, freeze_startup_heap

    if not settings.secret_is_safe() and not args.dev:
        print(UNSAFE_SECRET_HELP, file=sys.stderr)
        return 2
    key_note = ""
    if args.dev and settings.secrets_key is None:  # webhooks and toolset secrets just work
        path, key, created = serve_key(Path.cwd())
        settings.secrets_key = SecretStr(key)
        key_note = "\n" + serve_note(path, created=created)
    _open_egress(settings, dev=args.dev)
    if args.dev:
        _lift_demo_limits(settings)
        remember_model(Path.cwd(), args.model)  # for `bosun run --wait` beside it
    if warning := settings.mcp.stdio_warning():
        print(warning, file=sys.stderr)
    if args.dev and not settings.toolset_names():
        settings.toolsets = [DEV_TOOLSET]  # a first `serve --dev` shows the demo studio
    toolsets = configured_toolsets(settings)
    try:
        app = build_app(settings, seed_orgs=[DEV_ORG] if args.dev else [], toolsets=toolsets)
    except (ModelSpecError, SecretsKeyError) as exc:
        print(f"bosun serve: {exc}", file=sys.stderr)
        return 2
    _boot.info("toolsets.loaded", toolsets=[t.name for t in toolsets])
    try:
        if tracing := telemetry.configure(os.environ, scrub=scrub_secrets):
            _boot.info("telemetry.on", signals=tracing)  # names and modes: no endpoint, no key
    except telemetry.TelemetryConfigError as exc:
        print(f"bosun serve: {exc}", file=sys.stderr)
        return 2
    if not args.no_migrate:
        asyncio.run(_migrate(settings.database_url, toolsets=toolsets))
    if args.dev:
        token = _mint(settings, user=DEV_USER, org=DEV_ORG, role="owner")
        host = f"[{args.host}]" if ":" in args.host else args.host  # an IPv6 address
        print(
            f"Development token (user {DEV_USER}, org {DEV_ORG}, owner):\n{token}\n"
            f"Web chat, signed in: http://{host}:{args.port}/#token={token}{key_note}",
            file=sys.stderr,
        )
    freeze_startup_heap()
    try:
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_config=None,
            timeout_graceful_shutdown=10,
        )
    finally:
        telemetry.shutdown()  # the last spans and metrics leave before the process does
    return 0


def _open_egress(settings: Settings, *, dev: bool) -> None:
    """``--dev`` lets webhooks and MCP servers reach this machine (a local receiver), and
    no other internal address; say so, and say when the operator opened them all."""
    egress = settings.egress
    if egress.allow_private:
        _log.warning("egress.open", allow_private=True)
        print("note: egress.allow_private is on: webhooks and MCP servers may reach "
              "any internal address", file=sys.stderr)  # fmt: skip
    elif dev:
        egress.allow_loopback = True
        _log.info("egress.dev_loopback", allow_loopback=True)
        print("note: --dev: webhooks and MCP servers may reach this machine's loopback "
              "addresses (other private addresses stay refused)", file=sys.stderr)  # fmt: skip


def _lift_demo_limits(settings: Settings) -> None:
    """``--dev`` with only scripted models: their token counts are made up, so neither the
    per-user token limit nor an agent's run rate stops a walkthrough; say so."""
    if not settings.models.scripted_only():
        return
    settings.limits.tokens_per_minute = 0
    settings.agents.rate_limits = False
    _log.info("limits.dev_scripted", tokens_per_minute=0, agent_rate_limits=False)
    print("note: --dev with scripted models: no per-user token limit and no agent run "
          "rate limit (their token counts are made up)", file=sys.stderr)  # fmt: skip


def _mint(
    settings: Settings, *, user: str, org: str, role: UserRole, ttl_s: int | None = None
) -> str:
    """A signed token. The HTTP stack is imported here: only ``serve`` and ``token``
    need it, the other commands start without it."""
    from stream import TokenConfig, mint_token

    return mint_token(
        TokenConfig(settings.effective_secret(), settings.jwt_algorithm),
        user=user,
        org=org,
        role=role,
        ttl_s=ttl_s or settings.token_ttl_s,
    )


def _token(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.secret_is_safe():
        print("note: signing with the development secret (set BOSUN_JWT_SECRET)", file=sys.stderr)
    try:
        token = _mint(
            settings, user=args.user, org=args.org, role=args.role, ttl_s=args.ttl or None
        )
    except ValueError as exc:
        print(f"bosun token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


def _org_tier(args: argparse.Namespace, settings: Settings) -> int:
    caps = settings.caps.tiers
    if args.tier is not None and args.tier not in caps:
        print(f"bosun org-tier: no tier {args.tier!r} (tiers: {', '.join(caps)})", file=sys.stderr)
        return 2

    async def run() -> str | None:
        store = Store(settings.database_url)
        try:
            if args.tier is not None:
                await store.spend.set_tier(args.org, args.tier)
            return await store.spend.tier(args.org)
        finally:
            await store.close()

    tier = asyncio.run(run()) or settings.caps.default_tier
    cap = caps.get(tier, caps[settings.caps.default_tier])
    shown = "unmetered" if cap == -1 else f"${cap:,.2f} a day"
    print(f"org {args.org}: tier {tier} ({shown})")
    return 0


def _toolsets(settings: Settings) -> int:
    """What is loaded (the configured toolsets, each loaded as ``serve`` would) and what
    is installed (the entry points a bare name may give)."""
    toolsets = configured_toolsets(settings)
    print("loaded:" if toolsets else "loaded: none (serve has no tools; --toolset NAME adds one)")
    for spec, toolset in zip(dict.fromkeys(settings.toolset_names()), toolsets, strict=True):
        tables = f", migrations {toolset.migrations}" if toolset.migrations else ""
        print(f"  {toolset.name}\t{spec}\t{len(toolset.tools)} tools{tables}")
        print(f"    {', '.join(toolset.tools.names()) or 'no tools'}")
    installed = installed_toolsets()
    print("installed:" if installed else "installed: none (entry-point group bosun.toolsets)")
    for name, value in sorted(installed.items()):
        print(f"  {name}\t{value}")
    return 0
