"""Notes: a team's own toolset, with its own table."""

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import text

from bosun.tools import (
    Inverse,
    Source,
    SourceRequest,
    ToolContext,
    ToolError,
    ToolRegistry,
    Toolset,
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
    name="notes.add",
    summary="Add a note.",
    category="write",
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
    name="notes",
    tools=tools,
    sources=sources,
    migrations=Path(__file__).parent / "migrations",
    description="the org's notes",
)
