"""The import contracts in ``pyproject.toml`` (``lint-imports``, docs/architecture.md) hold
for the real tree, and each one fails when a module breaks it.

A broken case copies the config and the Python files of ``src/`` into a temporary directory,
adds one module that imports the wrong way, and runs ``lint-imports`` there as ``make lint``
does, with the copy first on the import path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(cwd: Path, *, src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def python_only(directory: str, names: list[str]) -> list[str]:
    """A ``copytree`` filter: the packages' Python files, none of their data."""
    return [
        name
        for name in names
        if name == "__pycache__" or (Path(directory, name).is_file() and not name.endswith(".py"))
    ]


def broken_contracts(output: str) -> set[str]:
    return {
        line.removesuffix(" BROKEN") for line in output.splitlines() if line.endswith(" BROKEN")
    }


def test_the_real_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT, src=ROOT / "src")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert broken_contracts(result.stdout) == set()


@pytest.mark.parametrize(
    ("module", "source", "contracts", "named"),
    [
        (
            "store/_upward.py",
            "from turn import TurnRunner\n",
            {"Imports point down the layers"},
            "store._upward -> turn",
        ),
        (
            "context/_http.py",
            "import litestar\n",
            {"Only stream and the composition root know HTTP (litestar, jwt)"},
            "context._http -> litestar",
        ),
        (
            "providers/_persist.py",
            "from store import Store\n",
            {"Providers know no store", "Imports point down the layers"},
            "providers._persist -> store",
        ),
        (
            "tools/_loop.py",
            "def run() -> None:\n    from executors import run_step\n",
            {"Tools drive no loops", "Imports point down the layers"},
            "tools._loop -> executors",
        ),
        (
            "egress/_records.py",
            "from store import Store\n",
            {"Imports point down the layers"},
            "egress._records -> store",
        ),
        (
            "bosun/_demo_wiring.py",
            "from bosun_demo import toolset\n",
            {"No core package imports the demo (a toolset loaded by name)"},
            "bosun._demo_wiring -> bosun_demo",
        ),
        (
            "tools/_fitness.py",
            "def registry() -> None:\n    import bosun_demo._toolset\n",
            {"No core package imports the demo (a toolset loaded by name)"},
            "tools._fitness -> bosun_demo._toolset",
        ),
    ],
    ids=[
        "store-imports-turn",
        "context-imports-litestar",
        "providers-import-store",
        "tools-loop",
        "egress-imports-store",
        "bosun-imports-the-demo",
        "tools-import-the-demo",
    ],
)
def test_a_module_importing_the_wrong_way_breaks_its_contract(
    tmp_path: Path, module: str, source: str, contracts: set[str], named: str
) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=python_only)
    (tmp_path / "src" / module).write_text(source, encoding="utf-8")

    result = lint_imports(tmp_path, src=tmp_path / "src")

    assert result.returncode == 1, result.stdout + result.stderr
    assert contracts <= broken_contracts(result.stdout), result.stdout
    assert named in result.stdout
