"""The README's demo conversation (examples/demo.yaml) runs as documented."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from bosun.app import build_models
from bosun.settings import Settings
from conftest import Server, ServerFactory
from helpers import stream_post, stream_turn, types
from tools.demo import seed_demo, seed_id

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
