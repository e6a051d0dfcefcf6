"""Shared fixtures: real databases (SQLite file, PostgreSQL) and a real served app.

PostgreSQL comes from ``BOSUN_TEST_POSTGRES_URL`` (an admin URL; each test gets a fresh
database). Tests that need it skip only when no server answers *and* ``CI`` is unset.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import socket
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import uvicorn

import pg_testing
from bosun.app import build_app
from bosun.migrate import upgrade
from bosun.settings import Settings
from bosun.tools import Toolset
from bosun_demo import toolset as demo_toolset
from store import Store
from stream import TokenConfig, mint_token
from turn import TurnModels

TESTS = Path(__file__).resolve().parent
SQLITE_PREFIX = "sqlite+aiosqlite:///"
PG_ADMIN_URL = os.environ.get(
    "BOSUN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres:postgres@127.0.0.1:5432/postgres"
)
JWT_SECRET = "test-secret-" + "x" * 40
DEMO = "bosun_demo:toolset"
"""The demo toolset by module (the suite's servers load it; its entry point ``demo`` is
what an installed Bosun names)."""


LOCAL_HOSTS = frozenset({"127.0.0.1", "::1", "localhost", "0.0.0.0", ""})  # noqa: S104
OPEN_EGRESS = {"allow_private": True}
"""``egress`` settings for test servers: their receivers and MCP servers listen on
127.0.0.1, which the egress guard refuses (tests/egress and the refusal tests pass
their own)."""


class NetworkBlockedError(ConnectionRefusedError):
    """A test tried to reach a host other than this machine."""


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Tests talk to 127.0.0.1 only: any other host fails the test, loudly.

    The attempt raises (so the code under test stops), and since an SDK may turn that
    into a retryable connection error, the test is also failed afterwards by name.
    """
    attempts: list[str] = []

    def check(host: object) -> None:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in LOCAL_HOSTS and not name.startswith("127."):
            attempts.append(name)
            raise NetworkBlockedError(f"tests must not reach {name!r}: use a local fake server")

    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        check(host)
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    def connect(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            check(address[0])  # type: ignore[index]
        real_connect(sock, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/no-network-in-tests")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/no-network-in-tests")
    yield attempts
    if attempts:
        pytest.fail(f"the test tried to reach non-local hosts: {sorted(set(attempts))}")


def _dsn(url: str) -> str:
    return pg_testing.dsn(url)


DATABASES = pg_testing.Databases(PG_ADMIN_URL)
"""This worker's PostgreSQL databases: made, copied from a migrated template and dropped
in the background (tests/pg_testing.py says why)."""


def pytest_sessionfinish() -> None:
    DATABASES.close()


async def _pg_admin() -> asyncpg.Connection | None:
    try:
        return await asyncpg.connect(_dsn(PG_ADMIN_URL), timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL at {PG_ADMIN_URL!r} is unreachable: {exc}")
        return None


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards (in the background)."""
    admin = await _pg_admin()
    if admin is None:
        pytest.skip("no PostgreSQL server reachable (set BOSUN_TEST_POSTGRES_URL)")
    try:
        url = await DATABASES.create(admin)
    finally:
        await admin.close()
    try:
        yield url
    finally:
        DATABASES.release(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'bosun.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'bosun.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def migrate(url: str, *, demo: bool = True) -> None:
    """Migrate ``url`` to the newest schema, the demo's tables included unless ``demo`` is
    off (the suite's servers load the demo toolset, as ``bosun serve --dev`` does).

    A new SQLite file is a copy of one database this run migrated (per ``demo``): the
    same schema and revisions as running the migrations on it, in about a millisecond
    instead of a tenth of a second, which a thousand tests notice. A new PostgreSQL database
    (``postgres_url``) likewise becomes a copy of one migrated once per worker."""
    path = Path(url.removeprefix(SQLITE_PREFIX)) if url.startswith(SQLITE_PREFIX) else None
    if path is not None and not path.exists() and path.parent.is_dir():
        template = await _migrated_sqlite(demo)
        source, target = sqlite3.connect(template), sqlite3.connect(path)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return
    if url.startswith("postgresql") and await DATABASES.migrated(
        url, demo, lambda template: migrate(template, demo=demo)
    ):
        return
    store = Store(url)
    try:
        await upgrade(store, toolsets=_toolsets(demo))
    finally:
        await store.close()


def _toolsets(demo: bool) -> tuple[Toolset, ...]:
    return (demo_toolset(),) if demo else ()


_MIGRATED: dict[bool, Path] = {}


async def _migrated_sqlite(demo: bool) -> Path:
    """An SQLite database migrated to the newest schema, once per run and ``demo``."""
    if demo not in _MIGRATED:
        folder = Path(tempfile.mkdtemp(prefix="bosun-schema-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / f"schema-demo-{demo}.db"
        store = Store(f"{SQLITE_PREFIX}{path}")
        try:
            await upgrade(store, toolsets=_toolsets(demo))
        finally:
            await store.close()
        _MIGRATED[demo] = path
    return _MIGRATED[demo]


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    await migrate(db_url)
    opened = Store(db_url)
    yield opened
    await opened.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A real uvicorn server running the Bosun app on 127.0.0.1, in this event loop."""

    def __init__(self, settings: Settings, models: TurnModels) -> None:
        self.settings = settings
        self.app = build_app(settings, models=models)
        # The socket is bound here and handed to uvicorn, so no other test (another
        # xdist worker) can take the port between choosing it and serving on it.
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says
        # TCP; with socket.socket()'s 0, Nagle held each response's body until the
        # client's delayed ACK, 40 ms a request.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.bind(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_config=None, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.client = httpx.AsyncClient(
            base_url=self.url, timeout=60, limits=httpx.Limits(max_connections=200)
        )

    async def __aenter__(self) -> Server:
        await migrate(self.settings.database_url)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.client.aclose()
        self._server.should_exit = True
        assert self._task is not None
        try:
            await self._task
        finally:
            self._socket.close()

    @property
    def store(self) -> Store:
        store: Store = self.app.state.services.store
        return store

    def token(
        self, *, user: str = "alice", org: str = "acme", role: str = "member", ttl_s: int = 3600
    ) -> str:
        return mint_token(
            TokenConfig(JWT_SECRET),
            user=user,
            org=org,
            role=role,
            ttl_s=ttl_s,  # type: ignore[arg-type]
        )

    def auth(self, **claims: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(**claims)}"}


ServerFactory = Callable[..., Server]


@pytest.fixture
def make_server(db_url: str) -> Iterator[ServerFactory]:
    """Build a served app over the parametrised database with the given models."""

    def factory(
        models: TurnModels | None = None,
        *,
        secrets_key: str | None = None,
        egress: dict[str, bool] | None = None,
        toolsets: list[str] | None = None,
        **limits: float,
    ) -> Server:
        # Tests start many turns quickly as one user: rate limits are off unless asked for.
        limits = {"requests_per_minute": 0, "tokens_per_minute": 0, **limits}
        settings = Settings(
            database_url=db_url,
            jwt_secret=JWT_SECRET,
            secrets_key=secrets_key,  # type: ignore[arg-type]
            limits=limits,  # type: ignore[arg-type]
            egress=egress if egress is not None else OPEN_EGRESS,  # type: ignore[arg-type]
            toolsets=[DEMO] if toolsets is None else toolsets,
        )
        return Server(settings, models or TurnModels())

    yield factory


SLOWEST_FIRST = (
    "stream/test_schemathesis.py",
    "bosun/test_cli.py",
    "stream/test_chat.py",
    "bosun/test_mcp_cli.py",
    "bosun/test_toolsets.py",
    "protocols/test_ai_sdk.py",
    "bosun/test_agents_cli.py",
    "stream/test_client_context.py",
    "protocols/test_ag_ui.py",
    "stream/test_http_errors.py",
    "bosun/test_workers.py",
    "bosun/test_budget_cli.py",
)
"""The slowest modules (``pytest --module-times``), slowest first. ``make test`` hands
modules to its workers in collection order (``--no-loadscope-reorder``), so these start
first and no worker is left running one of them alone at the end; the rest keep their
order. Add a module here when it joins the slowest (README, "Tests")."""

SPLIT = ("stream/test_schemathesis.py",)
"""Modules whose tests share no module fixture and each run for minutes: under ``make
test`` each test is a unit of work of its own (tests/xdist_scheduling.py), so their two
databases' runs go to two workers instead of one after the other."""


def _module(item: pytest.Item) -> str:
    """The item's module as ``SLOWEST_FIRST`` names it: its path under tests/."""
    return item.path.as_posix().removeprefix(TESTS.as_posix() + "/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {module: place for place, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank)))  # stable: else in order


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-times",
        action="store_true",
        help="after the run, list each test module's wall and CPU time, slowest first",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("module_times"):
        from module_times import ModuleTimes

        config.pluginmanager.register(ModuleTimes(), "module-times")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadscope`` (``make test``), with the ``SPLIT`` modules' tests apart."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist_scheduling import SplitScopeScheduling

    return SplitScopeScheduling(config, log, split=SPLIT)  # type: ignore[arg-type]
