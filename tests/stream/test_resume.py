"""Confirm, reject and pick resume a suspended turn from its log, over real HTTP.

Each test plans a turn that stops for the user, answers through the API, and checks what
ran (the demo studio's rows), what the model was told, the stream and the turn's status.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import ProgramRow, WorkoutRow
from conftest import Server, ServerFactory
from helpers import Frame, stream_post, stream_turn, types
from providers import ScriptedModel, ToolResult
from turn import TurnModels

ORG = "acme"
ENGINE = seed_id(ORG, "wo", 4)  # "Engine builder"
KNEE = seed_id(ORG, "wo", 2)  # "Knee-friendly conditioning"
RIVERA, OKAFOR = seed_id(ORG, "mem", 0), seed_id(ORG, "mem", 1)
PROGRAMS = [seed_id(ORG, "prg", 2)]  # "Competition Prep", unpublished
PLANNER = "You are the planner"


def plan(strategy: str, *steps: dict[str, Any]) -> dict[str, Any]:
    body = {"strategy": strategy, "reasoning": "test", "steps": list(steps), "executors": 2}
    return {"match": PLANNER, "text": json.dumps(body)}


def step(id: str, goal: str, tools: list[str], **more: Any) -> dict[str, Any]:
    return {"id": id, "goal": goal, "tools": tools, **more}


def calls(goal: str, *tool_calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "match": goal,
        "tool_calls": [{"id": i, "name": n, "input": args} for i, n, args in tool_calls],
    }


def says(goal: str, text: str) -> dict[str, Any]:
    return {"match": goal, "text": text}


def models(*steps: dict[str, Any]) -> tuple[TurnModels, ScriptedModel]:
    model = ScriptedModel(list(steps))
    return TurnModels(executor=model, planner=model), model


async def workouts(server: Server) -> set[str]:
    async with server.store.db.read() as conn:
        rows = await conn.execute(select(WorkoutRow.id).where(WorkoutRow.org_id == ORG))
        return set(rows.scalars())


async def answer(server: Server, session: str, action: str, tool_use_id: str, body: Any) -> Any:
    path = f"/v1/sessions/{session}/{action}/{tool_use_id}"
    return await server.client.post(path, json=body, headers=server.auth(role="owner"))


async def resolve(
    server: Server, session: str, action: str, tool_use_id: str, body: dict[str, Any]
) -> list[Frame]:
    path = f"/v1/sessions/{session}/{action}/{tool_use_id}"
    return await stream_post(server.client, path, body, server.auth(role="owner"))


async def start(server: Server, message: str) -> tuple[str, list[Frame]]:
    await seed_demo(server.store, ORG)
    frames = await stream_turn(server.client, {"message": message}, server.auth(role="owner"))
    return frames[0].data["session_id"], frames


def results_sent(model: ScriptedModel) -> list[ToolResult]:
    """The tool results of the last message the model was sent."""
    return [p for p in model.calls[-1].messages[-1].parts if isinstance(p, ToolResult)]


def status(frames: Sequence[Frame]) -> str:
    assert frames[-1].event == "done"
    return str(frames[-1].data["status"])


DELETE = "Delete the Engine builder workout"
DELETE_CALL = ("t_del", "workouts_delete", {"workout_id": ENGINE})


async def test_approving_runs_the_call_and_the_turn_streams_on(make_server: ServerFactory) -> None:
    turn, model = models(
        plan("tool", step("s1", DELETE, ["workouts.delete"])),
        calls(DELETE, DELETE_CALL),
        says(DELETE, "Deleted it."),
    )
    async with make_server(turn) as server:
        session, first = await start(server, "delete the engine builder workout")
        assert ENGINE in await workouts(server)  # suspended: nothing ran
        frames = await resolve(server, session, "confirm", "t_del", {"approved": True})
        gone = ENGINE not in await workouts(server)
        log = (await server.client.get(
            f"/v1/sessions/{session}/events", headers=server.auth(role="owner")
        )).json()["events"]  # fmt: skip
        row = await server.store.tool_executions.latest("t_del", session_id=session)

    assert status(first) == "suspended" and "confirmation_pending" in types(first)
    assert types(frames)[:3] == ["tool_resolved", "tool_started", "tool_completed"]
    assert frames[0].data == {"type": "tool_resolved", "tool_use_id": "t_del",
                              "decision": "approved"}  # fmt: skip
    assert frames[2].data["ok"] is True and frames[2].data["output"]["id"] == ENGINE
    assert "".join(f.data["delta"] for f in frames if f.event == "text_delta") == "Deleted it."
    assert types(frames)[-3:] == ["message_done", "usage", "done"] and status(frames) == "completed"
    assert gone and row is not None and row.status == "succeeded"
    [sent] = results_sent(model)
    assert sent.tool_use_id == "t_del" and not sent.is_error and ENGINE in sent.content
    # The suspension is in the log for the resume, never on the stream.
    assert "turn_suspended" in [e["type"] for e in log]
    assert "turn_suspended" not in types(first) + types(frames)
    # One turn: the resumed events carry on after the first part's.
    assert frames[0].id > first[-1].id
    model.assert_complete()


async def test_rejecting_tells_the_model_and_changes_nothing(make_server: ServerFactory) -> None:
    turn, model = models(
        plan("tool", step("s1", DELETE, ["workouts.delete"])),
        calls(DELETE, DELETE_CALL),
        says(DELETE, "Understood, I left it."),
    )
    async with make_server(turn) as server:
        session, _ = await start(server, "delete the engine builder workout")
        frames = await resolve(server, session, "confirm", "t_del", {"approved": False})
        kept = ENGINE in await workouts(server)
        row = await server.store.tool_executions.latest("t_del", session_id=session)

    completed = next(f.data for f in frames if f.event == "tool_completed")
    assert completed["ok"] is False and completed["error"]["code"] == "rejected_by_user"
    assert kept and row is not None and row.status == "rejected_by_user"
    [sent] = results_sent(model)
    assert sent.is_error and "rejected_by_user" in sent.content
    assert status(frames) == "completed"


async def test_two_confirmations_in_one_message_resume_once_both_are_answered(
    make_server: ServerFactory,
) -> None:
    goal = "Delete a workout and publish a program"
    turn, model = models(
        plan("tool", step("s1", goal, ["workouts.delete", "programs.publish_bulk"])),
        calls(goal, DELETE_CALL, ("t_pub", "programs_publish_bulk", {"program_ids": PROGRAMS})),
        says(goal, "Both done."),
    )
    async with make_server(turn) as server:
        session, first = await start(server, "delete engine builder, publish comp prep")
        partial = await resolve(server, session, "confirm", "t_pub", {"approved": True})
        untouched = ENGINE in await workouts(server)
        calls_before = len(model.calls)
        rest = await resolve(server, session, "confirm", "t_del", {"approved": True})
        async with server.store.db.read() as conn:
            published = await conn.scalar(
                select(ProgramRow.published).where(ProgramRow.id == PROGRAMS[0])
            )
        gone = ENGINE not in await workouts(server)

    pending = [f.data["tool_use_id"] for f in first if f.event == "confirmation_pending"]
    assert pending == ["t_del", "t_pub"]
    # The first answer is recorded and the turn stays suspended: nothing runs yet.
    assert types(partial) == ["tool_resolved", "done"] and status(partial) == "suspended"
    assert untouched and calls_before == 2  # the planner and the executor, nothing since
    # The last answer resumes: both calls run in message order, one message of results.
    started = [f.data["tool_use_id"] for f in rest if f.event == "tool_started"]
    assert started == ["t_del", "t_pub"] and status(rest) == "completed"
    assert [r.tool_use_id for r in results_sent(model)] == ["t_del", "t_pub"]
    assert gone and published is True


PICK = "Find which Sam to book"
PICK_CALL = (
    "t_pick",
    "ui_ask_user_to_pick",
    {
        "kind": "member",
        "prompt": "Which Sam?",
        "candidates": [
            {"id": RIVERA, "label": "Sam Rivera"},
            {"id": OKAFOR, "label": "Sam Okafor"},
        ],
    },
)


async def test_a_pick_must_be_a_candidate_and_the_model_gets_it(
    make_server: ServerFactory,
) -> None:
    turn, model = models(
        plan("tool", step("s1", PICK, ["ui.ask_user_to_pick"])),
        calls(PICK, PICK_CALL),
        says(PICK, "Booking Sam Okafor."),
    )
    async with make_server(turn) as server:
        session, first = await start(server, "book Sam")
        wrong = await answer(server, session, "pick", "t_pick", {"id": "mem_nobody"})
        still_pending = await server.store.tool_executions.latest("t_pick", session_id=session)
        frames = await resolve(server, session, "pick", "t_pick", {"id": OKAFOR})

    asked = next(f.data for f in first if f.event == "disambiguation_pending")
    assert [c["id"] for c in asked["candidates"]] == [RIVERA, OKAFOR]
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "invalid_pick"
    assert RIVERA in wrong.json()["error"]["message"]
    assert still_pending is not None and still_pending.status == "pending"
    assert frames[0].data == {"type": "tool_resolved", "tool_use_id": "t_pick",
                              "decision": "picked", "picked_id": OKAFOR}  # fmt: skip
    completed = next(f.data for f in frames if f.event == "tool_completed")
    assert completed["output"] == {"id": OKAFOR, "label": "Sam Okafor", "kind": "member"}
    [sent] = results_sent(model)
    assert OKAFOR in sent.content and status(frames) == "completed"


async def test_a_second_answer_is_a_conflict_and_wrong_answers_are_clear(
    make_server: ServerFactory,
) -> None:
    turn, _ = models(
        plan("tool", step("s1", DELETE, ["workouts.delete"])),
        calls(DELETE, DELETE_CALL),
        says(DELETE, "Deleted it."),
    )
    async with make_server(turn) as server:
        session, _ = await start(server, "delete the engine builder workout")
        as_pick = await answer(server, session, "pick", "t_del", {"id": ENGINE})
        not_bool = await answer(server, session, "confirm", "t_del", {"approved": "yes"})
        unknown = await answer(server, session, "confirm", "t_nope", {"approved": True})
        other_org = await server.client.post(
            f"/v1/sessions/{session}/confirm/t_del",
            json={"approved": True},
            headers=server.auth(org="globex", role="owner"),
        )
        await resolve(server, session, "confirm", "t_del", {"approved": True})
        again = await answer(server, session, "confirm", "t_del", {"approved": False})
        row = await server.store.tool_executions.latest("t_del", session_id=session)

    assert as_pick.status_code == 400 and "confirm" in as_pick.json()["error"]["message"]
    assert not_bool.status_code == 400
    assert unknown.status_code == 404 and other_org.status_code == 404
    assert again.status_code == 409 and again.json()["error"]["code"] == "tool_already_resolved"
    assert row is not None and row.status == "succeeded"  # the second answer changed nothing


async def test_a_new_message_makes_the_old_question_moot(make_server: ServerFactory) -> None:
    turn, _ = models(
        plan("tool", step("s1", DELETE, ["workouts.delete"])),
        calls(DELETE, DELETE_CALL),
        plan("simple"),
        {"match": "You write the answer", "text": "OK."},
    )
    async with make_server(turn) as server:
        session, _ = await start(server, "delete the engine builder workout")
        await stream_turn(
            server.client,
            {"message": "never mind", "session_id": session},
            server.auth(role="owner"),
        )
        late = await answer(server, session, "confirm", "t_del", {"approved": True})
        kept = ENGINE in await workouts(server)

    assert late.status_code == 409 and late.json()["error"]["code"] == "tool_superseded"
    assert kept


async def test_a_restart_between_suspend_and_confirm_loses_nothing(
    make_server: ServerFactory,
) -> None:
    before, _ = models(
        plan("tool", step("s1", DELETE, ["workouts.delete"])), calls(DELETE, DELETE_CALL)
    )
    async with make_server(before) as server:
        session, first = await start(server, "delete the engine builder workout")
    # A new process: nothing of the first one's memory, only the database.
    after, model = models(says(DELETE, "Deleted it after the restart."))
    async with make_server(after) as server:
        frames = await resolve(server, session, "confirm", "t_del", {"approved": True})
        gone = ENGINE not in await workouts(server)

    assert status(first) == "suspended"
    assert status(frames) == "completed" and gone
    [sent] = results_sent(model)
    assert sent.tool_use_id == "t_del" and ENGINE in sent.content
    # The resumed executor saw the same prompt and the transcript up to the call.
    request = model.calls[0]
    assert DELETE in "".join(b.text for b in request.system) + str(request.messages)
    model.assert_complete()


async def test_a_complex_plan_resumes_its_suspended_step_then_runs_the_rest(
    make_server: ServerFactory,
) -> None:
    look = "List the programs"
    after = "Write a task about the deletion"
    turn, model = models(
        plan(
            "complex",
            step("s1", look, ["programs.list"]),
            step("s2", DELETE, ["workouts.delete"]),
            step("s3", after, ["tasks.create"], depends_on=["s2"]),
        ),
        calls(look, ("t_list", "programs_list", {})),
        says(look, "Three programs."),
        calls(DELETE, DELETE_CALL),
        says(DELETE, "Deleted it."),
        calls(after, ("t_task", "tasks_create", {"title": "Tell coaches: Engine builder gone"})),
        says(after, "Task created."),
        {"match": "You write the answer", "text": "All done."},
    )
    async with make_server(turn) as server:
        session, first = await start(server, "clean up and tell the coaches")
        frames = await resolve(server, session, "confirm", "t_del", {"approved": True})

    done_first = [f.data["step_id"] for f in first if f.event == "step_completed"]
    assert done_first == ["s1"] and status(first) == "suspended"
    assert "s3" not in [f.data["step_id"] for f in first if f.event == "step_started"]
    completed = [(f.data["step_id"], f.data["ok"]) for f in frames if f.event == "step_completed"]
    assert completed == [("s2", True), ("s3", True)]
    started = [f.data["step_id"] for f in frames if f.event == "step_started"]
    assert started == ["s3"]  # s2 goes on, it does not start again
    answer_text = "".join(
        f.data["delta"] for f in frames if f.event == "text_delta" and "step_id" not in f.data
    )
    assert answer_text == "All done." and status(frames) == "completed"
    # The merge saw every step, the one finished before the suspension included.
    last = model.calls[-1]
    merge_request = "".join(b.text for b in last.system) + str(last.messages)
    assert "Three programs." in merge_request and "Task created." in merge_request
    model.assert_complete()
