"""``bosun prune --older-than 90d``: delete whole finished sessions idle since before a cutoff.

A dry run by default: it prints what would go, and only ``--apply`` deletes. The work is
``store.retention.prune``; this module parses the age and renders the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from bosun.settings import Settings
from store import PruneReport, Store

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


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    prune.add_argument("--database-url", metavar="URL", help="overrides BOSUN_DATABASE_URL")


def run(args: argparse.Namespace, settings: Settings) -> int:
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).exists()):
        print(f"bosun prune: no SQLite database at {url.database!r}", file=sys.stderr)
        return 2
    cutoff = cutoff_for(args.older_than)
    try:
        report = asyncio.run(_prune(settings.database_url, cutoff=cutoff, apply=args.apply))
    except (SQLAlchemyError, OSError) as exc:
        detail = getattr(exc, "orig", None) or exc  # the driver's words, without the SQL
        print(
            f"bosun prune: {url.render_as_string(hide_password=True)} failed: {detail} "
            "(is the server up and the database migrated with `bosun migrate`?)",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    return 0


async def _prune(url: str, *, cutoff: datetime, apply: bool) -> PruneReport:
    store = Store(url)
    try:
        return await store.retention.prune(before=cutoff, apply=apply)
    finally:
        await store.close()


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def render(report: PruneReport) -> str:
    """One sentence: what went (or would go), what stayed, and how to apply a dry run."""
    rows = ", ".join(
        (
            _count(report.events, "event"),
            _count(report.turns, "turn"),
            _count(report.tool_executions, "tool execution"),
            _count(report.usage, "usage row"),
        )
    )
    cutoff = report.cutoff.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    verb = "removed" if report.applied else "dry run: would remove"
    text = f"{verb} {_count(report.sessions, 'session')} ({rows}) last active before {cutoff}"
    if report.kept_waiting:
        text += (
            f"; kept {_count(report.kept_waiting, 'older session')} with a turn still running "
            "or waiting for the user"
        )
    text += "."
    if not report.applied and report.sessions:
        text += " Run again with --apply to delete."
    return text
