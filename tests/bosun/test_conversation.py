"""``bosun.testing.converse``: a whole conversation with a toolset of one's own (declared
here, with its own migration folder and table) and with the demo toolset, on the server's
own turn, confirm, pick, answer and undo path, on a throwaway database."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

import bosun_demo as demo
from bosun.testing import ActionRefused, ScriptedModel, converse
from bosun.tools import Inverse, ToolContext, ToolDef, ToolError, ToolRegistry, Toolset
from providers import ToolResult
from stream._errors import ApiError
from stream._local import LocalUser

MIGRATION = '''"""notes: the toolset's own table

Revision ID: notes_0001
Revises:
Depends on: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "notes_0001"
down_revision = None
branch_labels = ("notes",)
depends_on = "0001"


def upgrade() -> None:
    op.create_table(
        "notes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("text", sa.String(500), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notes")
'''


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=500)


class NoteRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note_id: str


class Note(BaseModel):
    id: str
    text: str


class Candidate(BaseModel):
    id: str
    label: str


class PickIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = "note"
    prompt: str
    candidates: list[Candidate] = Field(min_length=2, max_length=8)


class Picked(BaseModel):
    id: str
    label: str
    kind: str


class AskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    options: list[str] | None = None


class Answer(BaseModel):
    answer: str


def notes_toolset(deleted: list[str]) -> ToolRegistry:
    """``notes.add`` (undone by ``notes.delete``, which needs the user's confirmation),
    a picker and a question; ``deleted`` records every delete that ran."""
    toolset = ToolRegistry()

    @toolset.tool(
        name="notes.add", summary="Add a note.", category="write",
        inverse=Inverse("notes.delete", lambda _args, out: {"note_id": out.id}),
    )  # fmt: skip
    async def add(args: NoteIn, ctx: ToolContext) -> Note:
        note = Note(id=f"note_{args.text.replace(' ', '_')}", text=args.text)
        async with ctx.store.db.write() as conn:
            await conn.execute(
                text("INSERT INTO notes (id, org_id, text) VALUES (:id, :org, :text)"),
                {"id": note.id, "org": ctx.org_id, "text": note.text},
            )
        return note

    @toolset.tool(name="notes.delete", summary="Delete a note.", category="destructive")
    async def delete(args: NoteRef, ctx: ToolContext) -> None:
        async with ctx.store.db.write() as conn:
            gone = await conn.execute(
                text("DELETE FROM notes WHERE id = :id AND org_id = :org"),
                {"id": args.note_id, "org": ctx.org_id},
            )
        if gone.rowcount == 0:
            raise ToolError("not_found", f"No note {args.note_id!r}")
        deleted.append(args.note_id)

    toolset.register(
        ToolDef(
            name="ui.pick_note",
            summary="Ask the user which note.",
            input_model=PickIn,
            output_model=Picked,
            category="read",
            confirm="never",
            kind="user_picker",
        )
    )
    toolset.register(
        ToolDef(
            name="ui.ask",
            summary="Ask the user a question.",
            input_model=AskIn,
            output_model=Answer,
            category="read",
            confirm="never",
            kind="user_question",
        )
    )
    return toolset


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    folder = tmp_path / "notes_migrations"
    folder.mkdir()
    (folder / "notes_0001_notes.py").write_text(MIGRATION, encoding="utf-8")
    return folder


def plan(*tools: str) -> str:
    """A one-step plan calling ``tools`` (none: answered directly)."""
    if not tools:
        return json.dumps({"strategy": "simple", "reasoning": "chat"})
    step = {"id": "s1", "goal": "Do it", "tools": list(tools), "max_tool_calls": 2}
    return json.dumps({"strategy": "tool", "reasoning": "one step", "steps": [step]})


def call(tool_use_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": tool_use_id, "name": name, "input": args}]}


async def notes(store: Any) -> list[str]:
    async with store.db.read() as conn:
        return list((await conn.execute(text("SELECT text FROM notes ORDER BY text"))).scalars())


async def test_two_turns_share_the_session_and_write_into_the_toolsets_table(
    migrations: Path,
) -> None:
    planner = ScriptedModel([plan("notes.add"), plan()])
    model = ScriptedModel([call("t1", "notes_add", text="buy milk"), "Added it.", "Milk."])
    toolset = Toolset(name="notes", tools=notes_toolset([]), migrations=migrations)
    async with converse(toolsets=[toolset], model=model, planner=planner) as chat:
        first = await chat.send("Note: buy milk")
        second = await chat.send("What did I note?")
        stored = await notes(chat.store)

    assert (first.status, first.answer, second.status, second.answer) == (
        "completed", "Added it.", "completed", "Milk.",
    )  # fmt: skip
    assert first.session_id == second.session_id and first.turn_id != second.turn_id
    [added] = first.runs("notes.add")
    assert (added.ok, added.input, added.inverse_available) == (True, {"text": "buy milk"}, True)
    assert stored == ["buy milk"]  # the toolset's own table, migrated in the throwaway DB
    history = "\n".join(m.text for m in model.calls[-1].messages)
    assert "Note: buy milk" in history and "Added it." in history  # turn 2 sees turn 1
    planner.assert_complete()
    model.assert_complete()


async def test_a_confirmed_delete_runs_once_and_a_rejected_one_never(migrations: Path) -> None:
    deleted: list[str] = []
    planner = ScriptedModel([plan("notes.add"), plan("notes.delete"), plan("notes.delete")])
    model = ScriptedModel([
        call("t1", "notes_add", text="a"), "Added.",
        call("d1", "notes_delete", note_id="note_a"), "Deleted.",
        call("d2", "notes_delete", note_id="note_nope"), "Kept it.",
    ])  # fmt: skip
    async with converse(
        tools=notes_toolset(deleted), model=model, planner=planner, migrations=migrations
    ) as chat:
        added = await chat.send("Add a")
        note_id = added.runs("notes.add")[0].output["id"]
        asked = await chat.send("Delete it")
        assert asked.status == "suspended" and asked.confirmation is not None
        assert asked.confirmation.tool_use_id == "d1" and not deleted  # nothing ran yet
        assert asked.confirmation.input == {"note_id": note_id}
        confirmed = await chat.confirm()
        with pytest.raises(ActionRefused) as again:
            await chat.confirm("d1")  # answered already: the server's 409
        asked_again = await chat.send("Delete note_nope")
        rejected = await chat.reject(asked_again.confirmation.tool_use_id)  # type: ignore[union-attr]

    assert (confirmed.status, confirmed.answer) == ("completed", "Deleted.")
    assert [r.ok for r in confirmed.runs("notes.delete")] == [True]
    assert (again.value.status, again.value.code) == (409, "tool_already_resolved")
    assert (rejected.status, rejected.answer) == ("completed", "Kept it.")
    assert deleted == [note_id]  # once, and the rejected call never ran
    model.assert_complete()


async def test_a_pick_and_an_answer_resume_the_turn(migrations: Path) -> None:
    planner = ScriptedModel([plan("ui.pick_note", "ui.ask")])
    candidates = [{"id": "n1", "label": "Milk"}, {"id": "n2", "label": "Eggs"}]
    model = ScriptedModel([
        call("p1", "ui_pick_note", kind="note", prompt="Which note?", candidates=candidates),
        call("q1", "ui_ask", question="Which day?", options=["Mon", "Tue"]),
        "Eggs on Tuesday.",
    ])  # fmt: skip
    async with converse(
        tools=notes_toolset([]), model=model, planner=planner, migrations=migrations
    ) as chat:
        picking = await chat.send("Move a note")
        with pytest.raises(ActionRefused) as unknown:
            await chat.pick("n9")  # not a candidate: the server's 422, and it still waits
        asking = await chat.pick("n2")
        done = await chat.answer("Tuesday")

    assert (unknown.value.status, unknown.value.code) == (422, "invalid_pick")
    assert picking.status == "suspended" and picking.pick is not None
    assert [c.id for c in picking.pick.candidates] == ["n1", "n2"]
    assert asking.status == "suspended" and asking.question is not None
    assert (asking.question.tool_use_id, asking.question.prompt) == ("q1", "Which day?")
    assert asking.question.options == ("Mon", "Tue")
    assert (done.status, done.answer, done.turn_id) == (
        "completed",
        "Eggs on Tuesday.",
        picking.turn_id,
    )
    results = [p for m in model.calls[-1].messages for p in m.parts if isinstance(p, ToolResult)]
    assert [json.loads(r.content) for r in results] == [
        {"id": "n2", "label": "Eggs", "kind": "note"}, {"answer": "Tuesday"},
    ]  # fmt: skip


async def test_undo_runs_the_inverse(migrations: Path, db_url: str) -> None:
    """On a database of one's own too (SQLite and PostgreSQL), migrated with the toolset."""
    deleted: list[str] = []
    planner = ScriptedModel([plan("notes.add")])
    model = ScriptedModel([call("t1", "notes_add", text="a"), "Added."])
    async with converse(
        tools=notes_toolset(deleted), model=model, planner=planner, migrations=migrations,
        database_url=db_url,
    ) as chat:  # fmt: skip
        added = await chat.send("Add a")
        undone = await chat.undo("t1")
        with pytest.raises(ActionRefused) as twice:
            await chat.undo("t1")
        left = await notes(chat.store)

    note_id = added.runs("notes.add")[0].output["id"]
    assert (undone.ok, undone.undone, undone.tool_use_id) == (True, "t1", "t1-undo")
    assert deleted == [note_id] and left == []  # the inverse ran, without a confirmation
    assert [e.type for e in undone.events] == ["tool_started", "tool_completed"]
    assert twice.value.code == "already_undone"


async def test_a_toolset_without_its_migrations_has_no_table() -> None:
    planner = ScriptedModel([plan("notes.add")])
    model = ScriptedModel([call("t1", "notes_add", text="a"), "Failed."])
    async with converse(tools=notes_toolset([]), model=model, planner=planner) as chat:
        result = await chat.send("Add a")

    [run] = result.runs("notes.add")
    assert run.ok is False and run.error is not None and run.error.code == "tool_failed"


async def test_the_demo_toolset_from_its_yaml_script() -> None:
    """The README's demo conversation (examples/demo.yaml) with the demo toolset (its tools,
    sources and migrations, as the server loads them): a
    plan that creates a workout (undone), then a delete that waits for confirmation."""
    script = Path(__file__).parents[2] / "examples" / "demo.yaml"
    async with converse(toolsets=[demo.toolset()], model=script, org_id="dev-org") as chat:
        await demo.seed_demo(chat.store, "dev-org")
        planned = await chat.send("Set Sam Rivera up with an intro workout")
        undone = await chat.undo("toolu_create_workout")
        deleting = await chat.send("Delete the Engine builder workout")
        deleted = await chat.confirm()

    assert planned.status == "completed" and "Intro strength for Sam" in planned.answer
    assert {r.tool for r in planned.tools} >= {"members.search", "workouts.create"}
    assert undone.ok
    assert deleting.confirmation is not None and deleting.confirmation.tool == "workouts.delete"
    assert (deleted.status, deleted.answer) == ("completed", "Deleted the Engine builder workout.")
    assert [r.ok for r in deleted.runs("workouts.delete")] == [True]


async def test_a_member_is_refused_by_an_agent_for_owners_and_staff_only() -> None:
    """``bosun.testing``'s user acts through the routes' functions: the agent's ``access``
    refuses a member's message (before any model call) and a member's confirmation."""
    model = ScriptedModel.from_file(Path(__file__).parents[2] / "examples" / "demo.yaml")
    staff_only = {"name": "Default", "access": {"chat": ["owner", "staff"], "answer": ["owner"]}}
    async with converse(toolsets=[demo.toolset()], model=model, org_id="dev-org") as chat:
        await demo.seed_demo(chat.store, "dev-org")
        await chat.send("Set Sam Rivera up with an intro workout")
        deleting = await chat.send("Delete the Engine builder workout")  # as the owner
        await chat.store.agents.save("dev-org", "default", staff_only, by="test", create=False)
        member = LocalUser(chat._server.services, replace(chat._user.principal, role="member"))
        calls = len(model.calls)
        with pytest.raises(ApiError) as said:
            await member.send("hello", session_id=None)
        with pytest.raises(ApiError) as confirmed:
            await member.confirm(chat._session(), "toolu_delete_workout", approved=True)
        row = await chat.store.tool_executions.latest(
            "toolu_delete_workout", session_id=chat._session()
        )

    assert deleting.confirmation is not None
    assert (said.value.status, said.value.code) == (403, "forbidden_role")
    assert (confirmed.value.status, confirmed.value.code) == (403, "forbidden_role")
    assert row is not None and row.status == "pending"
    assert len(model.calls) == calls  # no model call
