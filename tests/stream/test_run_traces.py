"""A background run is a trace of its own, linked to the span that queued it: the API
request (under the caller's ``traceparent``), a webhook or a schedule tick."""

from __future__ import annotations

from test_runs import agent, models, trigger, until_status

from bosun_demo import seed_demo
from conftest import ServerFactory
from telemetry_testing import tracing

CALLER_TRACE, CALLER_SPAN = "a3ce929d0e0e47364bf92f3577b34da6", "53995c3f42cd8ad8"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


async def test_a_run_is_its_own_trace_linked_to_the_request_that_queued_it(
    make_server: ServerFactory,
) -> None:
    with tracing() as spans:
        async with make_server(models()) as server:
            await seed_demo(server.store, "acme")
            await agent(server)
            headers = {**server.auth(role="staff"), "traceparent": TRACEPARENT}
            queued = await server.client.post(
                "/v1/agents/planner-bot/runs", json={"task": "Create a morning run"},
                headers=headers,
            )  # fmt: skip
            run_id = queued.json()["run_id"]
            detail = await until_status(server, run_id, "completed", "failed")

    assert detail["status"] == "completed"
    queue = spans.one("queue_run planner-bot")
    assert f"{queue.context.trace_id:032x}" == CALLER_TRACE
    assert f"{queue.parent.span_id:016x}" == CALLER_SPAN
    assert dict(queue.attributes or {})["bosun.run.id"] == run_id
    assert dict(queue.attributes or {})["bosun.run.trigger"] == "api"
    root = spans.one("invoke_agent planner-bot")
    assert root.parent is None and root.context.trace_id != queue.context.trace_id
    [link] = root.links
    assert link.context.span_id == queue.context.span_id
    assert link.context.trace_id == queue.context.trace_id
    tools = [s for s in spans.all() if s.name.startswith("execute_tool")]
    assert tools and {s.context.trace_id for s in tools} == {root.context.trace_id}


async def test_with_tracing_off_a_run_records_no_link(make_server: ServerFactory) -> None:
    async with make_server(models()) as server:
        await seed_demo(server.store, "acme")
        await agent(server)
        queued = await trigger(server, {"task": "Create a morning run"})
        run = await server.store.runs.get("acme", queued.json()["run_id"])

    assert run is not None and run.trace_link is None
