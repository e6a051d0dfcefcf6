"""The trainer's tools and message_notify_user through the real runner, on SQLite and
PostgreSQL: artifacts made and revised (new versions, old ones kept), exercises named by id
or order number, protected fields, logging, and notify's payload and warning."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from bosun_demo import demo_registry
from bosun_demo._tables import WorkoutRow
from events import AgentMessage, ArtifactSaved
from store import Store
from tools import (
    ToolCallRequest,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolRunner,
    create_artifact,
    register_artifact_type,
)


def exercise(name: str, kind: str = "reps", **fields: Any) -> dict[str, Any]:
    by_type: dict[str, dict[str, Any]] = {
        "reps": {"sets": 3, "reps": [10, 10, 8], "rest_sec": 60},
        "hold": {"sets": 3, "hold_sec": [30, 30, 30], "rest_sec": 45},
        "duration": {"duration_min": 10},
        "intervals": {"rounds": 8, "work_sec": 20, "rest_sec": 10},
    }
    return {
        "exercise_name": name,
        "exercise_type": kind,
        "muscles_utilized": [
            {"muscle": "Chest", "share": 0.7},
            {"muscle": "Triceps", "share": 0.3},
        ],
        "goals_addressed": [{"goal": "strength", "share": 1.0}],
        "reasoning": "A staple.",
        **by_type[kind],
        **fields,
    }


CHEST = {
    "title": "Quick chest workout",
    "exercises": [
        exercise("Push-up"),
        exercise("Plank", "hold"),
        exercise(
            "Burpees", "intervals", group={"id": "finisher", "type": "circuit", "position": 1}
        ),
    ],
}


@dataclass
class Trainer:
    store: Store
    session_id: str
    runner: ToolRunner
    ctx: ToolContext
    calls: int = 0

    async def run(self, name: str, args: dict[str, Any], session: str | None = None) -> ToolOutcome:
        self.calls += 1
        call = ToolCallRequest(
            tool_use_id=f"toolu_{self.calls}", name=name, input=args,
            session_id=session or self.session_id, turn_id="turn_1",
        )  # fmt: skip
        return await self.runner.run(call, self.ctx)

    async def generate(self) -> str:
        outcome = await self.run("trainer_generate_workout", {"workout": CHEST})
        assert outcome.ok, outcome.error
        return str(outcome.output["artifact_id"])

    async def payload(self, artifact_id: str, version: int | None = None) -> dict[str, Any]:
        record = await self.store.artifacts.get(self.session_id, artifact_id, version)
        assert record is not None
        return record.payload


async def _session(store: Store, org: str = "acme") -> str:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=org, user_id="ada", session_id=session_id, title=None)
    return session_id


@pytest.fixture
async def trainer(store: Store) -> Trainer:
    ctx = ToolContext(store=store, org_id="acme", user_id="ada", role="member")
    return Trainer(store, await _session(store), ToolRunner(demo_registry(), store), ctx)


async def test_generate_workout_makes_an_artifact_and_says_to_deliver_it(trainer: Trainer) -> None:
    outcome = await trainer.run("trainer.generate_workout", {"workout": CHEST})
    assert outcome.ok, outcome.error
    artifact_id = outcome.output["artifact_id"]
    assert artifact_id.startswith("art_") and outcome.output["version"] == 1
    assert outcome.output["exercise_count"] == 3
    text = outcome.as_result_text()
    assert (
        f"IMPORTANT: You MUST now call message_notify_user with artifact_id={artifact_id}" in text
    )
    [event] = outcome.events
    assert isinstance(event, ArtifactSaved)
    assert (event.artifact_id, event.version, event.artifact_type, event.tool_use_id) == (
        artifact_id, 1, "workout", "toolu_1",
    )  # fmt: skip
    exercises = (await trainer.payload(artifact_id))["exercises"]
    assert [e["order"] for e in exercises] == [1, 2, 3]
    assert all(e["id"].startswith("ex_") for e in exercises)
    assert exercises[2]["group"] == {
        "id": "finisher", "type": "circuit", "position": 1, "name": None, "rounds": None,
        "rest_between_rounds_sec": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    [
        exercise("Push-up", sets=None),  # a reps exercise needs its sets
        exercise("Plank", "hold", reps=[10]),  # a hold has no reps
        exercise("Run", "duration", muscles_utilized=[{"muscle": "Wings", "share": 1.0}]),
        exercise("Row", goals_addressed=[{"goal": "strength", "share": 0.3}]),  # sum 0.3
    ],
)
async def test_an_invalid_workout_is_a_typed_refusal(trainer: Trainer, bad: dict[str, Any]) -> None:
    outcome = await trainer.run(
        "trainer.generate_workout", {"workout": {"title": "x", "exercises": [bad]}}
    )
    assert not outcome.ok and outcome.error is not None
    assert outcome.error.code == "invalid_input"
    assert await trainer.store.artifacts.list(trainer.session_id) == []


def _by(ref: str, exercises: list[dict[str, Any]]) -> str:
    """The second exercise, named by its id or by its order number."""
    return exercises[1]["id"] if ref == "id" else "2"


@pytest.mark.parametrize("ref", ["id", "order"])
async def test_swap_adjust_remove_each_make_a_new_version(trainer: Trainer, ref: str) -> None:
    artifact_id = await trainer.generate()
    first = (await trainer.payload(artifact_id))["exercises"]

    swap = {"exercise_id": _by(ref, first), "new_exercise": exercise("Wall sit", "hold")}
    swapped = await trainer.run("trainer.swap_exercise", swap)
    assert swapped.ok, swapped.error
    assert (swapped.output["version"], swapped.output["old_exercise"]) == (2, "Plank")
    second = (await trainer.payload(artifact_id))["exercises"]
    assert second[1]["exercise_name"] == "Wall sit" and second[1]["order"] == 2
    assert second[1]["id"] == swapped.output["new_id"] != first[1]["id"]

    adjust = {"exercise_id": _by(ref, second), "adjustments": {"sets": 4, "hold_sec": [40] * 4}}
    adjusted = await trainer.run("trainer.adjust_exercise", adjust)
    assert adjusted.ok, adjusted.error
    assert adjusted.output["old_values"] == {"sets": 3, "hold_sec": [30, 30, 30]}
    third = (await trainer.payload(artifact_id))["exercises"]
    assert (third[1]["sets"], third[1]["id"]) == (4, second[1]["id"])

    removed = await trainer.run("trainer.remove_exercise", {"exercise_id": _by(ref, third)})
    assert removed.ok, removed.error
    assert (removed.output["version"], removed.output["removed_exercise"]) == (4, "Wall sit")
    fourth = (await trainer.payload(artifact_id))["exercises"]
    assert [(e["exercise_name"], e["order"]) for e in fourth] == [("Push-up", 1), ("Burpees", 2)]

    # Every version stays readable, and each change logged its own artifact event.
    assert [e["exercise_name"] for e in (await trainer.payload(artifact_id, 1))["exercises"]] == [
        "Push-up", "Plank", "Burpees",
    ]  # fmt: skip
    for outcome, version in ((swapped, 2), (adjusted, 3), (removed, 4)):
        [event] = outcome.events
        assert isinstance(event, ArtifactSaved)
        assert (event.artifact_id, event.version) == (artifact_id, version)


@pytest.mark.parametrize("field", ["id", "type", "exercise_type"])
async def test_adjust_refuses_id_and_type(trainer: Trainer, field: str) -> None:
    artifact_id = await trainer.generate()
    outcome = await trainer.run(
        "trainer.adjust_exercise", {"exercise_id": "1", "adjustments": {field: "hold"}}
    )
    assert not outcome.ok and outcome.error is not None
    assert outcome.error.code == "protected_field"
    assert outcome.events == ()
    latest = await trainer.store.artifacts.get(trainer.session_id, artifact_id)
    assert latest is not None and latest.version == 1


async def test_unknown_exercise_and_no_workout_are_typed_errors(trainer: Trainer) -> None:
    none = await trainer.run("trainer.remove_exercise", {"exercise_id": "1"})
    assert none.error is not None and none.error.code == "no_active_workout"
    await trainer.generate()
    missing = await trainer.run("trainer.remove_exercise", {"exercise_id": "9"})
    assert missing.error is not None and missing.error.code == "not_found"
    assert missing.error.hint is not None and "1=ex_" in missing.error.hint


async def test_log_workout_records_it_and_ends_the_current_workout(trainer: Trainer) -> None:
    artifact_id = await trainer.generate()
    done = [{"exercise_id": "1", "sets_done": 3}, {"exercise_id": "3"}]
    logged = await trainer.run("trainer.log_workout", {"completed_exercises": done})
    assert logged.ok, logged.error
    assert (logged.output["logged_count"], logged.output["total_in_workout"]) == (2, 3)
    async with trainer.store.db.read() as conn:
        row = (
            await conn.execute(
                select(WorkoutRow).where(WorkoutRow.id == logged.output["workout_id"])
            )
        ).one()
    assert row.org_id == "acme" and row.title == "Quick chest workout"
    assert "1. Push-up (3 sets)" in row.notes and "3. Burpees" in row.notes
    assert (await trainer.payload(artifact_id))["status"] == "logged"
    after = await trainer.run(
        "trainer.swap_exercise", {"exercise_id": "1", "new_exercise": exercise("Dip")}
    )
    assert after.error is not None and after.error.code == "no_active_workout"


async def test_notify_delivers_the_artifact_payload(trainer: Trainer) -> None:
    artifact_id = await trainer.generate()
    outcome = await trainer.run(
        "message_notify_user", {"message": "Here is your workout", "artifact_id": artifact_id}
    )
    assert outcome.ok, outcome.error
    assert outcome.output["artifact_id"] == artifact_id
    assert outcome.output["artifact"]["id"] == artifact_id
    assert outcome.output["warning"] is None
    [event] = outcome.events
    assert isinstance(event, AgentMessage)
    assert (event.text, event.artifact_id, event.warning) == (
        "Here is your workout",
        artifact_id,
        None,
    )
    assert event.artifact is not None
    assert event.artifact["payload"] == await trainer.payload(artifact_id)
    assert (event.artifact["type"], event.artifact["version"]) == ("workout", 1)


async def test_notify_with_an_unknown_or_foreign_id_still_delivers_with_a_warning(
    trainer: Trainer,
) -> None:
    other_session = await _session(trainer.store, org="other")
    foreign = await trainer.run(
        "trainer.generate_workout", {"workout": CHEST}, session=other_session
    )
    for artifact_id in ("art_" + "0" * 24, foreign.output["artifact_id"]):
        outcome = await trainer.run(
            "message.notify_user", {"message": "Hi", "artifact_id": artifact_id}
        )
        assert outcome.ok, outcome.error
        assert outcome.output["warning"] and artifact_id in outcome.output["warning"]
        [event] = outcome.events
        assert isinstance(event, AgentMessage)
        assert (event.text, event.artifact) == ("Hi", None)
        assert event.warning == outcome.output["warning"]


async def test_artifacts_get_reads_the_payload_on_demand(trainer: Trainer) -> None:
    artifact_id = await trainer.generate()
    await trainer.run("trainer.remove_exercise", {"exercise_id": "1"})
    old = await trainer.run("artifacts.get", {"artifact_id": artifact_id, "version": 1})
    assert old.ok and len(old.output["payload"]["exercises"]) == 3
    latest = await trainer.run("artifacts.get", {"artifact_id": artifact_id})
    assert latest.ok and latest.output["version"] == 2
    missing = await trainer.run("artifacts.get", {"artifact_id": artifact_id, "version": 9})
    assert missing.error is not None and missing.error.code == "not_found"


class Note(BaseModel):
    text: str


async def test_an_artifact_payload_must_match_its_registered_model(trainer: Trainer) -> None:
    register_artifact_type("test_note", Note)
    ctx = ToolContext(
        store=trainer.store, org_id="acme", user_id="ada", role="member",
        session_id=trainer.session_id, turn_id="turn_1", tool_use_id="toolu_x", events=[],
    )  # fmt: skip
    with pytest.raises(ToolError) as refused:
        await create_artifact(ctx, type="test_note", title="t", summary="s", payload={"txt": 1})
    assert refused.value.code == "invalid_artifact"
    made = await create_artifact(
        ctx, type="test_note", title="t", summary="s", payload=Note(text="a")
    )
    assert made.payload == {"text": "a"} and ctx.events is not None and len(ctx.events) == 1
    with pytest.raises(ValueError, match="not registered"):
        await create_artifact(ctx, type="nope", title="t", summary="s", payload=Note(text="a"))
