"""The tests' PostgreSQL databases, made and dropped without the waits that cost most.

Creating a database takes a tenth of a second; migrating it (alembic) takes one or two,
and dropping it as long again (PostgreSQL waits for a checkpoint). Hundreds of tests do
all three, so:

- a database migrated while it is still empty (``migrate`` in conftest: the ``store`` and
  ``make_server`` fixtures) becomes a copy of one this worker migrated once (``CREATE
  DATABASE ... TEMPLATE``: a block copy, the same schema, revisions and rows as running the
  migrations);
- their commits do not wait for the disk (``ASYNC_COMMIT``);
- databases are dropped on a thread of their own, several at once so that their
  checkpoints coalesce, and the last ones when the worker's session ends (``close``).

A database someone is connected to, or that already has tables, is migrated in place as
before. ``BOSUN_TEST_PG_TEMPLATES=0`` turns the copies off (to compare, or to bisect).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

DROP_AT_ONCE = 4
"""Drops in flight together: one checkpoint serves them all (a burst of drops at the end of
a worker takes about as long as one)."""

ASYNC_COMMIT = 'ALTER DATABASE "{name}" SET synchronous_commit = off'
"""A commit returns before its WAL reaches the disk: what it changes, and when others see
it, is the same; only a crash of the PostgreSQL server could lose it, which no test does
(hundreds of turns commit each event: this spares each commit a disk flush)."""

EMPTY = """select not exists (
    select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'public')"""


def dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


class Dropper:
    """Drops databases on a thread with its own event loop, so a test's teardown never
    waits for PostgreSQL's checkpoint."""

    def __init__(self, admin_url: str) -> None:
        self._admin = dsn(admin_url)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.failures: list[str] = []

    def drop(self, name: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pg-dropper", daemon=True)
            self._thread.start()
        self._queue.put(name)

    def close(self, timeout_s: float = 300) -> None:
        """Drop what is queued and stop (the worker's session ends)."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._loop())
        except Exception as exc:  # a thread must not die with a traceback
            self.failures.append(f"dropper stopped: {exc!r}")

    async def _loop(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < DROP_AT_ONCE:
                    batch.append(self._queue.get_nowait())
            stop = None in batch
            await asyncio.gather(*(self._drop(name) for name in batch if name is not None))

    async def _drop(self, name: str) -> None:
        try:
            admin = await asyncpg.connect(self._admin, timeout=10)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            self.failures.append(f"{name}: {exc!r}")


Migrator = Callable[[str], Awaitable[None]]


class Databases:
    """This worker's test databases: fresh ones, migrated templates, and their drops."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.base = admin_url.rsplit("/", 1)[0]
        self.dropper = Dropper(admin_url)
        self._fresh: set[str] = set()  # created empty, not yet migrated by ``migrated``
        self._templates: dict[bool, str] = {}
        self.use_templates = os.environ.get("BOSUN_TEST_PG_TEMPLATES", "1") != "0"

    async def create(self, admin: asyncpg.Connection) -> str:
        """A new empty database; its URL."""
        name = f"bosun_test_{uuid.uuid4().hex[:12]}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.execute(ASYNC_COMMIT.format(name=name))
        self._fresh.add(name)
        return f"{self.base}/{name}"

    def release(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self._fresh.discard(name)
        self.dropper.drop(name)

    async def migrated(self, url: str, demo: bool, migrate_in_place: Migrator) -> bool:
        """Make ``url`` (a database ``create`` made, still empty) a copy of this worker's
        migrated template; False if it is not such a database (migrate it in place)."""
        name = url.rsplit("/", 1)[1]
        if not self.use_templates or name not in self._fresh:
            return False
        self._fresh.discard(name)
        probe = await asyncpg.connect(dsn(url))
        try:
            if not await probe.fetchval(EMPTY):
                return False
        finally:
            await probe.close()
        template = await self._template(demo, migrate_in_place)
        admin = await asyncpg.connect(dsn(self.admin_url))
        try:
            aside = f"{name}_empty"
            try:  # the name must be free for the copy; dropping would wait for a checkpoint
                await admin.execute(f'ALTER DATABASE "{name}" RENAME TO "{aside}"')
            except asyncpg.ObjectInUseError:
                return False  # the test holds a connection to it
            self.dropper.drop(aside)
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            await admin.execute(ASYNC_COMMIT.format(name=name))
        finally:
            await admin.close()
        return True

    async def _template(self, demo: bool, migrate_in_place: Migrator) -> str:
        if demo not in self._templates:
            name = f"bosun_template_{uuid.uuid4().hex[:12]}"
            admin = await asyncpg.connect(dsn(self.admin_url))
            try:
                await admin.execute(f'CREATE DATABASE "{name}"')
            finally:
                await admin.close()
            await migrate_in_place(f"{self.base}/{name}")
            self._templates[demo] = name
        return self._templates[demo]

    def close(self) -> None:
        """Drop the templates and whatever is still queued; say what could not be dropped."""
        for name in self._templates.values():
            self.dropper.drop(name)
        self._templates.clear()
        self.dropper.close()
        for failure in self.dropper.failures:
            print(f"tests: a PostgreSQL database was not dropped: {failure}", file=sys.stderr)
