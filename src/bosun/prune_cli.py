"""``bosun prune --older-than 90d``: delete whole finished sessions idle since before a cutoff
(and the content events the host app reported before it).

A dry run by default: it prints what would go, and only ``--apply`` deletes. The work is
``store.retention.prune``; this module renders the report (``bosun.cli_args`` parses the
age).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from bosun.cli_args import cutoff_for
from bosun.settings import Settings
from store import PruneReport, Store


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
    if report.content_events:
        text += f" and {_count(report.content_events, 'content event')} received before it"
    if report.kept_waiting:
        text += (
            f"; kept {_count(report.kept_waiting, 'older session')} with a turn still running "
            "or waiting for the user"
        )
    text += "."
    if not report.applied and (report.sessions or report.content_events):
        text += " Run again with --apply to delete."
    return text
