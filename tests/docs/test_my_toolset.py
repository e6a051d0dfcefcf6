"""Tests of a toolset of one's own: a conversation per behaviour, on a throwaway database
with the toolset's table migrated, and scripted models (no network, no server)."""

import json
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from bosun.testing import ActionRefused, Conversation, ScriptedModel, converse
from bosun.tools import Inverse, ToolContext, ToolDef, ToolError, ToolRegistry

# --- the toolset (in your project: its own package, e.g. my_toolset/__init__.py) -------

toolset = ToolRegistry()


class NoteAdd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=200)


class NoteRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note_id: str


class Note(BaseModel):
    id: str
    text: str


@toolset.tool(
    name="notes.add",
    summary="Add a note.",
    category="write",
    inverse=Inverse("notes.delete", lambda _args, out: {"note_id": out.id}),
)
async def add_note(args: NoteAdd, ctx: ToolContext) -> Note:
    note = Note(id=f"note_{args.text.lower().replace(' ', '_')}", text=args.text)
    async with ctx.store.db.write() as conn:
        await conn.execute(
            text("INSERT INTO notes (id, org_id, text) VALUES (:id, :org, :text)"),
            {"id": note.id, "org": ctx.org_id, "text": note.text},
        )
    return note


@toolset.tool(name="notes.delete", summary="Delete a note for good.", category="destructive")
async def delete_note(args: NoteRef, ctx: ToolContext) -> None:
    async with ctx.store.db.write() as conn:
        deleted = await conn.execute(
            text("DELETE FROM notes WHERE id = :id AND org_id = :org"),
            {"id": args.note_id, "org": ctx.org_id},
        )
    if deleted.rowcount == 0:
        raise ToolError("not_found", f"No note {args.note_id!r}", hint="List the notes first")


class Choice(BaseModel):
    id: str
    label: str


class PickNote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = "note"
    prompt: str
    candidates: list[Choice] = Field(min_length=2, max_length=8)


class Picked(BaseModel):
    id: str
    label: str
    kind: str


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    options: list[str] | None = None


class Answer(BaseModel):
    answer: str


# The user in the loop: never run, the turn waits for the user's pick or answer.
toolset.register(
    ToolDef(
        name="notes.pick", summary="Ask the user which note is meant.", input_model=PickNote,
        output_model=Picked, category="read", confirm="never", kind="user_picker",
    )
)  # fmt: skip
toolset.register(
    ToolDef(
        name="notes.ask", summary="Ask the user a question.", input_model=Question,
        output_model=Answer, category="read", confirm="never", kind="user_question",
    )
)  # fmt: skip

# Its table, on an alembic branch of its own (in your project: my_toolset/migrations/).
MIGRATION = """
import sqlalchemy as sa
from alembic import op

revision = "notes_0001"
down_revision = None
branch_labels = ("notes",)
depends_on = "0001"  # Bosun's core schema


def upgrade() -> None:
    op.create_table(
        "notes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("text", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notes")
"""

# --- the tests ---------------------------------------------------------------------------


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    (tmp_path / "notes_0001_notes.py").write_text(MIGRATION, encoding="utf-8")
    return tmp_path


def planned(*tools: str) -> str:
    """The planner's reply: one step that may call ``tools``."""
    step = f'{{"id": "s1", "goal": "Do what the user asks", "tools": {json.dumps(tools)}}}'
    return f'{{"strategy": "tool", "reasoning": "One change.", "steps": [{step}]}}'


def calls(tool_use_id: str, tool: str, **args: object) -> dict[str, object]:
    """An executor's reply calling ``tool`` (its wire name: dots become underscores)."""
    return {"tool_calls": [{"id": tool_use_id, "name": tool, "input": args}]}


async def notes_of(chat: Conversation) -> list[str]:
    """What the toolset's table holds (``chat.store``: the conversation's database)."""
    async with chat.store.db.read() as conn:
        return list((await conn.execute(text("SELECT text FROM notes"))).scalars())


async def test_a_note_is_added_then_undone(migrations: Path) -> None:
    planner = ScriptedModel([planned("notes.add"), '{"strategy": "simple", "reasoning": "Chat."}'])
    model = ScriptedModel([calls("t1", "notes_add", text="Buy milk"), "Noted.", "One note."])
    async with converse(tools=toolset, model=model, planner=planner, migrations=migrations) as chat:
        added = await chat.send("Note: buy milk")
        assert (added.status, added.answer) == ("completed", "Noted.")
        assert [run.output for run in added.runs("notes.add")] == [
            {"id": "note_buy_milk", "text": "Buy milk"}
        ]
        assert await notes_of(chat) == ["Buy milk"]

        later = await chat.send("How many notes?")  # the same session: it sees turn one
        assert later.answer == "One note."
        assert "Note: buy milk" in "\n".join(m.text for m in model.calls[-1].messages)

        undone = await chat.undo("t1")  # runs the declared inverse, notes.delete
        assert undone.ok and await notes_of(chat) == []
    model.assert_complete()


async def test_a_delete_waits_for_the_user(migrations: Path) -> None:
    planner = ScriptedModel(
        [planned("notes.add"), planned("notes.delete"), planned("notes.delete")]
    )
    model = ScriptedModel([
        calls("t1", "notes_add", text="Milk"), "Noted.",
        calls("d1", "notes_delete", note_id="note_milk"), "Kept.",
        calls("d2", "notes_delete", note_id="note_milk"), "Deleted.",
    ])  # fmt: skip
    async with converse(tools=toolset, model=model, planner=planner, migrations=migrations) as chat:
        await chat.send("Note: milk")

        asked = await chat.send("Delete the milk note")
        assert asked.status == "suspended"
        assert asked.confirmation is not None and asked.confirmation.tool == "notes.delete"
        kept = await chat.reject()  # declined: it never runs
        assert kept.answer == "Kept." and await notes_of(chat) == ["Milk"]

        await chat.send("Delete it after all")
        deleted = await chat.confirm()  # approved: it runs, once
        assert deleted.answer == "Deleted." and await notes_of(chat) == []
        with pytest.raises(ActionRefused) as again:
            await chat.confirm("d2")
        assert again.value.code == "tool_already_resolved"


async def test_the_user_picks_a_note_and_answers_a_question(migrations: Path) -> None:
    planner = ScriptedModel([planned("notes.pick", "notes.ask")])
    candidates = [{"id": "note_milk", "label": "Milk"}, {"id": "note_eggs", "label": "Eggs"}]
    model = ScriptedModel([
        calls("p1", "notes_pick", kind="note", prompt="Which note?", candidates=candidates),
        calls("q1", "notes_ask", question="Move it to which day?", options=["Mon", "Tue"]),
        "Eggs moved to Tuesday.",
    ])  # fmt: skip
    async with converse(tools=toolset, model=model, planner=planner, migrations=migrations) as chat:
        picking = await chat.send("Move my note")
        assert picking.pick is not None and [c.label for c in picking.pick.candidates] == [
            "Milk", "Eggs",
        ]  # fmt: skip
        asking = await chat.pick("note_eggs")
        assert asking.question is not None and asking.question.options == ("Mon", "Tue")
        done = await chat.answer("Tuesday")  # the user's next message answers it
        assert (done.status, done.answer) == ("completed", "Eggs moved to Tuesday.")
        assert done.turn_id == picking.turn_id  # one turn, resumed twice
