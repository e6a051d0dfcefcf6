"""The README's demo conversation (examples/demo.yaml) runs as documented."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from bosun.app import build_models
from bosun.settings import Settings
from conftest import ServerFactory
from helpers import stream_turn, types
from tools.demo import seed_demo

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


async def test_the_demo_plans_runs_steps_in_parallel_writes_and_asks_to_confirm(
    make_server: ServerFactory,
) -> None:
    models = build_models(Settings(models={"default": f"scripted:{DEMO}"}))  # type: ignore[arg-type]
    async with make_server(models) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        first = await stream_turn(
            server.client, {"message": "Set Sam Rivera up with an intro workout"}, headers
        )
        session = {"session_id": first[0].data["session_id"]}
        second = await stream_turn(
            server.client, {"message": "Actually, delete that workout", **session}, headers
        )
        detail = (
            await server.client.get(f"/v1/sessions/{session['session_id']}", headers=headers)
        ).json()
        async with server.store.db.read() as conn:
            workouts = (
                (
                    await conn.execute(
                        text("SELECT title FROM workouts WHERE title LIKE 'Intro strength%'")
                    )
                )
                .scalars()
                .all()
            )

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
        {"workout_id": "wo_demo"},
    )
    assert second[-1].data["status"] == "suspended"
