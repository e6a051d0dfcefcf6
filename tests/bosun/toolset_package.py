"""A toolset package as a team would write one, outside Bosun's tree: the tests write these
files into a temporary directory and put it on a real ``bosun serve``'s ``PYTHONPATH``."""

from __future__ import annotations

from pathlib import Path

NOTES = '''
"""Notes: a team's own toolset, with its own table."""
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import text

from bosun.tools import (
    Inverse, Source, SourceRequest, ToolContext, ToolError, ToolRegistry, Toolset,
)

tools = ToolRegistry()


class Nothing(BaseModel):
    pass


class NoteIn(BaseModel):
    text: str


class Note(BaseModel):
    id: str
    text: str


class NoteRef(BaseModel):
    note_id: str


class Notes(BaseModel):
    notes: list[Note]


@tools.tool(name="notes.list", summary="The org's notes.", category="read")
async def list_notes(_args: Nothing, ctx: ToolContext) -> Notes:
    async with ctx.store.db.read() as conn:
        rows = await conn.execute(
            text("SELECT id, text FROM acme_notes WHERE org_id = :org ORDER BY id"),
            {"org": ctx.org_id},
        )
        return Notes(notes=[Note(id=i, text=t) for i, t in rows])


@tools.tool(
    name="notes.add", summary="Add a note.", category="write",
    inverse=Inverse("notes.remove", lambda _args, out: {"note_id": out.id}),
)
async def add_note(args: NoteIn, ctx: ToolContext) -> Note:
    note = Note(id=f"note_{ctx.tool_use_id}", text=args.text)
    async with ctx.store.db.write() as conn:
        await conn.execute(
            text("INSERT INTO acme_notes (id, org_id, text) VALUES (:id, :org, :text)"),
            {"id": note.id, "org": ctx.org_id, "text": note.text},
        )
    return note


@tools.tool(name="notes.remove", summary="Delete a note for good.", category="destructive")
async def remove_note(args: NoteRef, ctx: ToolContext) -> NoteRef:
    async with ctx.store.db.write() as conn:
        done = await conn.execute(
            text("DELETE FROM acme_notes WHERE id = :id AND org_id = :org"),
            {"id": args.note_id, "org": ctx.org_id},
        )
    if done.rowcount == 0:
        raise ToolError("not_found", f"No note {args.note_id!r}")
    return args


def sources(store: Any) -> list[Source]:
    async def count(request: SourceRequest) -> dict[str, Any]:
        async with store.db.read() as conn:
            found = await conn.scalar(
                text("SELECT count(*) FROM acme_notes WHERE org_id = :org"),
                {"org": request.org_id},
            )
        return {"notes": found}

    return [Source(name="notes.count", description="how many notes the org has", fetch=count)]


toolset = Toolset(
    name="notes", tools=tools, sources=sources,
    migrations=Path(__file__).parent / "migrations",
    description="the org's notes",
)
'''

MIGRATION = '''
"""acme notes: the notes table

Revision ID: notes_0001
"""
import sqlalchemy as sa
from alembic import op

revision = "notes_0001"
down_revision = None
branch_labels = ("notes",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "acme_notes",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("acme_notes")
'''

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
    package = root / "acme_notes"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text(NOTES, encoding="utf-8")
    (package / "migrations" / "notes_0001_notes.py").write_text(MIGRATION, encoding="utf-8")
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
