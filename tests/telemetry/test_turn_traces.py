"""A turn as OpenTelemetry sees it: one trace, the GenAI conventions' spans and attributes.

Over the real app and HTTP, with the real SDK exporting to memory: a complex turn whose
two parallel steps are sibling spans, a failing tool call marked with its error code, a
destructive call's confirmation as a span event, and the resume after it in the same
trace; the caller's ``traceparent`` is the parent of the turn's root span, and an error's
``trace_id`` is the trace's id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bosun_demo import seed_demo, seed_id
from conftest import ServerFactory
from helpers import stream_post, stream_turn
from providers import ScriptedModel
from telemetry_testing import Spans, tracing
from turn import TurnModels

ORG = "acme"
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SCHEDULE, DELETE = "Find the member Sam Rivera", "Delete the Engine builder workout"


def script(workout_id: str) -> ScriptedModel:
    plan = {
        "strategy": "complex", "reasoning": "two things at once", "executors": 2,
        "steps": [
            {"id": "s1", "goal": SCHEDULE, "tools": ["members.search"], "max_tool_calls": 2},
            {"id": "s2", "goal": DELETE, "tools": ["workouts.delete"], "max_tool_calls": 1},
        ],
    }  # fmt: skip
    return ScriptedModel([
        {"match": "User request:", "text": json.dumps(plan),
         "usage": {"input_tokens": 700, "output_tokens": 90}},
        {"match": SCHEDULE,  # no query: the runner's check refuses it (invalid_input)
         "tool_calls": [{"id": "toolu_bad", "name": "members_search", "input": {}}]},
        {"match": SCHEDULE, "text": "I could not search: the query was missing.",
         "delay_s": 0.02},  # word by word: the other step runs meanwhile
        {"match": DELETE, "tool_calls": [{
            "id": "toolu_delete", "name": "workouts_delete", "input": {"workout_id": workout_id}}]},
        {"match": DELETE, "text": "Deleted the Engine builder workout."},
        {"match": "You write the answer", "text": "Deleted it; the search failed.",
         "usage": {"input_tokens": 500, "output_tokens": 12, "cache_read_tokens": 300}},
        {"match": "Write a short title", "text": "Cleanup"},
    ])  # fmt: skip


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.fixture
def spans() -> Iterator[Spans]:
    with tracing() as exported:
        yield exported


async def test_a_complex_turn_is_one_trace_of_genai_spans(
    make_server: ServerFactory, spans: Spans
) -> None:
    model = script(seed_id(ORG, "wo", 4))
    async with make_server(TurnModels(executor=model, planner=model)) as server:
        await seed_demo(server.store, ORG)
        headers = server.auth(org=ORG, role="owner")
        first = await stream_turn(
            server.client, {"message": "Clean up for Sam"}, {**headers, "traceparent": TRACEPARENT}
        )
        session_id = first[0].data["session_id"]
        asked = next(f.data for f in first if f.event == "confirmation_pending")
        resumed = await stream_post(
            server.client, f"/v1/sessions/{session_id}/confirm/toolu_delete", {"approved": True},
            headers,
        )  # fmt: skip

    assert asked["tool"] == "workouts.delete" and first[-1].data["status"] == "suspended"
    assert resumed[-1].data["status"] == "completed"
    everything = spans.all()
    assert {f"{s.context.trace_id:032x}" for s in everything} == {CALLER_TRACE}
    first_root, second_root = sorted(
        spans.named("invoke_agent default"), key=lambda s: s.start_time
    )
    # the caller's span is the first attempt's parent; the resume continues the trace
    assert first_root.parent is not None and f"{first_root.parent.span_id:016x}" == CALLER_SPAN
    assert first_root.parent.is_remote and second_root.parent is None
    assert attrs(first_root) | {"bosun.turn.status": "suspended"} == attrs(first_root)
    assert attrs(first_root)["gen_ai.conversation.id"] == session_id
    assert attrs(first_root)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(second_root)["bosun.turn.resumed"] is True
    assert attrs(second_root)["bosun.turn.status"] == "completed"

    under_first = {s.name for s in spans.children(first_root)}
    assert {"plan", "load_context", "execute_step s1", "execute_step s2"} <= under_first
    [planner_call] = spans.children(spans.one("plan"))
    assert planner_call.name == "chat scripted"
    assert attrs(planner_call)["bosun.role"] == "planner"
    assert attrs(planner_call)["gen_ai.usage.input_tokens"] == 700
    assert attrs(planner_call)["gen_ai.usage.output_tokens"] == 90
    assert attrs(planner_call)["gen_ai.response.finish_reasons"] == ("stop",)

    s1 = spans.one("execute_step s1")
    s2_first = next(
        s for s in spans.named("execute_step s2") if s.parent.span_id == first_root.context.span_id
    )
    assert s1.parent.span_id == s2_first.parent.span_id == first_root.context.span_id  # siblings
    assert s1.start_time < s2_first.end_time and s2_first.start_time < s1.end_time  # side by side

    [failed] = [s for s in spans.named("execute_tool members.search")]
    assert failed.parent.span_id == s1.context.span_id
    assert attrs(failed)["gen_ai.tool.call.id"] == "toolu_bad"
    assert attrs(failed)["error.type"] == attrs(failed)["bosun.tool.outcome"] == "invalid_input"
    assert failed.status.status_code.name == "ERROR"
    assert attrs(s1)["bosun.step.failed_tool_calls"] == 1

    deletes = sorted(spans.named("execute_tool workouts.delete"), key=lambda s: s.start_time)
    asking, ran = deletes[0], deletes[-1]
    assert [e.name for e in asking.events] == ["bosun.confirmation_requested"]
    assert attrs(asking)["bosun.tool.outcome"] == "needs_confirmation"
    assert attrs(asking)["bosun.tool.category"] == "destructive"
    assert attrs(ran)["bosun.tool.outcome"] == "ok"
    assert f"{ran.context.trace_id:032x}" == CALLER_TRACE

    merge = next(s for s in spans.named("chat scripted") if attrs(s)["bosun.role"] == "merger")
    assert attrs(merge)["gen_ai.usage.cache_read.input_tokens"] == 300
    assert attrs(merge)["gen_ai.usage.input_tokens"] == 800  # the conventions count the cache in
    assert attrs(merge)["bosun.cost_usd_micros"] >= 0
    for span in everything:  # no message text, tool input or output without the opt-in
        assert not any(key.endswith(("messages", "arguments", "result")) for key in attrs(span))


async def test_an_errors_trace_id_is_the_traces_id(
    make_server: ServerFactory, spans: Spans
) -> None:
    overloaded = {"error": {"code": "provider_overloaded", "message": "Overloaded"}}
    failing = ScriptedModel(
        [overloaded] * 4
    )  # the planner's failure is contained: then the answer's
    async with make_server(TurnModels(executor=failing, planner=failing)) as server:
        frames = await stream_turn(server.client, {"message": "Hello"}, server.auth())

    error = next(f.data for f in frames if f.event == "error")
    root = spans.one("invoke_agent default")
    assert error["code"] == "provider_overloaded"
    assert error["trace_id"] == f"{root.context.trace_id:032x}"
    assert root.parent is None and attrs(root)["error.type"] == "provider_overloaded"
    failed_call = next(s for s in spans.all() if s.name.startswith("chat "))
    assert attrs(failed_call)["error.type"] == "provider_overloaded"
