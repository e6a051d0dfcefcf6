"""A schedule no calendar matches is refused when saved, and one already stored (or gone
bad) never keeps the dispatcher from starting other orgs' queued runs."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from test_triggers import quick, scheduled

from conftest import Server, ServerFactory
from fleet import RunDispatcher
from fleet._schedule import schedule_problem

IMPOSSIBLE = "0 0 30 2 *"  # 30 February: croniter.is_valid says yes


async def until_started(server: Server, run_id: str, *, within_s: float = 10) -> str:
    """The run's status once it left ``queued`` (or ``queued`` after ``within_s``)."""
    deadline, status = time.monotonic() + within_s, "queued"
    while time.monotonic() < deadline:
        run = await server.client.get(f"/v1/runs/{run_id}", headers=server.auth())
        status = run.json()["status"]
        if status != "queued":
            break
        await asyncio.sleep(0.1)
    return str(status)


async def queue_a_run(server: Server) -> str:
    owner = server.auth(role="owner")
    made = await server.client.post(
        "/v1/agents", json={"handle": "coach", "name": "C"}, headers=owner
    )
    assert made.status_code == 201, made.text
    run = await server.client.post("/v1/agents/coach/runs", json={"task": "hi"}, headers=owner)
    assert run.status_code == 202, run.text
    return str(run.json()["run_id"])


async def test_a_schedule_that_never_fires_is_refused_when_saved(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        owner = server.auth(role="owner")
        refused = await server.client.post("/v1/agents", json=scheduled(IMPOSSIBLE), headers=owner)
        april = {**scheduled("0 0 31 4 *"), "handle": "april"}
        also = await server.client.post("/v1/agents", json=april, headers=owner)
        fine = await server.client.post("/v1/agents", json=scheduled("0 0 28 2 *"), headers=owner)
        update = {k: v for k, v in scheduled(IMPOSSIBLE).items() if k != "handle"}
        updated = await server.client.put("/v1/agents/nightly", json=update, headers=owner)

    for response in (refused, also, updated):
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_schedule"
        assert "never fires" in error["message"]
    assert fine.status_code == 201, fine.text


def test_a_leap_day_schedule_is_accepted_in_any_year() -> None:
    """29 February may be years away (2100 is no leap year), yet it fires."""
    for year in (2026, 2027, 2097):
        now = datetime(year, 3, 1, tzinfo=UTC)
        assert schedule_problem("0 0 29 2 *", now) is None, year
        assert schedule_problem(IMPOSSIBLE, now) is not None


async def test_a_stored_impossible_schedule_does_not_stop_other_orgs_runs(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        # Written past the API's checks, as a row saved before them (or by hand) would be.
        bad: dict[str, Any] = {"name": "Bad", "schedule": {"cron": IMPOSSIBLE, "task": "x"}}
        await server.store.agents.save("other", "broken", bad, by="test", create=True)
        run_id = await queue_a_run(server)
        status = await until_started(server, run_id)
        services = server.app.state["services"]
        by_hand = await services.runs.fire_schedules()

    assert status != "queued"  # acme's run started although org other's schedule is broken
    assert by_hand == []


async def test_the_dispatcher_loop_survives_a_failing_round(
    make_server: ServerFactory,
) -> None:
    failures = {"schedules": 0, "dispatch": 0}
    twice = asyncio.Event()  # schedules fire once per poll_s (1 s), not on every wake

    async with make_server(quick()) as server:
        runs: RunDispatcher = server.app.state["services"].runs
        dispatch = runs.dispatch

        async def schedules_fail(now: Any = None) -> list[str]:
            failures["schedules"] += 1
            if failures["schedules"] >= 2:
                twice.set()
            raise RuntimeError("injected")

        async def dispatch_fails_once() -> list[str]:
            if failures["dispatch"] == 0:
                failures["dispatch"] += 1
                raise RuntimeError("injected")
            return await dispatch()

        runs.fire_schedules = schedules_fail  # type: ignore[method-assign]
        runs.dispatch = dispatch_fails_once  # type: ignore[method-assign]
        run_id = await queue_a_run(server)
        status = await until_started(server, run_id)
        await asyncio.wait_for(twice.wait(), timeout=5)

    assert status != "queued"
    assert failures["dispatch"] == 1 and failures["schedules"] >= 2


async def test_a_run_that_fails_to_start_does_not_hold_back_the_others(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        runs: RunDispatcher = server.app.state["services"].runs
        await runs.stop()  # this test dispatches by hand
        for org in ("aaa", "acme"):  # fair order: org aaa's run comes first
            owner = server.auth(role="owner", org=org)
            await server.client.post(
                "/v1/agents", json={"handle": "coach", "name": "C"}, headers=owner
            )
            await server.client.post("/v1/agents/coach/runs", json={"task": "t"}, headers=owner)
        launch = runs._launch

        async def broken_for_aaa(run: Any, turn_id: str) -> None:
            if run.org_id == "aaa":
                raise RuntimeError("injected")
            await launch(run, turn_id)

        runs._launch = broken_for_aaa  # type: ignore[method-assign]
        started = await runs.dispatch()
        acme = await server.store.runs.history("acme", "coach", limit=1)
        for run_id in started:
            await until_started(server, run_id)

    assert started == [acme[0].id]
