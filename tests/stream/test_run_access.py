"""Who sees a background run: the one who triggered it, owners and staff. To any other
member a run is a 404 (detail, stream and cancel alike, so ids never leak) and their list
holds their own runs only, filtered before paging; a schedule's or a webhook's run is for
owners and staff only, whatever a member's user id claims."""

from __future__ import annotations

import asyncio
import time

from conftest import Server, ServerFactory
from fleet import RunRequest
from providers import FunctionModel, ModelRequest, Reply
from turn import TurnModels

HANDLE = "planner-bot"


def quick() -> TurnModels:
    async def answer(request: ModelRequest) -> Reply:
        if any("You are the planner" in block.text for block in request.system):
            return Reply(text='{"strategy": "simple", "reasoning": "r"}')
        return Reply(text="Done.")

    model = FunctionModel(answer)
    return TurnModels(planner=model, executor=model)


async def _trigger(server: Server, user: str) -> str:
    queued = await server.client.post(
        f"/v1/agents/{HANDLE}/runs",
        json={"task": f"A task of {user}"},
        headers=server.auth(user=user),
    )
    assert queued.status_code == 202, queued.text
    return str(queued.json()["run_id"])


async def _all_done(server: Server, run_ids: list[str]) -> None:
    deadline = time.monotonic() + 15
    for run_id in run_ids:
        while time.monotonic() < deadline:
            got = await server.client.get(f"/v1/runs/{run_id}", headers=server.auth(role="owner"))
            if got.json()["status"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.05)


async def _listed(server: Server, **claims: str) -> list[str]:
    page = await server.client.get(f"/v1/agents/{HANDLE}/runs", headers=server.auth(**claims))
    assert page.status_code == 200, page.text
    return [row["run_id"] for row in page.json()["runs"]]


async def _reads(server: Server, run_id: str, **claims: str) -> tuple[int, int, int]:
    """The statuses of the run's detail, its stream (read to its end) and a cancel."""
    headers = server.auth(**claims)
    detail = await server.client.get(f"/v1/runs/{run_id}", headers=headers)
    async with server.client.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers) as s:
        await s.aread()
    cancel = await server.client.post(f"/v1/runs/{run_id}/cancel", headers=headers)
    return detail.status_code, s.status_code, cancel.status_code


async def test_a_member_sees_their_own_runs_and_a_404_for_anyone_elses(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        made = await server.client.post(
            "/v1/agents", json={"handle": HANDLE, "name": "P", "runs_per_minute": 10},
            headers=server.auth(role="owner"),
        )  # fmt: skip
        assert made.status_code == 201, made.text
        bobs = await _trigger(server, "bob")  # the oldest: a page of one must still find it
        alices = [await _trigger(server, "alice") for _ in range(2)]
        services = server.app.state.services
        scheduled, _ = await services.runs.submit(
            RunRequest(
                org_id="acme", user_id=f"schedule:{HANDLE}", role="staff", agent=HANDLE,
                task="Every morning", trigger="schedule",
            )
        )  # fmt: skip
        await _all_done(server, [bobs, *alices, scheduled.id])

        bob_reads_alices = await _reads(server, alices[0], user="bob")
        bob_reads_scheduled = await _reads(server, scheduled.id, user="bob")
        impostor = await _reads(server, scheduled.id, user=f"schedule:{HANDLE}")
        alice_reads_hers = await _reads(server, alices[0], user="alice")
        staff_reads_bobs = await _reads(server, bobs, user="carol", role="staff")
        owner_reads_scheduled = await _reads(server, scheduled.id, user="olga", role="owner")
        not_found = await server.client.get(
            f"/v1/runs/{alices[0]}", headers=server.auth(user="bob")
        )
        bob_page = await server.client.get(
            f"/v1/agents/{HANDLE}/runs?limit=1", headers=server.auth(user="bob")
        )
        lists = {
            "bob": await _listed(server, user="bob"),
            "alice": await _listed(server, user="alice"),
            "impostor": await _listed(server, user=f"schedule:{HANDLE}"),
            "staff": await _listed(server, user="carol", role="staff"),
            "owner": await _listed(server, user="olga", role="owner"),
            "other org owner": await _listed(server, user="olga", org="o2", role="owner"),
        }

    assert bob_reads_alices == (404, 404, 404)
    assert not_found.json()["error"]["code"] == "not_found"
    assert bob_reads_scheduled == impostor == (404, 404, 404)
    assert alice_reads_hers == staff_reads_bobs == owner_reads_scheduled == (200, 200, 200)
    assert [r["run_id"] for r in bob_page.json()["runs"]] == [bobs]
    everyone = [scheduled.id, *reversed(alices), bobs]
    assert lists == {
        "bob": [bobs],
        "alice": list(reversed(alices)),
        "impostor": [],
        "staff": everyone,
        "owner": everyone,
        "other org owner": [],
    }


async def test_a_member_cannot_cancel_anothers_queued_run(make_server: ServerFactory) -> None:
    async def slow(request: ModelRequest) -> Reply:
        await asyncio.sleep(30)
        return Reply(text="never")

    model = FunctionModel(slow)
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await server.client.post(
            "/v1/agents", json={"handle": HANDLE, "name": "P", "runs_per_minute": 10},
            headers=server.auth(role="owner"),
        )  # fmt: skip
        ids = [await _trigger(server, "alice") for _ in range(3)]  # two run, the third waits
        refused = await server.client.post(
            f"/v1/runs/{ids[2]}/cancel", headers=server.auth(user="bob")
        )
        still = await server.client.get(f"/v1/runs/{ids[2]}", headers=server.auth(user="alice"))
        cancelled = [
            await server.client.post(f"/v1/runs/{run_id}/cancel", headers=server.auth(user="alice"))
            for run_id in ids
        ]

    assert refused.status_code == 404  # not 403: the run is not there for bob
    assert still.json()["status"] == "queued"
    assert [c.status_code for c in cancelled] == [200, 200, 200]
