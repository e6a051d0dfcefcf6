"""``bosun mcp``: an org's MCP toolsets from the command line, straight on the database
(no server needed), as ``bosun agents`` does profiles.

``add`` stores a toolset (or replaces it: its next version, so running servers reconnect);
header and environment values are encrypted with ``BOSUN_SECRETS_KEY`` and never printed.
``show --check`` connects as a server's worker would and prints its tools. ``list`` and
``show`` print to stdout; what ``add`` and ``remove`` did is said on stderr (``say``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Coroutine
from dataclasses import asdict
from typing import Any

from bosun._dev_key import missing_key_help
from bosun.log import quiet_logging
from bosun.migrate import upgrade
from bosun.settings import Settings
from bosun.wiring import configured_toolsets
from store import (
    InvalidToolsetError,
    McpToolsetRecord,
    McpToolsetSpec,
    SecretsKeyError,
    Store,
    stdio_refusal,
)


class Refused(Exception):
    """What the command cannot do, said to the user (exit status 2)."""


def say(line: str) -> None:
    """A line for the person, on stderr: stdout carries only what a script captures (ids,
    secrets, listings), so ``X=$(bosun …)`` gets that and nothing else."""
    print(line, file=sys.stderr)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return printed("mcp", _mcp(args, settings), settings)


def printed(
    command: str,
    lines: Coroutine[Any, Any, list[str]],
    settings: Settings,
    refusals: tuple[type[Exception], ...] = (),
) -> int:
    """Run a toolset command and print its lines; what it refuses (``Refused``, a bad
    configuration, no secrets key, ``refusals``) goes to stderr with exit status 2."""
    quiet_logging(settings)
    refused: tuple[type[Exception], ...] = (Refused, InvalidToolsetError, *refusals)
    try:
        for line in asyncio.run(lines):
            print(line)
    except SecretsKeyError as exc:
        print(f"bosun {command}: {missing_key_help(exc, command)}", file=sys.stderr)
        return 2
    except refused as exc:
        print(f"bosun {command}: {exc}", file=sys.stderr)
        return 2
    return 0


async def _mcp(args: argparse.Namespace, settings: Settings) -> list[str]:
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    store = Store(settings.database_url, secrets_key=secrets_key)
    try:
        await upgrade(store, toolsets=configured_toolsets(settings))
        if args.action == "list":
            return [_line(r) for r in await store.mcp_toolsets.list_for_org(args.org)]
        if args.action == "add":
            say(await _add(store, args, settings))
            return []
        if args.action == "remove":
            if not await store.mcp_toolsets.delete(args.org, args.name):
                raise Refused(f"the org {args.org!r} has no MCP toolset {args.name!r}")
            say(f"{args.name}: removed")
            return []
        return [await _show(store, args, settings)]
    finally:
        await store.close()


def _line(record: McpToolsetRecord) -> str:
    where = record.url if record.transport == "http" else " ".join(record.command or ())
    off = "" if record.enabled else " (disabled)"
    return f"{record.name}\tv{record.version}\t{record.transport}\t{where}{off}"


async def _add(store: Store, args: argparse.Namespace, settings: Settings) -> str:
    stdio = args.program is not None
    if stdio and (refusal := stdio_refusal(args.program, settings.mcp.stdio_commands)):
        raise Refused(refusal)
    if (args.header and stdio) or (args.env and not stdio):
        raise Refused("--header goes with --url, --env with --command")
    spec = McpToolsetSpec(
        transport="stdio" if stdio else "http",
        url=args.url,
        command=args.program,
        headers=dict(args.header),
        env=dict(args.env),
        default_category=args.category,
        tool_categories=dict(args.tool_category),
        timeout_s=args.timeout,
        enabled=not args.disabled,
    )
    record = await store.mcp_toolsets.put(args.org, args.name, spec)
    return f"{record.name}: saved version {record.version}"


async def _show(store: Store, args: argparse.Namespace, settings: Settings) -> str:
    record = await store.mcp_toolsets.get(args.org, args.name)
    if record is None:
        raise Refused(f"the org {args.org!r} has no MCP toolset {args.name!r}")
    shown: dict[str, Any] = asdict(record)
    for key in ("id", "org_id"):
        shown.pop(key)
    if args.check:
        from tools import McpPool  # it loads the mcp SDK when it connects, not before

        pool = McpPool(
            store,
            stdio_commands=settings.mcp.stdio_commands,
            max_tools=settings.mcp.max_tools_per_toolset,
            connect_timeout_s=settings.mcp.connect_timeout_s,
            egress=settings.egress.policy(),
        )
        try:
            shown["status"] = asdict(await pool.refresh(args.org, args.name))
        finally:
            await pool.aclose()
    return json.dumps(shown, indent=2, default=str)
