"""Toolsets as plugins: a package outside Bosun's tree, named in configuration alone, is
loaded by a real ``bosun serve`` (its tools planned, called, confirmed and undone over HTTP,
its table migrated); unnamed, neither it nor the demo exists; a name that does not load, or
two toolsets declaring one tool, stop start-up naming them; ``bosun toolsets`` lists them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from pydantic import BaseModel

from bosun._toolsets import ToolsetError, load_toolsets, merge_sources, merge_tools
from bosun.migrate import upgrade
from bosun.tools import (
    ArtifactType,
    Source,
    SourceRequest,
    ToolContext,
    ToolDef,
    ToolRegistry,
    Toolset,
)
from conftest import JWT_SECRET, free_port
from store import Store
from tools import artifact_type
from toolset_package import SCRIPT, write_package

BOSUN = [sys.executable, "-m", "bosun.cli"]


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_package(tmp_path / "site")


@pytest.fixture
def env(tmp_path: Path, package: Path) -> dict[str, str]:
    """No Bosun setting but a database and a secret; the package on the path."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    path = [str(package), *filter(None, [clean.get("PYTHONPATH")])]
    return clean | {
        "BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'plugins.db'}",
        "BOSUN_JWT_SECRET": JWT_SECRET,
        "PYTHONPATH": os.pathsep.join(path),
    }


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOSUN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@dataclass(frozen=True)
class Served:
    url: str
    db: Path

    def headers(self) -> dict[str, str]:
        from stream import TokenConfig, mint_token

        token = mint_token(TokenConfig(JWT_SECRET), user="u1", org="acme", role="owner", ttl_s=600)
        return {"Authorization": f"Bearer {token}"}

    def stream(self, client: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
        with connect_sse(client, "POST", path, json=body, headers=self.headers()) as source:
            assert source.response.status_code == 200, source.response.read()
            return [(s.event, json.loads(s.data)) for s in source.iter_sse()]

    def notes(self) -> list[tuple[str, str]]:
        with closing(sqlite3.connect(self.db)) as db:
            return db.execute("SELECT id, text FROM acme_notes ORDER BY id").fetchall()

    def agent_with(self, client: httpx.Client, tool: str) -> int:
        """Whether the server knows ``tool``: an agent offering it is accepted, or refused."""
        body = {"handle": f"a{time.monotonic_ns()}", "name": "A", "tools": [tool]}
        return client.post("/v1/agents", json=body, headers=self.headers()).status_code


@contextmanager
def serve(env: dict[str, str], cwd: Path, *args: str) -> Iterator[Served]:
    port = free_port()
    process = subprocess.Popen(
        [*BOSUN, "serve", "--port", str(port), "--model", f"scripted:{SCRIPT}", *args],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[0]
                time.sleep(0.05)
        yield Served(url, Path(env["BOSUN_DATABASE_URL"].split("///", 1)[1]))
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_toolset_from_configuration_alone_is_planned_called_confirmed_and_undone(
    env: dict[str, str], tmp_path: Path
) -> None:
    with (
        serve(env | {"BOSUN_TOOLSETS": '["notes"]'}, tmp_path) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        first = server.stream(client, "/v1/chat/stream", {"message": "Note: buy milk"})
        session_id = first[0][1]["session_id"]
        added = server.notes()
        undo = client.post(f"/v1/sessions/{session_id}/undo/toolu_add", headers=server.headers())
        after_undo = server.notes()
        second = server.stream(
            client, "/v1/chat/stream", {"message": "Add and drop one", "session_id": session_id}
        )
        before_approval = server.notes()
        approved = server.stream(
            client, f"/v1/sessions/{session_id}/confirm/toolu_remove", {"approved": True}
        )
        known = (
            server.agent_with(client, "notes.add"),
            server.agent_with(client, "members.search"),
        )

    [plan] = [data for kind, data in first if kind == "plan_created"]
    assert plan["steps"][0]["tools"] == ["notes.add", "notes.list"]
    calls = [(d["tool_use_id"], d["ok"], d["output"]) for k, d in first if k == "tool_completed"]
    assert calls == [
        ("toolu_add", True, {"id": "note_toolu_add", "text": "buy milk"}),
        ("toolu_list", True, {"notes": [{"id": "note_toolu_add", "text": "buy milk"}]}),
    ]
    assert first[-1][1] == {"type": "done", "session_id": session_id, "status": "completed"}
    assert added == [("note_toolu_add", "buy milk")]
    assert undo.status_code == 200 and undo.json()["ok"] is True, undo.text
    assert after_undo == []
    [pending] = [data for kind, data in second if kind == "confirmation_pending"]
    assert (pending["tool"], pending["input"]) == ("notes.remove", {"note_id": "note_toolu_add2"})
    assert second[-1][1]["status"] == "suspended"
    assert before_approval == [("note_toolu_add2", "call Sam")]  # nothing removed before "yes"
    removed = [d for k, d in approved if k == "tool_completed"]
    assert [(d["tool_use_id"], d["ok"]) for d in removed] == [("toolu_remove", True)]
    assert approved[-1][1]["status"] == "completed" and server.notes() == []
    assert known[0] in (200, 201) and known[1] == 422  # the demo's tools do not exist


def test_without_toolsets_neither_its_tools_nor_the_demos_exist(
    env: dict[str, str], tmp_path: Path
) -> None:
    with (
        serve(env, tmp_path) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        known = [server.agent_with(client, t) for t in ("notes.add", "members.search")]
    assert known == [422, 422]
    with closing(sqlite3.connect(server.db)) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert "acme_notes" not in tables and "workouts" not in tables and "sessions" in tables


def test_a_name_that_does_not_load_stops_start_up_naming_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    missing = run(["serve", "--toolset", "nosuch"], env, tmp_path)
    broken = run(["serve"], env | {"BOSUN_TOOLSETS": '["acme_nowhere:toolset"]'}, tmp_path)
    wrong = run(["serve", "--toolset", "acme_notes:tools"], env, tmp_path)
    failing = run(["serve", "--toolset", "acme_notes:Note"], env, tmp_path)
    migrate = run(["migrate", "--toolset", "nosuch"], env, tmp_path)

    assert missing.returncode == broken.returncode == wrong.returncode == failing.returncode == 2
    assert "No toolset 'nosuch'" in missing.stderr and "notes" in missing.stderr  # installed
    assert "Toolset 'acme_nowhere:toolset' did not load: ModuleNotFoundError" in broken.stderr
    assert "Toolset 'acme_notes:tools' is a ToolRegistry, not a bosun.tools.Toolset" in wrong.stderr
    assert "Toolset 'acme_notes:Note' did not load: ValidationError" in failing.stderr
    assert migrate.returncode == 2 and "nosuch" in migrate.stderr
    assert not (tmp_path / "plugins.db").exists()  # nothing started, nothing migrated


def test_two_toolsets_declaring_one_tool_stop_start_up_naming_both(
    env: dict[str, str], tmp_path: Path
) -> None:
    clash = run(["serve", "--toolset", "notes", "--toolset", "acme_clash:make"], env, tmp_path)
    assert clash.returncode == 2
    assert (
        "Tool 'notes.list' of toolset 'clash' collides with tool 'notes.list' of toolset "
        "'notes'" in clash.stderr
    )


def test_bosun_toolsets_lists_the_loaded_and_the_installed(
    env: dict[str, str], tmp_path: Path
) -> None:
    none = run(["toolsets"], env, tmp_path)
    listed = run(["toolsets"], env | {"BOSUN_TOOLSETS": '["notes", "demo"]'}, tmp_path)

    assert none.returncode == listed.returncode == 0, none.stderr + listed.stderr
    assert none.stdout.startswith("loaded: none")
    lines = listed.stdout.splitlines()
    assert lines[0] == "loaded:"
    assert lines[1].split("\t")[:3] == ["  notes", "notes", "3 tools, migrations " + str(
        Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "acme_notes" / "migrations"
    )]  # fmt: skip
    assert lines[2].strip() == "notes.list, notes.add, notes.remove"
    assert lines[3].startswith("  demo\tdemo\t") and "members.search" in lines[4]
    installed = lines[lines.index("installed:") + 1 :]
    assert "  demo\tbosun_demo:toolset" in installed and "  notes\tacme_notes:toolset" in installed


def _toolset(name: str, *tools: ToolDef, **fields: Any) -> Toolset:
    return Toolset(name=name, tools=ToolRegistry(tools), **fields)


def _read(name: str) -> ToolDef:
    async def handler(args: BaseModel, _ctx: ToolContext) -> BaseModel:
        return args

    return ToolDef(name=name, summary="x", input_model=BaseModel, category="read", handler=handler)


def test_merging_offers_a_shared_declaration_once_and_refuses_two_of_one_name() -> None:
    shared = _read("message.peek")
    merged = merge_tools([_toolset("a", shared, _read("a.one")), _toolset("b", shared)])
    assert merged is not None and merged.names() == ["message.peek", "a.one"]
    assert merge_tools([]) is None  # no toolset: no tools at all
    with pytest.raises(ToolsetError, match=r"'a_b\.c' of toolset 'b' collides with tool 'a\.b_c'"):
        merge_tools([_toolset("a", _read("a.b_c")), _toolset("b", _read("a_b.c"))])  # one wire name


def test_sources_names_and_migrations_are_checked(tmp_path: Path, sqlite_url: str) -> None:
    def sources(_store: Any) -> list[Source]:
        async def fetch(_request: SourceRequest) -> dict[str, Any]:
            return {}

        return [Source(name="shared", description="d", fetch=fetch)]

    clashing = [_toolset("a", sources=sources), _toolset("b", sources=sources)]
    with pytest.raises(
        ToolsetError, match="'shared' is declared by toolset 'a' and by toolset 'b'"
    ):
        merge_sources(clashing, Store(sqlite_url))  # the sources hold it; nothing connects
    with pytest.raises(ValueError, match="must be 1-40 lowercase"):
        Toolset(name="Notes!")
    with pytest.raises(ValueError, match="is no folder"):
        Toolset(name="notes", migrations=tmp_path / "missing")


async def test_a_migrations_folder_must_start_the_toolsets_branch(
    tmp_path: Path, sqlite_url: str
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x_0001.py").write_text(
        'revision = "x_0001"\ndown_revision = None\nbranch_labels = ("other",)\n'
        "depends_on = None\ndef upgrade() -> None: pass\n",
        encoding="utf-8",
    )
    store = Store(sqlite_url)
    try:
        with pytest.raises(ToolsetError, match=r"no migration in .* starts the branch 'x'"):
            await upgrade(store, toolsets=[Toolset(name="x", migrations=tmp_path / "m")])
    finally:
        await store.close()


class _WorkoutA(BaseModel):
    a: int


class _WorkoutB(BaseModel):
    b: int


def _art_a() -> Toolset:
    return Toolset(name="arta", artifact_types=(ArtifactType("t_clash", _WorkoutA, "1"),))


def _art_b() -> Toolset:
    return Toolset(name="artb", artifact_types=(ArtifactType("t_clash", _WorkoutB, "1"),))


def test_two_toolsets_registering_one_artifact_type_stop_start_up() -> None:
    [loaded] = load_toolsets(["test_toolsets:_art_a", "test_toolsets:_art_a"])  # once
    assert artifact_type("t_clash").model is _WorkoutA and loaded.name == "arta"
    with pytest.raises(ToolsetError, match="Toolset 'artb': Artifact type 't_clash' is already"):
        load_toolsets(["test_toolsets:_art_b"])
    with pytest.raises(ToolsetError, match="'test_toolsets:_art_a' and 'test_toolsets:_art_a2'"):
        load_toolsets(["test_toolsets:_art_a", "test_toolsets:_art_a2"])


_art_a2 = _art_a  # a second name for one toolset: two toolsets named "arta"
