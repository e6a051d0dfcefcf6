"""Apply the alembic migrations to a database: the core's, then each loaded toolset's.

The core's scripts (``migrations/versions``, what every deployment needs) are the branch
``core``; a toolset with tables of its own brings a folder of scripts on a branch labelled
with its name (the demo's: ``bosun_demo/migrations``, branch ``demo``). All share one
``alembic_version`` table, so a toolset's tables come when it is first loaded and stay
(with their revision) when it is unloaded: the core and the loaded toolsets migrate
around a branch whose scripts are not known today.

The migration runs on a connection we already hold (``connection.run_sync``), so it works
both from the CLI and inside a running event loop, where alembic's async template's
``asyncio.run`` would fail (FIELD-NOTES.md). alembic itself loads when a migration runs:
a command that imports this module and migrates nothing does not pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from bosun._toolsets import Toolset, ToolsetError
from store import Store

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory


def script_location() -> Path:
    """The migration scripts: packaged in a wheel, or the checkout's ``migrations/``."""
    packaged = Path(str(resources.files("bosun"))) / "migrations"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    assert checkout.is_dir(), f"migrations not found at {packaged} or {checkout}"
    return checkout


def alembic_config(
    connection: Connection | None = None, *, toolsets: Iterable[Toolset] = ()
) -> Config:
    """The core's scripts and those of ``toolsets`` (the ones that bring migrations)."""
    from alembic.config import Config

    location = script_location()
    folders = [location / "versions", *(t.migrations for t in toolsets if t.migrations)]
    config = Config()
    config.set_main_option("script_location", str(location))
    config.set_main_option("path_separator", "os")
    config.set_main_option("version_locations", os.pathsep.join(map(str, folders)))
    config.attributes["connection"] = connection
    return config


MIGRATION_LOCK = 0x626F73756E  # "bosun": the advisory lock key migrations hold on PostgreSQL

CORE_HEAD = "core@head"


async def upgrade(
    store: Store, revision: str = "head", *, toolsets: Sequence[Toolset] = ()
) -> None:
    """Migrate the store's database in one transaction: the core to ``revision`` (``head``:
    the newest), then each of ``toolsets`` with migrations to the head of its branch.

    On PostgreSQL the transaction first takes an advisory lock, so concurrent upgrades
    (several workers starting at once) run one after the other and the later ones find
    nothing to do."""
    branches = [t for t in toolsets if t.migrations]
    targets = [CORE_HEAD if revision == "head" else revision]
    targets += [f"{t.name}@head" for t in branches]

    def _run(connection: Connection) -> None:
        from alembic import command
        from alembic.script import ScriptDirectory

        config = alembic_config(connection, toolsets=branches)
        _check_branches(config, branches)
        with _unknown_revisions_aside(connection, ScriptDirectory.from_config(config)):
            for target in targets:
                command.upgrade(config, target)

    async with store.db.write() as conn:
        if store.dialect == "postgresql":  # workers starting together migrate one at a time
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        await conn.run_sync(_run)


def _check_branches(config: Config, toolsets: Sequence[Toolset]) -> None:
    """Each toolset's folder holds its branch (a script with ``branch_labels`` its name);
    checked by label, since alembic would also read ``x@head`` as a revision id prefix."""
    from alembic.script import ScriptDirectory

    labels = {label for rev in ScriptDirectory.from_config(config).walk_revisions()
              for label in rev.branch_labels}  # fmt: skip
    for toolset in toolsets:
        if toolset.name not in labels:
            raise ToolsetError(
                f"Toolset {toolset.name!r}: no migration in {toolset.migrations} starts the "
                f"branch {toolset.name!r} (its first script needs branch_labels = "
                f"({toolset.name!r},))"
            )


@contextmanager
def _unknown_revisions_aside(connection: Connection, script: ScriptDirectory) -> Iterator[None]:
    """Rows of ``alembic_version`` whose scripts are not known (a toolset no longer loaded)
    are set aside while alembic runs, and put back after, in the same transaction."""
    if "alembic_version" not in inspect(connection).get_table_names():
        yield
        return
    rows = connection.execute(text("SELECT version_num FROM alembic_version"))
    aside = [revision for (revision,) in rows if not _known(script, revision)]
    for revision in aside:
        connection.execute(
            text("DELETE FROM alembic_version WHERE version_num = :v"), {"v": revision}
        )
    yield
    for revision in aside:
        connection.execute(
            text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": revision}
        )


def _known(script: ScriptDirectory, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False
