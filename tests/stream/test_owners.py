"""People own agents, over real HTTP on SQLite and PostgreSQL: an agent's ``parent`` sees
and edits it, answers its approvals (whatever its ``access.answer`` says), gets its
notices (stream and webhooks), sees all its runs and costs; other members see none of it
(404); owners and staff see everything; members create agents only when the org allows."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook
from test_notices import frames, receiver, settings_for
from test_triggers import quick, signed

from conftest import Server, ServerFactory
from fleet import Agent, AgentProfile
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from turn import TurnModels

OWNER = {"user": "olga", "role": "owner"}
MARIA = {"user": "maria"}  # a member: the coach's parent
BOB = {"user": "bob"}  # another member, parent of his own agent
CAROL = {"user": "carol"}  # a member who parents nothing
COACH: dict[str, Any] = {
    "handle": "coach",
    "name": "Coach",
    "tools": ["programs.*"],
    "approvals": ["programs.list"],
    "access": {"answer": ["owner"]},  # the parent answers all the same
    "runs_per_minute": 10,
}


def lister() -> TurnModels:
    """A planner with one step listing programs; an executor that calls the list once
    (it waits for approval), then says so."""

    async def planner(request: ModelRequest) -> Reply:
        step = {"id": "s1", "goal": "List the programs", "tools": ["programs.list"]}
        return Reply(text=json.dumps({"strategy": "tool", "reasoning": "r", "steps": [step]}))

    async def executor(request: ModelRequest) -> Reply:
        if len(request.messages) == 1:
            return Reply(tool_calls=(ToolCall(id="toolu_list", name="programs_list", input={}),))
        return Reply(text="The list waits for approval.")

    return TurnModels(planner=FunctionModel(planner), executor=FunctionModel(executor))


async def allow_members(server: Server) -> None:
    put = await server.client.put(
        "/v1/org/settings", json={"members_create_agents": True}, headers=server.auth(**OWNER)
    )
    assert put.status_code == 200, put.text


async def create(server: Server, body: dict[str, Any], **claims: str) -> httpx.Response:
    return await server.client.post("/v1/agents", json=body, headers=server.auth(**claims))


async def owned(server: Server) -> None:
    """Maria's coach and Bob's scout, each made by its member."""
    await allow_members(server)
    for body, who in ((COACH, MARIA), ({"handle": "scout", "name": "Scout"}, BOB)):
        made = await create(server, body, **who)
        assert made.status_code == 201, made.text


async def finished(server: Server, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        got = await server.client.get(f"/v1/runs/{run_id}", headers=server.auth(**OWNER))
        body: dict[str, Any] = got.json()
        if body["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.05)


def status(response: httpx.Response) -> tuple[int, str | None]:
    code = response.json()["error"]["code"] if response.is_error and response.content else None
    return response.status_code, code


async def test_org_settings_decide_whether_members_create_agents(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        client = server.client
        read = {
            role: (await client.get("/v1/org/settings", headers=server.auth(role=role))).json()
            for role in ("member", "staff", "owner")
        }
        puts = {
            role: status(
                await client.put(
                    "/v1/org/settings",
                    json={"members_create_agents": True},
                    headers=server.auth(role=role),
                )
            )
            for role in ("member", "staff")
        }
        off = status(await create(server, {"handle": "mine", "name": "Mine"}, **MARIA))
        bad_body = status(
            await client.put(
                "/v1/org/settings",
                json={"members_create_agents": "x"},
                headers=server.auth(**OWNER),
            )
        )
        await allow_members(server)
        now_on = (await client.get("/v1/org/settings", headers=server.auth(**MARIA))).json()
        other_org = (await client.get("/v1/org/settings", headers=server.auth(org="o2"))).json()
        made = await create(server, {"handle": "mine", "name": "Mine"}, **MARIA)
        named_self = await create(
            server, {"handle": "mine2", "name": "M", "parent": "maria"}, **MARIA
        )
        for_another = await create(
            server, {"handle": "theirs", "name": "T", "parent": "bob"}, **MARIA
        )
        by_owner = await create(server, {"handle": "bobs", "name": "B", "parent": "bob"}, **OWNER)
        org_agent = await create(server, {"handle": "shared", "name": "S"}, **OWNER)
        default = await client.put(
            "/v1/agents/default",
            json={"name": "D", "parent": "maria"},
            headers=server.auth(**OWNER),
        )
        too_long = await create(
            server, {"handle": "long", "name": "L", "parent": "u" * 129}, **OWNER
        )

    assert read == {role: {"members_create_agents": False} for role in read}
    assert puts == {"member": (403, "forbidden"), "staff": (403, "forbidden")}
    assert off == (403, "forbidden")
    assert bad_body[0] == 400
    assert now_on == {"members_create_agents": True}
    assert other_org == {"members_create_agents": False}
    assert made.status_code == 201 and made.json()["parent"] == "maria"
    assert named_self.status_code == 201 and named_self.json()["parent"] == "maria"
    assert status(for_another) == (403, "forbidden_parent")
    assert by_owner.json()["parent"] == "bob" and org_agent.json()["parent"] is None
    assert status(default) == (422, "default_agent")
    assert too_long.status_code == 400


async def test_a_parent_edits_their_agent_and_other_members_find_nothing(
    make_server: ServerFactory,
) -> None:
    async with make_server() as server:
        await owned(server)
        client = server.client

        async def handles(**claims: str) -> list[str]:
            listed = await client.get("/v1/agents", headers=server.auth(**claims))
            return [a["handle"] for a in listed.json()]

        lists = {name: await handles(**who) for name, who in
                 (("maria", MARIA), ("bob", BOB), ("carol", CAROL), ("owner", OWNER),
                  ("staff", {"role": "staff"}))}  # fmt: skip
        bob_auth = server.auth(**BOB)
        bob = {
            "get": await client.get("/v1/agents/coach", headers=bob_auth),
            "version": await client.get("/v1/agents/coach/versions/1", headers=server.auth(**BOB)),
            "put": await client.put("/v1/agents/coach", json={"name": "X"}, headers=bob_auth),
            "usage": await client.get("/v1/agents/coach/usage", headers=server.auth(**BOB)),
            "resume": await client.post("/v1/agents/coach/resume", headers=server.auth(**BOB)),
            "delete": await client.delete("/v1/agents/coach", headers=server.auth(**BOB)),
            "run": await client.post(
                "/v1/agents/coach/runs", json={"task": "t"}, headers=server.auth(**BOB)
            ),
            "chat": await client.post(
                "/v1/chat", json={"message": "hi", "agent": "coach"}, headers=server.auth(**BOB)
            ),
        }  # fmt: skip
        maria_reads = await client.get("/v1/agents/coach", headers=server.auth(**MARIA))
        maria_usage = await client.get("/v1/agents/coach/usage", headers=server.auth(**MARIA))
        maria_org_usage = await client.get("/v1/agents/default/usage", headers=server.auth(**MARIA))
        maria_org_put = await client.put(
            "/v1/agents/default", json={"name": "Mine now"}, headers=server.auth(**MARIA)
        )
        profile = {k: v for k, v in COACH.items() if k != "handle"}
        edited = await client.put(
            "/v1/agents/coach", json={**profile, "name": "Coach 2"}, headers=server.auth(**MARIA)
        )
        handed_over = await client.put(
            "/v1/agents/coach", json={"name": "C", "parent": "bob"}, headers=server.auth(**MARIA)
        )
        reassigned = await client.put(
            "/v1/agents/scout",
            json={"name": "Scout", "parent": "maria"},
            headers=server.auth(**OWNER),
        )
        bob_after = await client.get("/v1/agents/scout", headers=server.auth(**BOB))
        maria_deletes = await client.delete("/v1/agents/scout", headers=server.auth(**MARIA))

    assert lists["maria"] == ["coach", "default"]
    assert lists["bob"] == ["default", "scout"]
    assert lists["carol"] == ["default"]
    assert lists["owner"] == lists["staff"] == ["coach", "default", "scout"]
    assert {name: status(r) for name, r in bob.items()} == {
        name: (404, "not_found") for name in bob
    }
    assert maria_reads.status_code == 200 and maria_reads.json()["parent"] == "maria"
    assert maria_usage.status_code == 200 and maria_usage.json()["agent"] == "coach"
    assert status(maria_org_usage) == (403, "forbidden")
    assert status(maria_org_put) == (403, "forbidden")
    assert edited.status_code == 200, edited.text
    assert edited.json()["parent"] == "maria" and edited.json()["version"] == 2
    assert status(handed_over) == (403, "forbidden_parent")
    assert reassigned.json()["parent"] == "maria" and status(bob_after) == (404, "not_found")
    assert maria_deletes.status_code == 204


async def test_the_parent_sees_every_run_of_their_agent_and_others_none(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        await owned(server)
        client = server.client
        by_owner = await client.post(
            "/v1/agents/coach/runs", json={"task": "From the owner"}, headers=server.auth(**OWNER)
        )
        by_maria = await client.post(
            "/v1/agents/coach/runs", json={"task": "Mine"}, headers=server.auth(**MARIA)
        )
        run_ids = [by_owner.json()["run_id"], by_maria.json()["run_id"]]
        for run_id in run_ids:
            await finished(server, run_id)

        async def reads(run_id: str, **claims: str) -> list[int]:
            headers = server.auth(**claims)
            detail = await client.get(f"/v1/runs/{run_id}", headers=headers)
            async with client.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers) as s:
                await s.aread()
            cancel = await client.post(f"/v1/runs/{run_id}/cancel", headers=headers)
            return [detail.status_code, s.status_code, cancel.status_code]

        maria = [await reads(run_id, **MARIA) for run_id in run_ids]
        bob = [await reads(run_id, **BOB) for run_id in run_ids]
        listed = {
            name: await client.get("/v1/agents/coach/runs", headers=server.auth(**who))
            for name, who in (("maria", MARIA), ("bob", BOB), ("staff", {"role": "staff"}))
        }

    assert maria == [[200, 200, 200]] * 2
    assert bob == [[404, 404, 404]] * 2
    assert [r["run_id"] for r in listed["maria"].json()["runs"]] == run_ids[::-1]
    assert status(listed["bob"]) == (404, "not_found")
    assert [r["run_id"] for r in listed["staff"].json()["runs"]] == run_ids[::-1]


async def test_a_member_owned_agents_approval_is_the_parents_to_see_and_answer(
    make_server: ServerFactory,
) -> None:
    """The acceptance: the approval is listed for and answered by the parent member (its
    ``access.answer`` names only owners); the parent gets the notice; another member gets
    404 on its runs and approvals, and a member who parents nothing has no inbox."""
    async with make_server(lister()) as server:
        await owned(server)
        client = server.client
        async with client.stream(
            "GET", "/v1/events/stream", params={"after": 0}, headers=server.auth(**MARIA)
        ) as maria_stream:
            queued = await client.post(
                "/v1/agents/coach/runs", json={"task": "List"}, headers=server.auth(**MARIA)
            )
            run = await finished(server, queued.json()["run_id"])
            [notice] = await frames(maria_stream, 1)
        inbox = await client.get("/v1/approvals", headers=server.auth(**MARIA))
        [approval] = inbox.json()["approvals"]
        path = f"/v1/approvals/{approval['id']}"
        bob = {
            "inbox": await client.get("/v1/approvals", headers=server.auth(**BOB)),
            "detail": await client.get(path, headers=server.auth(**BOB)),
            "approve": await client.post(f"{path}/approve", headers=server.auth(**BOB)),
            "reject": await client.post(f"{path}/reject", headers=server.auth(**BOB)),
            "run": await client.get(f"/v1/runs/{run['run_id']}", headers=server.auth(**BOB)),
            "runs": await client.get("/v1/agents/coach/runs", headers=server.auth(**BOB)),
        }
        carol = await client.get("/v1/approvals", headers=server.auth(**CAROL))
        staff_answer = await client.post(f"{path}/approve", headers=server.auth(role="staff"))
        detail = await client.get(path, headers=server.auth(**MARIA))
        approved = await client.post(
            f"{path}/approve", json={"reason": "fine"}, headers=server.auth(**MARIA)
        )
        owner_inbox = await client.get("/v1/approvals", headers=server.auth(**OWNER))

    assert run["status"] == "completed", run
    assert run["user_id"] == "maria"
    assert approval["agent"] == "coach" and approval["status"] == "pending"
    assert inbox.json()["counts"] == {"pending": 1}
    assert notice["event"] == "approval_requested"
    assert notice["data"]["data"]["approval_id"] == approval["id"]
    assert bob["inbox"].json() == {"approvals": [], "counts": {}, "next_after": None}
    assert {k: status(r) for k, r in bob.items() if k != "inbox"} == {
        k: (404, "not_found") for k in ("detail", "approve", "reject", "run", "runs")
    }
    assert status(carol) == (403, "forbidden")
    assert status(staff_answer) == (403, "forbidden_role")  # access.answer: owners only
    assert detail.status_code == 200
    assert approved.status_code == 200, approved.text
    assert approved.json()["resolved_by"] == "maria"
    assert approved.json()["status"] == "approved"
    assert [a["id"] for a in owner_inbox.json()["approvals"]] == [approval["id"]]


async def test_members_get_the_notices_of_their_agents_only_and_resume_exactly(
    db_url: str,
) -> None:
    async with Server(settings_for(db_url, [1.0]), TurnModels()) as server:
        await owned(server)
        publish = server.store.notices.publish
        ids = [
            await publish("acme", "cost_alert", {"agent": "coach"}),
            await publish("acme", "cost_alert", {"agent": "scout"}),
            await publish("acme", "run_finished", {"agent": "default", "run_id": "r"}),
            await publish("acme", "agent_paused", {"agent": "coach"}),
            await publish("globex", "agent_paused", {"agent": "coach"}),
            await publish("acme", "approval_requested", {"agent": "coach", "tool": "t"}),
        ]

        async def replay(claims: dict[str, str], n: int, **headers: str) -> list[int]:
            auth = {**server.auth(**claims), **headers}
            params = {} if headers else {"after": 0}
            async with server.client.stream(
                "GET", "/v1/events/stream", params=params, headers=auth
            ) as stream:
                assert stream.status_code == 200
                return [int(f["id"]) for f in await frames(stream, n)]

        maria = await replay(MARIA, 3)
        resumed = await replay(MARIA, 2, **{"Last-Event-ID": str(ids[0])})
        bob = await replay(BOB, 1)
        owner = await replay(OWNER, 5)
        carol = await server.client.get("/v1/events/stream", headers=server.auth(**CAROL))

    assert maria == [ids[0], ids[3], ids[5]]
    assert resumed == [ids[3], ids[5]]
    assert bob == [ids[1]]
    assert owner == [ids[0], ids[1], ids[2], ids[3], ids[5]]
    assert status(carol) == (403, "forbidden")


async def test_a_members_webhook_gets_their_agents_notices_and_the_orgs_get_all(
    db_url: str,
) -> None:
    with receiver([]) as mine, receiver([]) as orgs:
        async with Server(settings_for(db_url, [1.0]), TurnModels()) as server:
            await owned(server)
            client = server.client
            made = await client.post(
                "/v1/webhooks", json={"url": mine.url}, headers=server.auth(**MARIA)
            )
            org_hook = await client.post(
                "/v1/webhooks", json={"url": orgs.url}, headers=server.auth(**OWNER)
            )
            publish = server.store.notices.publish
            coach = await publish("acme", "cost_alert", {"agent": "coach"})
            await publish("acme", "cost_alert", {"agent": "scout"})
            await publish("acme", "run_finished", {"run_id": "r"})  # about no agent
            got = await asyncio.to_thread(mine.take, 1)
            org_got = await asyncio.to_thread(orgs.take, 3)
            listed = {
                name: await client.get("/v1/webhooks", headers=server.auth(**who))
                for name, who in (("maria", MARIA), ("bob", BOB), ("owner", OWNER))
            }
            hook_id, org_id = made.json()["id"], org_hook.json()["id"]
            bob_deletes = await client.delete(f"/v1/webhooks/{hook_id}", headers=server.auth(**BOB))
            maria_on_org = [
                await client.get(f"/v1/webhooks/{org_id}/deliveries", headers=server.auth(**MARIA)),
                await client.delete(f"/v1/webhooks/{org_id}", headers=server.auth(**MARIA)),
            ]
            own_log = await client.get(
                f"/v1/webhooks/{hook_id}/deliveries", headers=server.auth(**MARIA)
            )
            carol = await client.post(
                "/v1/webhooks", json={"url": mine.url}, headers=server.auth(**CAROL)
            )
            maria_deletes = await client.delete(
                f"/v1/webhooks/{hook_id}", headers=server.auth(**MARIA)
            )

    assert made.status_code == 201, made.text
    [(body, headers)] = got
    payload = Webhook(made.json()["secret"]).verify(body, headers)
    assert payload["notice_id"] == coach and payload["data"] == {"agent": "coach"}
    assert mine.got.empty()  # scout's and the agentless notice never came
    assert len(org_got) == 3
    assert [h["id"] for h in listed["maria"].json()] == [hook_id]
    assert listed["bob"].json() == []
    assert [h["id"] for h in listed["owner"].json()] == [hook_id, org_id]
    assert status(bob_deletes) == (404, "not_found")
    assert [status(r) for r in maria_on_org] == [(404, "not_found")] * 2
    assert [d["notice_id"] for d in own_log.json()["deliveries"]] == [coach]
    assert status(carol) == (403, "forbidden")
    assert maria_deletes.status_code == 204


async def test_a_run_no_person_started_acts_as_the_parent_with_the_member_role(
    make_server: ServerFactory,
) -> None:
    daily = {"handle": "daily", "name": "D", "parent": "maria", "runs_per_minute": 10,
             "schedule": {"cron": "* * * * *", "task": "Every minute"}}  # fmt: skip
    async with make_server(quick(), secrets_key=Fernet.generate_key().decode()) as server:
        owner = server.auth(**OWNER)
        await server.client.post("/v1/agents", json=daily, headers=owner)
        await server.client.post("/v1/agents", json={"handle": "org", "name": "O"}, headers=owner)
        hook = (await server.client.post("/v1/agents/daily/webhook", headers=owner)).json()
        text, headers = signed(hook["secret"], {"ticket": 1})
        hooked = await server.client.post(hook["path"], content=text, headers=headers)
        mention = {"id": "e1", "type": "commented", "resource": {"type": "note", "id": "1"},
                   "actor": {"type": "user", "id": "sam"}, "text": "@daily look",
                   "at": datetime.now(UTC).isoformat()}  # fmt: skip
        mentioned = await server.client.post("/v1/events", json=mention, headers=owner)
        services = server.app.state["services"]
        await services.runs.fire_schedules(datetime.now(UTC))  # unless the ticker did already
        store = server.store
        history = await store.runs.history("acme", "daily", limit=10)
        runs = {run.trigger: run for run in history}
        listed = await server.client.get("/v1/agents/daily/runs", headers=server.auth(**MARIA))

    assert hooked.status_code == mentioned.status_code == 202, hooked.text + mentioned.text
    assert sorted((r.trigger, r.user_id, r.role) for r in runs.values()) == [
        ("mention", "maria", "member"), ("schedule", "maria", "member"),
        ("webhook", "maria", "member"),
    ]  # fmt: skip
    assert runs["webhook"].id == hooked.json()["run_id"]
    assert {r["run_id"] for r in listed.json()["runs"]} == {r.id for r in history}
    org = Agent("org", 1, AgentProfile(name="O"))
    assert org.acting_user("event") == ("event:org", "staff")
    assert Agent("p", 1, AgentProfile(name="P", parent="u1")).acting_user("event") == (
        "u1",
        "member",
    )


async def test_the_catalogue_is_for_whoever_writes_a_profile(make_server: ServerFactory) -> None:
    """``GET /v1/catalogue`` (what an editor may name): a member who parents an agent
    reads it to edit theirs; another member only once the org lets members create agents."""
    async with make_server() as server:

        async def catalogue(**claims: str) -> tuple[int, str | None]:
            read = await server.client.get("/v1/catalogue", headers=server.auth(**claims))
            return status(read)

        before = await catalogue(**MARIA)
        made = await create(server, {"handle": "mine", "name": "M", "parent": "maria"}, **OWNER)
        assert made.status_code == 201, made.text
        parent, other = await catalogue(**MARIA), await catalogue(**CAROL)
        await allow_members(server)
        allowed = await catalogue(**CAROL)

    assert before == (403, "forbidden") == other
    assert parent == (200, None) == allowed
