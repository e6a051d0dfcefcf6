"""The demo toolset's declarations: names, policies, inverses, schemas."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bosun_demo import demo_registry

STAFF = frozenset({"owner", "staff"})
EVERYONE = frozenset({"owner", "staff", "member"})

# name: (category, confirm, needs_confirmation, kind, inverse, roles, audit)
EXPECTED = {
    "members.search": ("read", "never", False, "normal", None, STAFF, None),
    "members.get": ("read", "never", False, "normal", None, STAFF, None),
    "programs.list": ("read", "never", False, "normal", None, EVERYONE, None),
    "programs.publish_bulk": (
        "write",
        "always",
        True,
        "normal",
        None,
        STAFF,
        "programs.published",
    ),
    "workouts.create": (
        "write",
        "destructive",
        False,
        "normal",
        "workouts.delete",
        STAFF,
        "workout.created",
    ),
    "workouts.update": ("write", "destructive", False, "normal", None, STAFF, "workout.updated"),
    "workouts.delete": (
        "destructive",
        "destructive",
        True,
        "normal",
        None,
        STAFF,
        "workout.deleted",
    ),
    "class_sessions.schedule": (
        "write",
        "destructive",
        False,
        "normal",
        "class_sessions.cancel",
        STAFF,
        "class_session.scheduled",
    ),
    "class_sessions.cancel": (
        "destructive",
        "destructive",
        True,
        "normal",
        None,
        STAFF,
        "class_session.cancelled",
    ),
    "tasks.create": (
        "write",
        "destructive",
        False,
        "normal",
        "tasks.delete",
        STAFF,
        "task.created",
    ),
    "tasks.list": ("read", "never", False, "normal", None, STAFF, None),
    "tasks.complete": ("write", "destructive", False, "normal", None, STAFF, "task.completed"),
    "tasks.delete": ("destructive", "destructive", True, "normal", None, STAFF, "task.deleted"),
    "ui.ask_user_to_pick": ("read", "never", False, "user_picker", None, EVERYONE, None),
    "trainer.generate_workout": ("write", "never", False, "normal", None, EVERYONE, None),
    "trainer.swap_exercise": ("write", "never", False, "normal", None, EVERYONE, None),
    "trainer.adjust_exercise": ("write", "never", False, "normal", None, EVERYONE, None),
    "trainer.remove_exercise": ("write", "never", False, "normal", None, EVERYONE, None),
    "trainer.log_workout": ("write", "never", False, "normal", None, EVERYONE, "workout.logged"),
    "message.notify_user": ("read", "never", False, "normal", None, EVERYONE, None),
    "artifacts.get": ("read", "never", False, "normal", None, EVERYONE, None),
}
TRAINER = [name for name in EXPECTED if name.split(".")[0] in {"trainer", "message", "artifacts"}]


def test_demo_tools_and_their_policies() -> None:
    registry = demo_registry()
    assert {
        t.name: (
            t.category,
            t.confirm,
            t.needs_confirmation,
            t.kind,
            t.inverse and t.inverse.tool,
            t.roles,
            t.audit,
        )
        for t in registry
    } == EXPECTED
    assert registry.names() == list(EXPECTED)
    # Every tool but the picker (which the user answers) has a handler and an output model.
    assert [t.name for t in registry if t.handler is None] == ["ui.ask_user_to_pick"]
    assert [t.name for t in registry if t.output_model is None] == []
    assert registry.for_role("member").names() == [
        "programs.list",
        "ui.ask_user_to_pick",
        *TRAINER,
    ]
    assert demo_registry() is not registry  # fresh each time, so callers may add their own


def test_inverses_build_the_undo_input_from_the_output() -> None:
    registry = demo_registry()
    built = {}
    for name, output in [
        ("workouts.create", {"id": "wo_1", "title": "t", "duration_min": 30}),
        ("class_sessions.schedule", {"id": "cls_1"}),
        ("tasks.create", {"id": "task_1"}),
    ]:
        tool = registry.get(name)
        assert tool.inverse is not None and tool.output_model is not None
        out = tool.output_model.model_construct(**output)
        built[name] = tool.inverse.build(tool.input_model.model_construct(), out)
        registry.get(tool.inverse.tool).input_model.model_validate(built[name])
    assert built == {
        "workouts.create": {"workout_id": "wo_1"},
        "class_sessions.schedule": {"session_id": "cls_1"},
        "tasks.create": {"task_id": "task_1"},
    }


def test_schemas_are_json_and_descriptions_fit_one_line() -> None:
    registry = demo_registry()
    for tool in registry:
        json.dumps(tool.input_schema())
        assert tool.input_schema()["type"] == "object"
        assert tool.input_schema().get("additionalProperties") is False, tool.name
        assert len(tool.summary) <= 120, tool.name
    assert registry.get("members_search").describe("full") == (
        'members.search(query: str, status?: "active"|"paused"|"cancelled", limit?: int): '
        "Find members by name or email; returns ids to use with other tools."
    )
    assert registry.get("workouts.delete").describe("full") == (
        "workouts.delete(workout_id: str) [destructive, confirm]: "
        "Delete a workout for good; the user confirms first."
    )


def test_picker_input_is_held_to_two_to_eight_distinct_candidates() -> None:
    model = demo_registry().get("ui.ask_user_to_pick").input_model

    def candidates(*ids: str) -> list[dict[str, str]]:
        return [{"id": i, "label": f"Sam {i}"} for i in ids]

    ok = model.model_validate(
        {"kind": "member", "prompt": "Which Sam?", "candidates": candidates("a", "b")}
    )
    assert ok.model_dump() == {
        "kind": "member",
        "prompt": "Which Sam?",
        "candidates": [
            {"id": "a", "label": "Sam a", "sublabel": None},
            {"id": "b", "label": "Sam b", "sublabel": None},
        ],
    }
    bad = [
        candidates("a"),
        candidates(*"abcdefghi"),
        candidates("a", "a"),
        [{"id": "a", "label": "A", "extra": 1}, {"id": "b", "label": "B"}],
    ]
    for given in bad:
        with pytest.raises(ValidationError):
            model.model_validate({"prompt": "Which Sam?", "candidates": given})
    with pytest.raises(ValidationError, match="candidate ids must be distinct"):
        model.model_validate({"prompt": "Which?", "candidates": candidates("a", "a")})


def test_inputs_forbid_unknown_fields_and_strip_blanks() -> None:
    search = demo_registry().get("members.search").input_model
    assert search.model_validate({"query": "  Sam "}).model_dump() == {
        "query": "Sam",
        "status": None,
        "limit": 10,
    }
    for bad in ({"query": "   "}, {"query": "Sam", "org_id": "other"}, {"query": "x", "limit": 26}):
        with pytest.raises(ValidationError):
            search.model_validate(bad)
