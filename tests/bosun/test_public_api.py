"""The front door works from an installed wheel, as the README shows it.

The wheel is built from this checkout and installed (no dependencies) into a temporary
directory; a Python that sees only that directory and the venv's dependencies (not the
checkout's ``src/``, which the editable install puts on the path) imports every front-door
name the README's Python blocks import, and runs the README's Public API example: its
``test_*`` functions, on a throwaway database migrated from the packaged migrations. The
README's snippets import nothing else; ``run_turn`` on your own database leaves the turn
there.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

from pydantic import BaseModel

import bosun.testing
from bosun.events import Done, ToolCompleted, parse_event
from bosun.testing import ScriptedModel, run_turn
from bosun.tools import ToolContext, ToolRegistry
from store import Store

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
INTERNAL = frozenset(
    {
        "context",
        "egress",
        "telemetry",
        "events",
        "executors",
        "planner",
        "providers",
        "store",
        "stream",
        "tools",
        "turn",
    }
)
FRONT_DOOR = frozenset({"bosun.events", "bosun.models", "bosun.testing", "bosun.tools"})

# Runs in the fresh interpreter (``-I -S``: no site-packages, no .pth files, no PYTHON*
# variables), so the path it imports from is exactly the one it is given.
DRIVER = """
import asyncio, json, sys
from pathlib import Path

spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
sys.path[:0] = [spec["target"], *spec["site"]]

import bosun
from bosun.migrate import script_location

for statement in spec["imports"]:
    exec(statement, {})
namespace = {"__name__": "readme_public_api"}
exec(compile(spec["example"], "README.md#public-api", "exec"), namespace)
ran = []
for name, value in list(namespace.items()):
    if name.startswith("test_") and asyncio.iscoroutinefunction(value):
        asyncio.run(value())
        ran.append(name)
ours = {"bosun", *spec["internal"]}
Path(spec["out"]).write_text(json.dumps({
    "bosun": bosun.__file__,
    "migrations": str(script_location()),
    "ran": ran,
    "loaded_from": sorted({
        str(Path(m.__file__).resolve()) for name, m in list(sys.modules.items())
        if name.split(".")[0] in ours and getattr(m, "__file__", None)
    }),
}), encoding="utf-8")
"""


def python_blocks(markdown: str) -> list[str]:
    blocks, block = [], None
    for line in markdown.splitlines():
        if block is None and line.strip() == "```python":
            block = []
        elif block is not None and line.strip() == "```":
            blocks.append("\n".join(block))
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def public_api_example(readme: str) -> str:
    """The first Python block of the README's "Public API" section."""
    assert "\n## Public API\n" in readme, "the README lost its Public API section"
    section = readme.split("\n## Public API\n", 1)[1].split("\n## ", 1)[0]
    return python_blocks(section)[0]


def imports_of(readme: str) -> list[ast.ImportFrom | ast.Import]:
    found: list[ast.ImportFrom | ast.Import] = []
    for block in python_blocks(readme):
        found += [
            n for n in ast.walk(ast.parse(block)) if isinstance(n, ast.Import | ast.ImportFrom)
        ]
    return found


def modules_of(node: ast.ImportFrom | ast.Import) -> list[str]:
    return [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]


def run(*args: str, cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


def test_the_readme_imports_only_the_front_door() -> None:
    readme = README.read_text(encoding="utf-8")

    internal = sorted(
        ast.unparse(node)
        for node in imports_of(readme)
        for module in modules_of(node)
        if module.split(".")[0] in INTERNAL
    )
    bosun = {m for node in imports_of(readme) for m in modules_of(node) if m.startswith("bosun")}

    assert internal == [], "README snippets should import from the front door (bosun.*)"
    assert bosun == FRONT_DOOR  # every front-door module is shown, nothing else of bosun's


def test_the_readme_public_api_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    readme = README.read_text(encoding="utf-8")
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
        "--wheel-dir", str(wheels), str(ROOT), cwd=tmp_path)  # fmt: skip
    [wheel] = wheels.glob("bosun-*.whl")
    run(*pip, "install", "--no-deps", "--no-index", "--no-compile", "--quiet",
        "--target", str(target), str(wheel), cwd=tmp_path)  # fmt: skip
    spec = {
        "target": str(target),
        "site": sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}),
        "imports": [
            ast.unparse(node)
            for node in imports_of(readme)
            if any(m.split(".")[0] == "bosun" for m in modules_of(node))
        ],
        "example": public_api_example(readme),
        "internal": sorted(INTERNAL),
        "out": str(tmp_path / "result.json"),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")

    run(sys.executable, "-I", "-S", "driver.py", "spec.json", cwd=tmp_path)

    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    installed = target.resolve()
    assert Path(result["bosun"]).resolve().is_relative_to(installed)
    outside = [f for f in result["loaded_from"] if not Path(f).is_relative_to(installed)]
    assert outside == []  # nothing of Bosun's came from the checkout
    assert len(spec["imports"]) >= 5 and result["ran"] == [
        "test_the_model_recovers_from_a_tool_error"
    ]
    migrations = Path(result["migrations"])
    assert migrations.is_relative_to(installed) and migrations == installed / "bosun/migrations"
    assert (migrations / "env.py").is_file() and any((migrations / "versions").glob("0001_*.py"))


KIT = (
    "converse",
    "Conversation",
    "TurnResult",
    "Pending",
    "ToolRun",
    "UndoResult",
    "ActionRefused",
)


def test_the_conversation_kit_is_public_and_in_the_readme() -> None:
    row = next(
        line for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `bosun.testing` |")
    )  # fmt: skip
    assert [n for n in KIT if n not in bosun.testing.__all__] == []
    assert [n for n in KIT if f"`{n}`" not in row] == []
    assert all(getattr(bosun.testing, n).__module__.startswith("bosun.") for n in KIT)


class Nothing(BaseModel):
    pass


class Caller(BaseModel):
    org_id: str
    user_id: str
    role: str


async def test_run_turn_on_your_database_leaves_the_session_there(sqlite_url: str) -> None:
    tools = ToolRegistry()

    @tools.tool(name="me.whoami", summary="Who is asking.", category="read")
    async def whoami(_args: Nothing, ctx: ToolContext) -> Caller:
        return Caller(org_id=ctx.org_id, user_id=ctx.user_id, role=ctx.role)

    plan = {"strategy": "tool", "reasoning": "Look.", "steps": [
        {"id": "s1", "goal": "Say who asks", "tools": ["me.whoami"]},
    ]}  # fmt: skip
    model = ScriptedModel([
        json.dumps(plan),
        {"tool_calls": [{"name": "me.whoami", "input": {}}]},
        "You are ada.",
    ])  # fmt: skip

    events = await run_turn(
        "Who am I?", model=model, tools=tools, org_id="acme", user_id="ada", role="member",
        database_url=sqlite_url,
    )  # fmt: skip

    [result] = [e for e in events if isinstance(e, ToolCompleted)]
    assert result.output == {"org_id": "acme", "user_id": "ada", "role": "member"}
    model.assert_complete()
    store = Store(sqlite_url)
    try:
        [session] = await store.sessions.list_for_user(org_id="acme", user_id="ada", limit=5)
        logged = [parse_event(e.data) for e in await store.log.read(session.id)]
    finally:
        await store.close()
    assert events[-1] == Done(session_id=session.id, status="completed")
    assert logged == events and session.title == "Who am I?"  # the turn stays in your database
