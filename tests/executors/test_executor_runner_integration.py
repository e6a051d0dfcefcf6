"""The executor with the real ToolRunner, the demo toolset and a real database: reads and
writes run and are recorded, and a destructive call suspends with a pending row."""

from __future__ import annotations

import json
import re
import uuid

from bosun_demo import demo_registry, seed_demo
from events import ConfirmationPending, Event, ToolCompleted
from executor_fakes import counter, per_goal, scope
from executors import ExecutorKit, Suspended, pending_events, run_step
from planner import PlannedStep
from providers import ModelRequest, Reply, ToolCall, ToolResult
from store import Store
from tools import ToolRunner

GOAL = "Log a tempo run for Sam Rivera, then cancel the 7am class"


def _last_result(request: ModelRequest) -> dict[str, object]:
    part = request.messages[-1].parts[0]
    assert isinstance(part, ToolResult) and not part.is_error, part
    loaded: dict[str, object] = json.loads(part.content)
    return loaded


def _log_workout(request: ModelRequest) -> Reply:
    member_id = _last_result(request)["members"][0]["id"]  # type: ignore[index]
    create = {"title": "Tempo run", "duration_min": 40, "member_id": member_id}
    return Reply(tool_calls=(ToolCall(id="tu_create", name="workouts_create", input=create),))


def _cancel(request: ModelRequest) -> Reply:
    assert re.match(r"^wo_", str(_last_result(request)["id"]))
    cancel = {"session_id": "cls_missing", "reason": "coach ill"}
    return Reply(tool_calls=(ToolCall(id="tu_cancel", name="class_sessions_cancel", input=cancel),))


async def test_real_runner_runs_records_and_suspends(store: Store) -> None:
    await seed_demo(store, "acme")
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id="acme", user_id="ada", session_id=session_id, title=None)
    registry = demo_registry()
    search = ToolCall(id="tu_search", name="members_search", input={"query": "sam rivera"})
    model = per_goal({GOAL: [Reply(tool_calls=(search,)), _log_workout, _cancel]})
    executor = ExecutorKit(
        model=model, runner=ToolRunner(registry, store), registry=registry, counter=counter()
    )
    step = PlannedStep(
        id="s1", goal=GOAL, tools=["members.search", "workouts.create", "class_sessions.cancel"]
    )
    events: list[Event] = []

    outcome = await run_step(step, kit=executor, scope=scope(store, session_id=session_id),
                             emit=events.append)  # fmt: skip

    assert isinstance(outcome, Suspended) and outcome.tool_calls == 2
    completed = [e for e in events if isinstance(e, ToolCompleted)]
    assert [(e.tool_use_id, e.ok, e.inverse_available) for e in completed] == [
        ("tu_search", True, False), ("tu_create", True, True),
    ]  # fmt: skip
    assert pending_events(outcome) == [
        ConfirmationPending(tool_use_id="tu_cancel", tool="class_sessions.cancel",
                            input={"session_id": "cls_missing", "reason": "coach ill"},
                            confirm="destructive"),
    ]  # fmt: skip
    rows = {r.tool_use_id: r.status for r in await store.tool_executions.list_for_turn("turn_1")}
    assert rows == {"tu_search": "succeeded", "tu_create": "succeeded", "tu_cancel": "pending"}
