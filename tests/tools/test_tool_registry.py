"""The tool registry: declarations, policy rules, lookups, schemas and descriptions."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from tools import Inverse, ToolContext, ToolDef, ToolRegistry, UnknownToolError
from tools._registry import ALL_ROLES


class NoteIn(BaseModel):
    member_id: str = Field(description="From members.search")
    note: str | None = None
    title: str = "Note"  # a field named "title" must survive the schema trimming


class NoteOut(BaseModel):
    id: str


class Empty(BaseModel):
    pass


def _tool(name: str = "notes.add", **overrides: Any) -> ToolDef:
    fields: dict[str, Any] = {
        "name": name,
        "summary": "Add a note to a member.",
        "input_model": NoteIn,
        "category": "write",
        **overrides,
    }
    return ToolDef(**fields)


def test_decorator_derives_models_and_registers_the_handler() -> None:
    registry = ToolRegistry()

    @registry.tool(name="notes.add", summary="Add a note to a member.", category="write")
    async def add_note(args: NoteIn, ctx: ToolContext) -> NoteOut:
        return NoteOut(id=args.member_id)

    @registry.tool(name="notes.ping", summary="Check notes are reachable.", category="read")
    def ping(args: Empty, ctx: ToolContext) -> None:
        return None

    add = registry.get("notes.add")
    assert (add.input_model, add.output_model, add.handler) == (NoteIn, NoteOut, add_note)
    assert (add.router, add.action, add.wire_name) == ("notes", "add", "notes_add")
    assert (add.confirm, add.kind, add.inverse, add.roles, add.audit) == (
        "destructive",
        "normal",
        None,
        frozenset({"owner", "staff", "member"}),
        None,
    )
    ping_tool = registry.get("notes.ping")
    assert (ping_tool.input_model, ping_tool.output_model, ping_tool.handler) == (
        Empty,
        None,
        ping,
    )
    assert registry.names() == ["notes.add", "notes.ping"]


def test_decorator_needs_annotated_models() -> None:
    registry = ToolRegistry()
    with pytest.raises(TypeError, match=r"'a\.b': annotate the first parameter of .*bare"):

        @registry.tool(name="a.b", summary="s", category="read")
        async def bare(args, ctx):  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(TypeError, match=r"'a\.c': annotate the return type of .*no_return"):

        @registry.tool(name="a.c", summary="s", category="read")
        async def no_return(args: Empty, ctx: ToolContext):  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(TypeError, match=r"'a\.d': annotate the first parameter"):

        @registry.tool(name="a.d", summary="s", category="read")
        async def not_a_model(args: dict[str, Any], ctx: ToolContext) -> None:
            return None

    assert len(registry) == 0


def test_duplicate_and_colliding_names_are_refused() -> None:
    registry = ToolRegistry([_tool("notes.add")])
    with pytest.raises(ValueError, match=r"A tool named 'notes\.add' is already registered"):
        registry.register(_tool("notes.add"))
    registry.register(_tool("a_b.c"))
    with pytest.raises(ValueError, match=r"'a_b\.c' and 'a\.b_c' share the provider name 'a_b_c'"):
        registry.register(_tool("a.b_c"))
    assert registry.names() == ["notes.add", "a_b.c"]


@pytest.mark.parametrize(
    "name", ["notes", "Notes.add", "notes.add.more", "notes-x.add", "1notes.add", "notes._add", ""]
)
def test_names_must_be_router_dot_action(name: str) -> None:
    with pytest.raises(ValueError, match=r"must be router\.action in lower snake case"):
        _tool(name)


def test_unknown_names_raise_with_close_matches() -> None:
    registry = ToolRegistry([_tool("notes.add"), _tool("notes.archive")])
    with pytest.raises(UnknownToolError) as caught:
        registry.get("notes.ad")
    assert (
        str(caught.value) == "No tool named 'notes.ad'; did you mean 'notes.add', 'notes.archive'?"
    )
    assert isinstance(caught.value, KeyError)
    assert caught.value.code == "unknown_tool"
    with pytest.raises(UnknownToolError, match=r"^No tool named 'zzz'$"):
        registry.get("zzz")
    # The provider-facing name resolves too: the model answers with it.
    assert registry.get("notes_add") is registry.get("notes.add")
    assert [
        "notes.add" in registry,
        "notes_add" in registry,
        "notes.ad" in registry,
        3 in registry,
    ] == [
        True,
        True,
        False,
        False,
    ]


# (category, confirm) -> needs_confirmation; ("destructive", "never") cannot be declared.
CONFIRMATION = [
    ("read", "never", False),
    ("read", "destructive", False),
    ("read", "always", True),
    ("write", "never", False),
    ("write", "destructive", False),
    ("write", "always", True),
    ("destructive", "destructive", True),
    ("destructive", "always", True),
]


@pytest.mark.parametrize(("category", "confirm", "expected"), CONFIRMATION)
def test_needs_confirmation(category: str, confirm: str, expected: bool) -> None:
    assert _tool(category=category, confirm=confirm).needs_confirmation is expected


def test_policy_rules_fail_at_declaration() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"category": "destructive", "confirm": "never"},
            "is destructive, so it must be confirmed",
        ),
        ({"category": "read", "kind": "user_picker", "handler": print}, "is a user picker"),
        ({"category": "write", "kind": "user_picker"}, "is a user picker"),
        ({"category": "read", "audit": "note.added"}, "only reads"),
        ({"category": "read", "inverse": Inverse("notes.remove", lambda a, o: {})}, "only reads"),
        ({"category": "delete"}, r"category must be one of \('read', 'write', 'destructive'\)"),
        ({"confirm": "sometimes"}, "confirm must be one of"),
        ({"kind": "modal"}, "kind must be one of"),
        ({"roles": frozenset()}, "roles must be a non-empty subset"),
        ({"roles": frozenset({"admin"})}, r"not \['admin'\]"),
        ({"summary": "two\nlines"}, "needs a one-line summary"),
        ({"summary": "  "}, "needs a one-line summary"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            _tool(**overrides)
    with pytest.raises(TypeError, match="is not a pydantic model class"):
        _tool(output_model=dict)


def test_describe_at_three_levels() -> None:
    note = _tool(audit="note.added")
    delete = _tool(
        "notes.remove", summary="Remove a note.", category="destructive", input_model=Empty
    )
    picker = _tool(
        "ui.pick", summary="Ask.", category="read", kind="user_picker", input_model=Empty
    )
    bulk = _tool("notes.bulk", summary="Bulk.", confirm="always")
    assert [t.describe("name") for t in (note, delete)] == ["notes.add", "notes.remove"]
    assert note.describe("summary") == "notes.add: Add a note to a member."
    assert note.describe() == note.describe("summary")
    assert [t.describe("full") for t in (note, delete, picker, bulk)] == [
        "notes.add(member_id: str, note?: str, title?: str) [write]: Add a note to a member.",
        "notes.remove() [destructive, confirm]: Remove a note.",
        "ui.pick() [asks the user]: Ask.",
        "notes.bulk(member_id: str, note?: str, title?: str) [write, confirm]: Bulk.",
    ]


def test_input_schema_is_trimmed_and_cached() -> None:
    tool = _tool(output_model=NoteOut)
    expected = {
        "properties": {
            "member_id": {"description": "From members.search", "type": "string"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "title": {"default": "Note", "type": "string"},
        },
        "required": ["member_id"],
        "type": "object",
    }
    schema = tool.input_schema()
    assert schema == expected
    schema["properties"].clear()  # callers get a copy: the cache stays intact
    assert tool.input_schema() == expected
    assert tool.output_schema() == {
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
        "type": "object",
    }
    assert _tool().output_schema() is None


def test_filters_by_category_and_role() -> None:
    staff_only = frozenset({"owner", "staff"})
    registry = ToolRegistry(
        [
            _tool("notes.list", category="read"),
            _tool("notes.add", roles=staff_only),
            _tool("notes.remove", category="destructive", roles=frozenset({"owner"})),
            _tool("notes.search", category="read", roles=staff_only),
        ]
    )
    assert [t.name for t in registry] == registry.names()
    assert [t.name for t in registry.read_tools()] == ["notes.list", "notes.search"]
    assert [t.name for t in registry.by_category("write", "destructive")] == [
        "notes.add",
        "notes.remove",
    ]
    assert {role: registry.for_role(role).names() for role in sorted(ALL_ROLES)} == {
        "member": ["notes.list"],
        "owner": ["notes.list", "notes.add", "notes.remove", "notes.search"],
        "staff": ["notes.list", "notes.add", "notes.search"],
    }
    with pytest.raises(UnknownToolError):
        registry.for_role("member").get("notes.add")


def test_validate_checks_inverses() -> None:
    undo = Inverse("notes.remove", lambda args, out: {"note_id": out.id})
    registry = ToolRegistry([_tool(inverse=undo)])
    with pytest.raises(ValueError, match=r"notes\.add: inverse 'notes\.remove' is not registered"):
        registry.validate()
    registry.register(_tool("notes.remove", category="read", confirm="never"))
    with pytest.raises(ValueError, match=r"inverse 'notes\.remove' does not change anything"):
        registry.validate()
    fixed = ToolRegistry([_tool(inverse=undo), _tool("notes.remove", category="destructive")])
    fixed.validate()
    assert undo.build(NoteIn(member_id="m1"), NoteOut(id="n1")) == {"note_id": "n1"}
