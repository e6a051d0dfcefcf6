"""The per-turn budget reaches the executors: a turn ends with an answer, not an error,
when its steps' shares run out (tool calls, wall time)."""

from __future__ import annotations

import asyncio
import json
import uuid

from bosun_demo import demo_registry, seed_demo
from events import SessionStarted, UserMessage
from executors import StepShare
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import Store
from turn import Turn, TurnKit, run_turn

ORG = "acme"
GOAL = "List the programs, one call at a time"
STEP = {"id": "s1", "goal": GOAL, "tools": ["programs.list"], "max_tool_calls": 8}
PLAN = {"strategy": "tool", "reasoning": "reads", "steps": [STEP]}


def model(delay_s: float = 0.0) -> FunctionModel:
    """Plans one step, then keeps listing programs until tools are turned off."""

    async def reply(request: ModelRequest) -> Reply:
        await asyncio.sleep(delay_s)
        if any("You are the planner" in b.text for b in request.system):
            return Reply(text=json.dumps(PLAN))
        if request.tool_choice == "none":
            return Reply(text="Here is what I found so far.")
        turn = sum(m.role == "assistant" for m in request.messages)
        return Reply(tool_calls=(ToolCall(id=f"c{turn}", name="programs_list", input={}),))

    return FunctionModel(reply)


async def start(store: Store, chosen: FunctionModel, timeout_s: float = 30.0) -> Turn:
    await seed_demo(store, ORG)
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="m", text="list programs")],
        turn_id=turn_id, trace_id="t",
    )  # fmt: skip
    return Turn(session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG,
                user_id="ada", role="owner", message_id="m", text="list programs",
                model=chosen, planner=chosen, timeout_s=timeout_s)  # fmt: skip


async def test_the_turns_tool_calls_bound_its_step(store: Store) -> None:
    turn = await start(store, model())
    kit = TurnKit(tools=demo_registry(), turn_budget=StepShare(tool_calls=3))

    status = await run_turn(store, turn, kit)

    log = await store.log.read(turn.session_id)
    calls = [e for e in log if e.type == "tool_started"]
    step = next(e.data for e in log if e.type == "step_completed")
    assert status == "completed" and len(calls) == 3 and step["tool_calls"] == 3
    assert step["summary"] == "Here is what I found so far."
    end = next(e.data for e in log if e.type == "message_done")
    assert end["stop_reason"] == "turn_budget"  # the answer says what cut it short


async def test_a_slow_step_wraps_up_before_the_turn_times_out(store: Store) -> None:
    turn = await start(store, model(delay_s=0.15), timeout_s=1.5)

    status = await run_turn(store, turn, TurnKit(tools=demo_registry()))

    log = await store.log.read(turn.session_id)
    kinds = [e.type for e in log]
    # The step's wall time is what is left of the turn's (less a closing share): it wraps
    # up in time and the turn ends with its answer, cut short by time; or, when the wrap-up
    # call itself runs out of time, with the step's own code (never provider_timeout).
    assert kinds.count("step_completed") == 1
    if status == "completed":
        assert "error" not in kinds
        end = next(e.data for e in log if e.type == "message_done")
        assert end["stop_reason"] == "time_limit"
    else:
        error = next(e.data for e in log if e.type == "error")
        assert (status, error["code"]) == ("failed", "step_timed_out")
    step = next(e.data for e in log if e.type == "step_completed")
    assert step["duration_ms"] < 1500
