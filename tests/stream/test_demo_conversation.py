"""The README's demo conversation (examples/demo.yaml) runs as documented."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, select, text

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import WorkoutRow
from conftest import Server, ServerFactory
from helpers import Frame, stream_post, stream_turn, types

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
ORG = "dev-org"  # the script names its seeded records
ENGINE = seed_id(ORG, "wo", 4)


async def intro_workouts(server: Server) -> list[str]:
    async with server.store.db.read() as conn:
        query = text("SELECT title FROM workouts WHERE title LIKE 'Intro strength%'")
        return list((await conn.execute(query)).scalars())


async def test_the_demo_plans_runs_steps_in_parallel_writes_undoes_and_confirms(
    make_server: ServerFactory,
) -> None:
    models = build_models(Settings(models={"default": f"scripted:{DEMO}"}))  # type: ignore[arg-type]
    async with make_server(models) as server:
        await seed_demo(server.store, ORG)
        headers = server.auth(org=ORG, role="owner")
        first = await stream_turn(
            server.client, {"message": "Set Sam Rivera up with an intro workout"}, headers
        )
        session = {"session_id": first[0].data["session_id"]}
        workouts = await intro_workouts(server)
        undo = await server.client.post(
            f"/v1/sessions/{session['session_id']}/undo/toolu_create_workout", headers=headers
        )
        workouts_after_undo = await intro_workouts(server)
        second = await stream_turn(
            server.client, {"message": "Delete the Engine builder workout", **session}, headers
        )
        approved = await stream_post(
            server.client,
            f"/v1/sessions/{session['session_id']}/confirm/toolu_delete_workout",
            {"approved": True},
            headers,
        )
        async with server.store.db.read() as conn:
            engine_left = await conn.scalar(
                text("SELECT count(*) FROM workouts WHERE id = :id"), {"id": ENGINE}
            )
        detail = (
            await server.client.get(f"/v1/sessions/{session['session_id']}", headers=headers)
        ).json()

    plan = next(f.data for f in first if f.event == "plan_created")
    assert plan["strategy"] == "complex" and [s["id"] for s in plan["steps"]] == ["s1", "s2", "s3"]
    kinds = types(first)
    starts = {f.data["step_id"]: i for i, f in enumerate(first) if f.event == "step_started"}
    ends = {f.data["step_id"]: i for i, f in enumerate(first) if f.event == "step_completed"}
    assert max(starts["s1"], starts["s2"]) < min(ends["s1"], ends["s2"])  # ran side by side
    assert starts["s3"] > max(ends["s1"], ends["s2"])  # after both
    assert all(first[i].data["ok"] for i in ends.values())
    started = {f.data["tool_use_id"]: f.data["tool"] for f in first if f.event == "tool_started"}
    succeeded = [
        f.data["tool_use_id"] for f in first if f.event == "tool_completed" and f.data["ok"]
    ]
    tools_run = sorted(started[tool_use_id] for tool_use_id in succeeded)
    assert tools_run == ["members.search", "programs.list", "workouts.create"]
    answer = "".join(
        f.data["delta"] for f in first if f.event == "text_delta" and "step_id" not in f.data
    )
    assert answer.startswith("Done: I found Sam Rivera")
    assert kinds[-3:] == ["message_done", "usage", "done"]
    assert workouts == ["Intro strength for Sam"]
    assert detail["title"] == "Sam's intro plan"

    confirmation = next(f.data for f in second if f.event == "confirmation_pending")
    assert (confirmation["tool"], confirmation["input"]) == (
        "workouts.delete",
        {"workout_id": ENGINE},
    )
    assert second[-1].data["status"] == "suspended"
    assert undo.status_code == 200 and undo.json()["ok"] is True
    assert workouts_after_undo == []
    assert [f.event for f in approved][:3] == ["tool_resolved", "tool_started", "tool_completed"]
    assert approved[2].data["ok"] is True and engine_left == 0
    said = "".join(f.data["delta"] for f in approved if f.event == "text_delta")
    assert said == "Deleted the Engine builder workout."
    assert approved[-1].data["status"] == "completed"


# the same script again: tool_use_ids are the script's, so every replay reuses them


@dataclass(frozen=True)
class Played:
    """One pass of the demo conversation in a new session."""

    first: list[Frame]
    undo: httpx.Response
    second: list[Frame]
    approved: list[Frame]
    engine_left: int


async def play_demo(server: Server, org: str) -> Played:
    """The README's conversation as documented: turn 1, undo its write, turn 2, confirm."""
    headers = server.auth(org=org, role="owner")
    first = await stream_turn(
        server.client, {"message": "Set Sam Rivera up with an intro workout"}, headers
    )
    session_id = first[0].data["session_id"]
    undo = await server.client.post(
        f"/v1/sessions/{session_id}/undo/toolu_create_workout", headers=headers
    )
    second = await stream_turn(
        server.client,
        {"message": "Delete the Engine builder workout", "session_id": session_id},
        headers,
    )
    approved = await stream_post(
        server.client,
        f"/v1/sessions/{session_id}/confirm/toolu_delete_workout",
        {"approved": True},
        headers,
    )
    async with server.store.db.read() as conn:
        engine_left = await conn.scalar(
            text("SELECT count(*) FROM workouts WHERE id = :id"), {"id": seed_id(org, "wo", 4)}
        )
    return Played(first, undo, second, approved, int(engine_left or 0))


def completed(frames: list[Frame]) -> list[tuple[str, bool]]:
    return [(f.data["tool_use_id"], f.data["ok"]) for f in frames if f.event == "tool_completed"]


async def engine_row(server: Server) -> dict[str, Any]:
    async with server.store.db.read() as conn:
        row = (await conn.execute(select(WorkoutRow).where(WorkoutRow.id == ENGINE))).one()
    return dict(row._mapping)


async def test_the_demo_replays_in_new_sessions_and_in_another_org(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Twice in one server and database (the README's `make serve`, a second session),
    then in another org: each pass reuses every tool_use_id, and each is its own call."""
    other = "other-org"
    # The script names dev-org's seeded workout; another org deletes its own.
    script = tmp_path / "demo-other-org.yaml"
    script.write_text(DEMO.read_text().replace(ENGINE, seed_id(other, "wo", 4)))
    models = build_models(Settings(models={"default": f"scripted:{DEMO}"}))  # type: ignore[arg-type]
    async with make_server(models) as server:
        await seed_demo(server.store, ORG)
        engine = await engine_row(server)
        runs = [await play_demo(server, ORG)]
        async with server.store.db.write() as conn:  # the first pass deleted it
            await conn.execute(insert(WorkoutRow).values(engine))
        runs.append(await play_demo(server, ORG))
    # Another server over the same database, playing the script for the other org.
    others = build_models(Settings(models={"default": f"scripted:{script}"}))  # type: ignore[arg-type]
    async with make_server(others) as server:
        await seed_demo(server.store, other)
        runs.append(await play_demo(server, other))
        left = await intro_workouts(server)

    assert len({run.first[0].data["session_id"] for run in runs}) == 3
    for run in runs:
        frames = run.first + run.second + run.approved
        assert "tool_use_conflict" not in json.dumps([f.data for f in frames])
        assert sorted(completed(run.first)) == [
            ("toolu_create_workout", True),
            ("toolu_list_programs", True),
            ("toolu_search_sam", True),
        ]
        assert run.first[-1].data["status"] == "completed"
        assert run.undo.status_code == 200, run.undo.text
        assert run.undo.json()["ok"] is True
        assert run.undo.json()["tool_use_id"] == "toolu_create_workout-undo"
        assert types(run.second)[-3:] == ["confirmation_pending", "usage", "done"]
        assert types(run.approved)[:3] == ["tool_resolved", "tool_started", "tool_completed"]
        assert completed(run.approved) == [("toolu_delete_workout", True)]
        assert run.approved[-1].data["status"] == "completed"
        assert run.engine_left == 0
    assert left == []  # every pass's workout was undone
