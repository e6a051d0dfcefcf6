"""``bosun prune`` as a user runs it: a real process over a real database."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from bosun.cli_args import parse_age
from bosun.prune_cli import render
from events import Done, SessionStarted, TextDelta, TurnStatus, UserMessage
from store import PruneReport, Store
from store._models import SessionRow, utcnow

BOSUN = [sys.executable, "-m", "bosun.cli"]


def bosun(url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = url
    return subprocess.run(
        [*BOSUN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


async def _session(store: Store, *, days_idle: int, status: TurnStatus) -> str:
    """A session with one turn of 4 events that ended with ``status``, idle for a while."""
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [
            SessionStarted(session_id=session_id, turn_id=turn_id),
            UserMessage(message_id="m", text="hi"),
        ],
        turn_id=turn_id,
        trace_id="tr",
    )
    await store.log.append(
        session_id,
        [TextDelta(delta="ok"), Done(session_id=session_id, status=status)],
        turn_id=turn_id,
        finish=status,
    )
    async with store.db.write() as conn:
        await conn.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id)
            .values(updated_at=utcnow() - timedelta(days=days_idle))
        )
    return session_id


@pytest.fixture
async def sessions(store: Store) -> dict[str, str]:
    """Two old finished sessions, an old one waiting for the user and a recent one."""
    return {
        "old": await _session(store, days_idle=120, status="completed"),
        "older": await _session(store, days_idle=400, status="failed"),
        "waiting": await _session(store, days_idle=120, status="suspended"),
        "recent": await _session(store, days_idle=10, status="completed"),
    }


async def _present(store: Store, sessions: dict[str, str]) -> set[str]:
    return {name for name, sid in sessions.items() if await store.sessions.get(sid) is not None}


DRY_RUN = re.compile(
    r"^dry run: would remove 2 sessions \(8 events, 2 turns, 0 tool executions, 0 usage rows\) "
    r"last active before (?P<cutoff>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ); kept 1 older session "
    r"with a turn still running or waiting for the user\. Run again with --apply to delete\.\n$"
)


async def test_a_dry_run_prints_what_would_go_and_deletes_nothing(
    store: Store, sessions: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    started = datetime.now(UTC)
    result = bosun(db_url, tmp_path, "prune", "--older-than", "90d")
    assert result.returncode == 0, result.stderr
    match = DRY_RUN.match(result.stdout)
    assert match, result.stdout
    cutoff = datetime.fromisoformat(match["cutoff"])
    assert abs(cutoff - (started - timedelta(days=90))) < timedelta(seconds=30)
    assert await _present(store, sessions) == set(sessions)


async def test_apply_deletes_the_old_finished_sessions(
    store: Store, sessions: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    result = bosun(db_url, tmp_path, "prune", "--older-than", "90", "--apply")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "removed 2 sessions (8 events, 2 turns, 0 tool executions, 0 usage rows) "
        "last active before "
    )
    assert result.stdout.endswith(
        "; kept 1 older session with a turn still running or waiting for the user.\n"
    )
    assert await _present(store, sessions) == {"waiting", "recent"}
    assert [e.seq for e in await store.log.read(sessions["waiting"])] == [1, 2, 3, 4]

    # A year's cut-off leaves the session idle for 120 days alone.
    again = bosun(db_url, tmp_path, "prune", "--older-than", "365d", "--apply", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["sessions"] == 0


async def test_json_reports_every_count(
    store: Store, sessions: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    result = bosun(db_url, tmp_path, "prune", "--older-than", "200d", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    cutoff = report.pop("cutoff")
    assert report == {
        "applied": False,
        "sessions": 1,
        "events": 4,
        "turns": 1,
        "tool_executions": 0,
        "usage": 0,
        "approvals": 0,
        "artifacts": 0,
        "protocol_threads": 0,
        "content_events": 0,
        "kept_waiting": 0,
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cutoff)
    assert await _present(store, sessions) == set(sessions)


@pytest.mark.parametrize(
    ("value", "age"),
    [
        ("90d", timedelta(days=90)),
        ("90", timedelta(days=90)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        (" 7d ", timedelta(days=7)),
    ],
)
def test_ages_parse(value: str, age: timedelta) -> None:
    assert parse_age(value) == age


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("90x", "'90x' is not an age"),
        ("-5d", "'-5d' is not an age"),
        ("0d", "'0d' is not an age"),
        ("d", "'d' is not an age"),
        ("1.5d", "'1.5d' is not an age"),
        ("999999999999d", "'999999999999d' reaches back too far"),
        ("1000000d", "'1000000d' reaches back too far"),
    ],
)
def test_bad_ages_are_rejected_with_a_reason(value: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse_age(value)


def test_a_bad_age_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bosun.db'}"
    bad = bosun(url, tmp_path, "prune", "--older-than", "3 weeks")
    assert bad.returncode == 2
    assert "argument --older-than: '3 weeks' is not an age" in bad.stderr
    assert "90d" in bad.stderr
    missing = bosun(url, tmp_path, "prune")
    assert missing.returncode == 2
    assert "the following arguments are required: --older-than" in missing.stderr
    assert not (tmp_path / "bosun.db").exists()


def test_a_missing_sqlite_database_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'nope.db'}"
    result = bosun(url, tmp_path, "prune", "--older-than", "90d", "--apply")
    assert result.returncode == 2
    assert "no SQLite database at" in result.stderr
    assert not (tmp_path / "nope.db").exists()


def test_render_counts_singulars_and_says_when_there_is_nothing_to_do() -> None:
    cutoff = datetime(2026, 8, 24, tzinfo=UTC)
    one = PruneReport(
        cutoff=cutoff,
        applied=True,
        sessions=1,
        events=3_401,
        turns=1,
        tool_executions=1,
        usage=1,
    )
    assert render(one) == (
        "removed 1 session (3,401 events, 1 turn, 1 tool execution, 1 usage row) "
        "last active before 2026-08-24T00:00:00Z."
    )
    none = PruneReport(cutoff=cutoff, applied=False, kept_waiting=2)
    assert render(none) == (
        "dry run: would remove 0 sessions (0 events, 0 turns, 0 tool executions, 0 usage rows) "
        "last active before 2026-08-24T00:00:00Z; kept 2 older sessions with a turn still "
        "running or waiting for the user."
    )
    events_only = PruneReport(cutoff=cutoff, applied=False, content_events=40)
    assert render(events_only) == (
        "dry run: would remove 0 sessions (0 events, 0 turns, 0 tool executions, 0 usage rows) "
        "last active before 2026-08-24T00:00:00Z and 40 content events received before it. "
        "Run again with --apply to delete."
    )


def test_an_unmigrated_database_fails_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = bosun(url, tmp_path, "prune", "--older-than", "90d")
    assert result.returncode == 1
    assert "no such table: sessions" in result.stderr
    assert "bosun migrate" in result.stderr
    assert "Traceback" not in result.stderr
