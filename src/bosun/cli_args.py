"""The ``bosun`` command line's shape: every command and its arguments, nothing they run.

It imports the standard library only, so ``bosun --help``, ``bosun --version`` and
``bosun COMMAND --help`` answer before settings, providers, the store or the HTTP stack
load (``bench/cli_start.py`` times them). The commands run from ``bosun.commands``, which
``bosun.cli`` imports once the line has parsed.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from bosun import __version__

if TYPE_CHECKING:
    _Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

# tools.UserRole spelled out (importing tools loads the store); a test keeps them equal.
USER_ROLES = ("owner", "staff", "member")
DEV_USER, DEV_ORG = "dev", "dev-org"  # whom `serve --dev` signs a token for; `chat` asks as
DEV_TOOLSET = "demo"  # what `serve --dev` loads when no toolset is configured


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``bosun [--version] COMMAND ...``."""
    parser = argparse.ArgumentParser(
        prog="bosun", description="Planner/executor agent orchestration service."
    )
    parser.add_argument("--version", action="version", version=f"bosun {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _serve, _migrate, _token, _org_tier, _chat, _plan, _budget, _prune, _agents, _run,
        _mcp, _openapi, _toolsets, _config,
    ):  # fmt: skip
        add(commands)
    return parser


def _database_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", metavar="URL", help="overrides BOSUN_DATABASE_URL")


def _toolset(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--toolset", action="append", metavar="NAME",
        help="load this toolset (module:attribute, or an installed entry point's name) "
        "instead of the configured ones (setting toolsets); repeatable",
    )  # fmt: skip


def _toolsets(commands: _Commands) -> None:
    toolsets = commands.add_parser(
        "toolsets", help="list the toolsets configured (loaded as serve would) and installed"
    )
    _toolset(toolsets)


def _config(commands: _Commands) -> None:
    config = commands.add_parser(
        "config", help="print every setting's effective value and where it came from"
    )
    shown = config.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="as JSON: name, env, value, source")
    shown.add_argument(
        "--markdown", action="store_true", help="the settings table of docs/settings.md"
    )


def _serve(commands: _Commands) -> None:
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--dev", action="store_true",
        help=f"allow the development JWT secret, print a token, seed {DEV_ORG} (and load the "
        f"{DEV_TOOLSET!r} toolset when none is configured)",
    )  # fmt: skip
    _toolset(serve)
    serve.add_argument(
        "--model", metavar="SPEC", help="model for every role, e.g. scripted:replies.yaml"
    )
    _database_url(serve)
    serve.add_argument(
        "--no-migrate", action="store_true", help="do not apply migrations at start-up"
    )


def _migrate(commands: _Commands) -> None:
    migrate = commands.add_parser("migrate", help="apply database migrations")
    _database_url(migrate)
    _toolset(migrate)
    migrate.add_argument("--revision", default="head")


def _token(commands: _Commands) -> None:
    token = commands.add_parser("token", help="print a bearer token for local use")
    token.add_argument("--user", required=True)
    token.add_argument("--org", required=True)
    token.add_argument("--role", default="member", help=f"one of {', '.join(USER_ROLES)}")
    token.add_argument("--ttl", type=int, help="lifetime in seconds (default: token_ttl_s)")


def _org_tier(commands: _Commands) -> None:
    tier = commands.add_parser("org-tier", help="show or set an org's tier (its daily cap)")
    tier.add_argument("--org", required=True)
    tier.add_argument("--tier", help="one of the configured tiers (caps.tiers); omit to show")
    _database_url(tier)


def _chat(commands: _Commands) -> None:
    chat = commands.add_parser("chat", help="run one turn in this process and print its events")
    chat.add_argument("message", help="the user's message")
    chat.add_argument("--session", metavar="ID", help="go on with this session")
    chat.add_argument("--model", metavar="SPEC", help="model for every role")
    chat.add_argument("--user", default=DEV_USER, help=f"who asks (default {DEV_USER})")
    chat.add_argument("--org", default=DEV_ORG, help=f"their org (default {DEV_ORG})")
    chat.add_argument("--role", default="owner", choices=USER_ROLES, help="their role")
    chat.add_argument("--json", action="store_true", help="print every event as a JSON line")
    _toolset(chat)
    _database_url(chat)


def _who(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--org", default=DEV_ORG, help=f"the org (default {DEV_ORG})")
    parser.add_argument("--user", default=DEV_USER, help=f"who acts (default {DEV_USER})")


def _agents(commands: _Commands) -> None:
    agents = commands.add_parser("agents", help="list, show or apply an org's agent profiles")
    actions = agents.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in (
        actions.add_parser("list", help="the org's agents and their versions"),
        show := actions.add_parser("show", help="one agent's current profile (JSON)"),
        apply := actions.add_parser(
            "apply", help="save the profiles of a YAML file (unchanged ones are skipped)"
        ),
    ):
        _who(action)
        _database_url(action)
        _toolset(action)
    show.add_argument("handle", metavar="HANDLE")
    apply.add_argument("file", metavar="FILE.yaml")


def _run(commands: _Commands) -> None:
    run = commands.add_parser("run", help="queue a background run of an agent (or --wait)")
    run.add_argument("handle", metavar="HANDLE", help="the agent")
    run.add_argument("task", metavar="TASK", help="what it is to do")
    run.add_argument("--context", metavar="JSON", help="data for the task, a JSON object")
    run.add_argument("--role", default="owner", choices=USER_ROLES, help="the run acts as")
    run.add_argument(
        "--wait", action="store_true", help="run it in this process and print its events"
    )
    run.add_argument(
        "--json", action="store_true", help="the ids as a JSON line (with --wait, then the events)"
    )
    run.add_argument("--model", metavar="SPEC", help="model for every role")
    _toolset(run)
    _who(run)
    _database_url(run)


def _toolset_actions(
    commands: _Commands, command: str, what: str
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``bosun COMMAND list|show|add|remove`` for an org's toolsets of one kind: the
    ``show`` and ``add`` parsers, for their own arguments."""
    helped = f"list, show, add or remove an org's {what} toolsets"
    parser = commands.add_parser(command, help=helped)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in (
        actions.add_parser("list", help=f"the org's {what} toolsets"),
        show := actions.add_parser("show", help="one toolset (JSON), never its secret values"),
        add := actions.add_parser("add", help="add a toolset, or replace it (its next version)"),
        actions.add_parser("remove", help="remove a toolset"),
    ):
        action.add_argument("--org", default=DEV_ORG, help=f"the org (default {DEV_ORG})")
        _database_url(action)
        if action is not actions.choices["list"]:
            action.add_argument("name", metavar="NAME", help="the toolset: its tools' router")
    return show, add


def _mcp(commands: _Commands) -> None:
    show, add = _toolset_actions(commands, "mcp", "MCP")
    show.add_argument(
        "--check", action="store_true", help="connect now and list its tools (as a server would)"
    )
    _mcp_add(add)


def _openapi(commands: _Commands) -> None:
    _, add = _toolset_actions(commands, "openapi", "OpenAPI")
    add.add_argument(
        "--openapi", required=True, metavar="URL_OR_FILE",
        help="the OpenAPI 3.0/3.1 document (JSON or YAML): a URL (fetched now) or a file",
    )  # fmt: skip
    add.add_argument("--base-url", required=True, metavar="URL", help="where the API is called")
    add.add_argument(
        "--include", action="append", default=[], metavar="TAG_OR_OPERATION",
        help="offer only these tags or operationIds; repeatable",
    )  # fmt: skip
    add.add_argument(
        "--exclude", action="append", default=[], metavar="TAG_OR_OPERATION",
        help="never offer these tags or operationIds; repeatable",
    )  # fmt: skip
    add.add_argument(
        "--identity", choices=("signed", "forward"), default="signed",
        help="signed: a JWT per call with the toolset's secret; forward: the user's own token",
    )  # fmt: skip
    add.add_argument(
        "--category", action="append", type=_pair("=", last=True), default=[],
        metavar="OPERATION=CATEGORY", help="one operation's category; repeatable",
    )  # fmt: skip
    add.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per request")


def _mcp_add(add: argparse.ArgumentParser) -> None:
    where = add.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", metavar="URL", help="a streamable-HTTP MCP server")
    where.add_argument(
        "--command",
        dest="program",  # "command" is the bosun command's own
        nargs=argparse.REMAINDER,
        metavar="PROGRAM [ARG ...]",
        help="a stdio MCP server this service runs (last: the rest of the line is the command)",
    )
    add.add_argument(
        "--header", action="append", type=_pair(":"), default=[], metavar="'NAME: VALUE'",
        help="with --url: a header sent to the server (stored encrypted); repeatable",
    )  # fmt: skip
    add.add_argument(
        "--env", action="append", type=_pair("="), default=[], metavar="NAME=VALUE",
        help="with --command: an environment variable (stored encrypted); repeatable",
    )  # fmt: skip
    add.add_argument(
        "--category", choices=("read", "write", "destructive"),
        help="every tool's category (default: from each tool's annotations)",
    )  # fmt: skip
    add.add_argument(
        "--tool-category", action="append", type=_pair("=", last=True), default=[],
        metavar="TOOL=CATEGORY", help="one tool's category, by its MCP name; repeatable",
    )  # fmt: skip
    add.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per call")
    add.add_argument("--disabled", action="store_true", help="store it, offer none of its tools")


def _pair(separator: str, *, last: bool = False) -> Callable[[str], tuple[str, str]]:
    """An argparse ``type`` splitting ``NAME<separator>VALUE`` (at the last one if
    ``last``); the value's surrounding spaces are dropped."""

    def split(text: str) -> tuple[str, str]:
        name, found, value = text.rpartition(separator) if last else text.partition(separator)
        if not found or not name.strip():
            raise argparse.ArgumentTypeError(f"expected NAME{separator}VALUE, not {text!r:.60}")
        return name.strip(), value.strip()

    return split


def _plan(commands: _Commands) -> None:
    plan = commands.add_parser(
        "plan", help="planner-only dry run of a message, or --eval a labelled set"
    )
    plan.add_argument("message", nargs="?", help="the message to plan")
    plan.add_argument("--model", metavar="SPEC", help="planner model (default: models.planner)")
    plan.add_argument("--role", default="owner", choices=USER_ROLES, help="plan as this role")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.add_argument("--eval", type=Path, metavar="FILE.jsonl", help="evaluate a labelled set")
    plan.add_argument("--out", type=Path, metavar="REPORT.html", help="with --eval: HTML report")
    plan.add_argument("--concurrency", type=int, default=4, help="with --eval: calls at once")
    _toolset(plan)


def _budget(commands: _Commands) -> None:
    budget = commands.add_parser(
        "budget", help="print a session's token-budget report (per turn and model call)"
    )
    budget.add_argument("session", metavar="SESSION", help="the session id")
    budget.add_argument("--json", action="store_true", help="print the report as JSON")
    budget.add_argument("--html", metavar="FILE", type=Path, help="also write an HTML page")
    _database_url(budget)


def _prune(commands: _Commands) -> None:
    prune = commands.add_parser(
        "prune",
        help="delete finished sessions last active before a cutoff (dry run unless --apply)",
    )
    prune.add_argument(
        "--older-than",
        required=True,
        type=parse_age,
        metavar="AGE",
        help="sessions last active longer ago than this: 90d, 12h, 30m, or days",
    )
    prune.add_argument("--apply", action="store_true", help="delete (default: only report)")
    prune.add_argument("--json", action="store_true", help="print the report as JSON")
    _database_url(prune)


_AGE = re.compile(r"(?P<amount>\d+)(?P<unit>[dhm]?)", re.ASCII)
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "": "days"}


def parse_age(value: str) -> timedelta:
    """``90d``, ``12h``, ``30m`` or a plain number of days, as an argparse ``type``."""
    match = _AGE.fullmatch(value.strip())
    if match is None or not match["amount"].strip("0"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an age: give a positive whole number of days (90d or 90), "
            "hours (12h) or minutes (30m)"
        )
    try:
        age = timedelta(**{_UNITS[match["unit"]]: int(match["amount"])})
        cutoff_for(age)
    except (OverflowError, ValueError):
        raise argparse.ArgumentTypeError(f"{value!r} reaches back too far") from None
    return age


def cutoff_for(age: timedelta) -> datetime:
    """Now minus ``age``, in whole seconds so the cutoff printed is exactly the one used."""
    return datetime.now(UTC).replace(microsecond=0) - age
