"""A toolset package as a team would write one, outside Bosun's tree: the README's
(``examples/toolset/acme_notes``) copied into a temporary directory, with a dist-info
folder that installs it as the entry point ``notes``, and a second toolset that clashes."""

from __future__ import annotations

import shutil
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "toolset"
SCRIPT = EXAMPLE / "notes.yaml"

CLASH = '''
"""A second toolset that declares a tool the notes toolset has too."""
from pydantic import BaseModel

from bosun.tools import ToolContext, ToolRegistry, Toolset


class Nothing(BaseModel):
    pass


def make() -> Toolset:
    tools = ToolRegistry()

    @tools.tool(name="notes.list", summary="Someone else's notes.", category="read")
    async def other(_args: Nothing, _ctx: ToolContext) -> Nothing:
        return Nothing()

    return Toolset(name="clash", tools=tools)
'''


def write_package(root: Path) -> Path:
    """``acme_notes`` (a package with its migrations), ``acme_clash`` (a module), and a
    dist-info folder that installs ``acme_notes`` as the entry point ``notes``."""
    shutil.copytree(
        EXAMPLE / "acme_notes", root / "acme_notes", ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "acme_clash.py").write_text(CLASH, encoding="utf-8")
    dist = root / "acme_notes-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-notes\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[bosun.toolsets]\nnotes = acme_notes:toolset\n", encoding="utf-8"
    )
    return root
