"""The SQLite writer thread's group commit: jobs queued together share one transaction with
no savepoints, and a job that fails undoes only its own work (the batch runs again, each
job in a savepoint), while the others commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from store._writer import SqliteThread


def _configure(dbapi_connection: Any) -> None:
    dbapi_connection.execute("PRAGMA journal_mode=WAL")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    return path


def _insert(key: str, *, fail: bool = False) -> Any:
    def job(conn: Connection) -> str:
        conn.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": key})
        if fail:
            raise ValueError(f"{key} fails after its insert")
        return key

    return job


def _statements(writer: SqliteThread) -> list[str]:
    seen: list[str] = []

    @event.listens_for(writer._engine, "before_cursor_execute")
    def _seen(_c: Any, _cur: Any, statement: str, *_args: Any) -> None:
        seen.append(statement.split()[0].upper())

    return seen


async def _batched(writer: SqliteThread, jobs: list[Any]) -> list[Any]:
    """Run ``jobs`` as one batch: a first job holds the thread until all are queued."""
    hold = threading.Event()
    held = writer.submit(lambda conn: hold.wait(5))
    await asyncio.sleep(0.05)  # the thread has taken the holding job
    futures = [writer.submit(job) for job in jobs]
    hold.set()
    await held
    return await asyncio.gather(*futures, return_exceptions=True)


async def test_a_batch_commits_without_savepoints(db: Path) -> None:
    writer = SqliteThread(f"sqlite+aiosqlite:///{db}", _configure)
    statements = _statements(writer)
    try:
        results = await _batched(writer, [_insert("a"), _insert("b"), _insert("c")])
    finally:
        await writer.close()
    with sqlite3.connect(db) as conn:
        keys = [k for (k,) in conn.execute("SELECT k FROM t ORDER BY k")]

    assert results == ["a", "b", "c"] and keys == ["a", "b", "c"]
    assert "SAVEPOINT" not in statements and statements.count("INSERT") == 3


async def test_a_failing_job_undoes_only_its_own_work(db: Path) -> None:
    writer = SqliteThread(f"sqlite+aiosqlite:///{db}", _configure)
    statements = _statements(writer)
    try:
        results = await _batched(writer, [_insert("a"), _insert("b", fail=True), _insert("c")])
    finally:
        await writer.close()
    with sqlite3.connect(db) as conn:
        keys = [k for (k,) in conn.execute("SELECT k FROM t ORDER BY k")]

    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], ValueError)
    assert keys == ["a", "c"]  # b's insert was undone, the others committed
    assert statements.count("SAVEPOINT") == 3  # the second run: each job in its own
