"""Content events from the host app start runs of the agents they concern (issue 31,
points 1-3): a mention, a reply to what an agent's run created, a subscription; an event
is routed once however often it is posted; nothing loops (an agent's own event, a hop
limit, a cool-down), and an agent's pause and rate limit still apply."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog
from cryptography.fernet import Fernet
from test_runs import models
from test_triggers import quick, signed

from bosun_demo import seed_demo
from conftest import Server, ServerFactory
from fleet import candidates, mentioned
from store import Cooldown, Store

NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC).isoformat()
SKIPPED_COOLDOWN = {"agent": "coach", "kind": "mention", "reason": "cooldown"}


def event(text: str | None = None, **changes: Any) -> dict[str, Any]:
    """A note alice created (a new id each time), with ``changes`` over it."""
    body: dict[str, Any] = {
        "id": f"evt_{uuid.uuid4().hex}",
        "type": "created",
        "resource": {"type": "note", "id": "n1", "title": "Weekly plan"},
        "actor": {"type": "user", "id": "alice"},
        "at": NOW,
    }
    if text is not None:
        body["text"] = text
    return {**body, **changes}


def by_agent(handle: str, run_id: str | None = None) -> dict[str, Any]:
    actor = {"type": "agent", "id": handle}
    return actor if run_id is None else {**actor, "run_id": run_id}


async def agent(server: Server, handle: str, **profile: Any) -> None:
    body = {"handle": handle, "name": handle.title(), "runs_per_minute": 60, **profile}
    made = await server.client.post("/v1/agents", json=body, headers=server.auth(role="owner"))
    assert made.status_code == 201, made.text


async def post(server: Server, body: dict[str, Any], role: str = "staff") -> httpx.Response:
    return await server.client.post("/v1/events", json=body, headers=server.auth(role=role))


async def runs_of(server: Server, handle: str) -> list[dict[str, Any]]:
    page = await server.client.get(f"/v1/agents/{handle}/runs", headers=server.auth(role="staff"))
    return page.json()["runs"]  # type: ignore[no-any-return]


async def until_done(server: Server, run_id: str) -> dict[str, Any]:
    """The run once it ended (as staff: a triggered run has no person behind it)."""
    deadline = time.monotonic() + 15
    while True:
        answer = await server.client.get(f"/v1/runs/{run_id}", headers=server.auth(role="staff"))
        detail: dict[str, Any] = answer.json()
        if detail["status"] in ("completed", "failed") or time.monotonic() > deadline:
            return detail
        await asyncio.sleep(0.05)


def test_mentions_are_read_from_the_text_unless_given() -> None:
    text = "@Coach and @nutri-bot, see bob@coach.com and @x (too short); @coach again"
    assert mentioned(text, None) == ["coach", "nutri-bot"]
    assert mentioned(text, ["@pal", "coach"]) == ["pal", "coach"]  # the host's list wins
    assert mentioned(" ".join(f"@agent{n}" for n in range(30)), None) == [
        f"agent{n}" for n in range(20)
    ]
    kinds = candidates(mentions=["a"], repliers=["b", "a"], subscribers=["c", "b", "a"])
    assert kinds == {"a": "mention", "b": "reply", "c": "subscription"}


async def test_a_mention_starts_one_run_with_the_event_as_context(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        await agent(server, "coach")
        note = event("Hey @coach, plan my week (and @nobody)")
        first = await post(server, note)
        again = await post(server, note)
        member = await post(server, event("@coach"), role="member")
        rush = event("@coach once", resource={"type": "note", "id": "n2"})
        rushed = await asyncio.gather(*(post(server, rush) for _ in range(5)))
        run_id = first.json()["runs"][0]["run_id"]
        detail = await until_done(server, run_id)
        runs = await runs_of(server, "coach")

    assert first.status_code == 202, first.text
    assert first.json() == {
        "event_id": note["id"], "duplicate": False,
        "runs": [{"agent": "coach", "run_id": run_id, "kind": "mention"}], "skipped": [],
    }  # fmt: skip
    assert again.status_code == 202 and again.json() == {**first.json(), "duplicate": True}
    assert member.status_code == 403 and member.json()["error"]["code"] == "forbidden"
    assert sorted(r.json()["duplicate"] for r in rushed) == [False, True, True, True, True]
    assert len({r.json()["runs"][0]["run_id"] for r in rushed}) == 1
    assert len(runs) == 2  # the note once, the rushed event once
    history = {(r["trigger"], r["trigger_event_id"], r["hops"]) for r in runs}
    assert history == {("mention", note["id"], 1), ("mention", rush["id"], 1)}  # its history
    assert detail["status"] == "completed", detail
    assert (detail["trigger"], detail["trigger_event_id"], detail["hops"]) == (
        "mention", note["id"], 1,
    )  # fmt: skip
    assert detail["user_id"] == "event:coach"
    assert detail["task"].startswith(
        'The user alice created the note n1 ("Weekly plan") and mentioned'
    )
    context = detail["context"]
    assert (context["id"], context["text"], context["resource"]["title"]) == (
        note["id"], note["text"], "Weekly plan",
    )  # fmt: skip


async def test_a_reply_to_what_an_agents_run_created_starts_it_but_its_own_does_not(
    make_server: ServerFactory,
) -> None:
    coach = {"tools": ["workouts.*", "members.*"], "triggers": {"max_hops": 3, "cooldown_s": 0}}
    async with make_server(models()) as server:
        await seed_demo(server.store, "acme")
        await agent(server, "coach", **coach)
        asked = await post(server, event("@coach log a run for me"))
        run_id = asked.json()["runs"][0]["run_id"]
        done = await until_done(server, run_id)
        [created] = done["resources"]
        kind, ident = created["target"].split(":", 1)
        # coach answers under its own workout, mentioning itself: no run of coach
        own = await post(
            server,
            event("@coach done", type="commented", actor=by_agent("coach", run_id),
                  reply_to={"type": kind, "id": ident}),
        )  # fmt: skip
        reply = await post(server, event("thanks!", reply_to={"type": kind, "id": ident}))
        # a resource an agent reported creating (a host whose tools write no audit row)
        noted = {"type": "note", "id": "n9"}
        await post(server, event(actor=by_agent("coach"), resource=noted))
        on_note = await post(server, event("ok", type="commented", reply_to=noted))
        elsewhere = await post(server, event("ok", reply_to={"type": "note", "id": "n10"}))

    assert done["status"] == "completed", done
    assert own.json()["runs"] == []
    assert own.json()["skipped"] == [{"agent": "coach", "kind": "mention", "reason": "self"}]
    [started] = reply.json()["runs"]
    assert (started["agent"], started["kind"]) == ("coach", "reply")
    assert [r["kind"] for r in on_note.json()["runs"]] == ["reply"]
    assert elsewhere.json()["runs"] == [] and elsewhere.json()["skipped"] == []


async def test_two_agents_mentioning_each_other_stop_at_the_hop_limit(
    make_server: ServerFactory,
) -> None:
    limits = {"triggers": {"max_hops": 3, "cooldown_s": 0}}
    async with make_server(quick()) as server:
        await agent(server, "ping", **limits)
        await agent(server, "pong", **limits)
        with structlog.testing.capture_logs() as logs:
            answer = await post(server, event("@ping start"))
            chain = [answer.json()]
            for author, other in [("ping", "pong"), ("pong", "ping"), ("ping", "pong")]:
                run_id = chain[-1]["runs"][0]["run_id"]
                said = event(f"@{other} over to you", actor=by_agent(author, run_id))
                chain.append((await post(server, said)).json())
            # without its run id an agent's event carries its latest run's hops
            latest = (await post(server, event("@pong", actor=by_agent("ping")))).json()
        hops = [
            (await server.client.get(f"/v1/runs/{step['runs'][0]['run_id']}",
                                     headers=server.auth(role="staff"))).json()["hops"]
            for step in chain[:3]
        ]  # fmt: skip

    assert [[r["agent"] for r in step["runs"]] for step in chain] == [
        ["ping"],
        ["pong"],
        ["ping"],
        [],
    ]
    assert hops == [1, 2, 3]
    assert chain[3]["skipped"] == [{"agent": "pong", "kind": "mention", "reason": "hops"}]
    assert latest["skipped"] == [{"agent": "pong", "kind": "mention", "reason": "hops"}]
    skips = [e for e in logs if e["event"] == "trigger.skipped"]
    assert {(e["agent"], e["reason"]) for e in skips} == {("pong", "hops")}
    assert all("text" not in e and e["event_id"] for e in skips)  # never the event's text


async def test_a_subscription_starts_runs_on_its_event_types_only(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        await agent(server, "watcher", triggers={"max_hops": 3, "cooldown_s": 0})
        owner, member = server.auth(role="owner"), server.auth()
        path = "/v1/agents/watcher/subscriptions"
        want = {"resource_type": "note", "event_types": ["commented"]}
        made = await server.client.post(path, json=want, headers=owner)
        refused = await server.client.post(path, json=want, headers=member)
        listed = await server.client.get(path, headers=member)
        commented = await post(server, event("nice", type="commented"))
        updated = await post(server, event("edited", type="updated"))
        task = {"type": "task", "id": "t1"}
        on_task = await post(server, event("nice", type="commented", resource=task))
        both = await post(server, event("@watcher look", type="commented"))
        gone = await server.client.delete(f"{path}/{made.json()['id']}", headers=owner)
        gone_again = await server.client.delete(f"{path}/{made.json()['id']}", headers=owner)
        after = await post(server, event("nice", type="commented"))

    assert made.status_code == 201, made.text
    assert made.json()["resource_id"] is None and made.json()["created_by"] == "alice"
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert [s["id"] for s in listed.json()] == [made.json()["id"]]
    assert [(r["agent"], r["kind"]) for r in commented.json()["runs"]] == [
        ("watcher", "subscription")
    ]
    assert updated.json()["runs"] == [] and on_task.json()["runs"] == []
    assert [r["kind"] for r in both.json()["runs"]] == ["mention"]  # one run, the mention
    assert gone.status_code == 204 and gone_again.status_code == 404
    assert after.json()["runs"] == []


async def test_subscriptions_are_bounded_and_die_with_their_agent(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        await agent(server, "watcher")
        owner = server.auth(role="owner")
        path = "/v1/agents/watcher/subscriptions"
        for n in range(49):  # straight to the store: 49 requests would only take longer
            await server.store.subscriptions.add(
                "acme", "watcher", resource_type="note", resource_id=f"n{n}", event_types=[],
                created_by="alice",
            )  # fmt: skip
        last = await server.client.post(path, json={"resource_type": "note"}, headers=owner)
        over = await server.client.post(path, json={"resource_type": "note"}, headers=owner)
        await server.client.delete("/v1/agents/watcher", headers=owner)
        await agent(server, "watcher")
        left = await server.client.get(path, headers=owner)
        unknown = await server.client.post(
            "/v1/agents/ghost/subscriptions", json={"resource_type": "note"}, headers=owner
        )
        bad_id = await server.client.delete(f"{path}/nope", headers=owner)

    assert last.status_code == 201, last.text
    assert over.status_code == 409 and over.json()["error"]["code"] == "subscription_limit"
    assert left.json() == []
    assert unknown.status_code == 404
    assert bad_id.status_code == 400 and bad_id.json()["error"]["code"] == "invalid_request"


async def test_a_cooldown_per_agent_and_resource_then_pause_and_rate_limit_apply(
    make_server: ServerFactory,
) -> None:
    async with make_server(quick()) as server:
        await agent(server, "coach")  # cooldown_s: 60 by default
        await agent(server, "busy", runs_per_minute=1, triggers={"cooldown_s": 0})
        await agent(server, "sleepy", paused=True)
        first = await post(server, event("@coach"))
        second = await post(server, event("@coach again"))
        other = await post(server, event("@coach", resource={"type": "note", "id": "n2"}))
        busy = [(await post(server, event("@busy"))).json() for _ in range(2)]
        sleepy = await post(server, event("@sleepy"))
        sleepy_runs = await runs_of(server, "sleepy")

    assert [r["agent"] for r in first.json()["runs"]] == ["coach"]
    assert second.json()["skipped"] == [{"agent": "coach", "kind": "mention", "reason": "cooldown"}]
    assert [r["agent"] for r in other.json()["runs"]] == ["coach"]  # another resource
    assert [len(b["runs"]) for b in busy] == [1, 0]
    assert busy[1]["skipped"] == [{"agent": "busy", "kind": "mention", "reason": "rate_limited"}]
    assert sleepy.json()["skipped"] == [{"agent": "sleepy", "kind": "mention", "reason": "paused"}]
    assert sleepy_runs == []


async def test_events_on_one_resource_at_once_start_the_agent_once(
    make_server: ServerFactory,
) -> None:
    """The cool-down is taken by one statement, not read and then written: of events
    posted together on one resource, one starts coach; the others skip it."""
    async with make_server(quick()) as server:
        await agent(server, "coach")  # cooldown_s: 60
        answers = await asyncio.gather(*(post(server, event("@coach")) for _ in range(4)))
        runs = await runs_of(server, "coach")

    bodies = [answer.json() for answer in answers]
    assert sorted(len(body["runs"]) for body in bodies) == [0, 0, 0, 1]
    assert sum(body["skipped"] == [SKIPPED_COOLDOWN] for body in bodies) == 3
    assert len(runs) == 1


async def test_a_cooldown_ends_and_a_trigger_that_started_nothing_leaves_none(
    store: Store,
) -> None:
    """A cool-down holds the resource for its seconds against other events, but not
    against a retry of its own event; given back (its run did not start), the next event
    takes it."""
    events = store.content_events
    first, second = (Cooldown("acme", "coach", "note", "n1", e) for e in ("evt_1", "evt_2"))
    other = Cooldown("acme", "coach", "note", "n2", "evt_3")
    taken = [await events.take_cooldown(c, 60) for c in (first, second, first, other)]
    await events.give_back_cooldown(second)  # not its cool-down: nothing changes
    held = await events.take_cooldown(second, 60)
    await events.give_back_cooldown(first)
    after_give_back = await events.take_cooldown(second, 60)
    gone = Cooldown("acme", "lapsed", "note", "n1", "evt_4")
    assert await events.take_cooldown(gone, 0)  # ends at once
    lapsed = await events.take_cooldown(replace(gone, event_id="evt_5"), 60)

    assert taken == [True, False, True, True]
    assert (held, after_give_back, lapsed) == (False, True, True)


async def test_the_hosts_backend_posts_signed_events(make_server: ServerFactory) -> None:
    async with make_server(quick(), secrets_key=Fernet.generate_key().decode()) as server:
        await agent(server, "coach")
        owner = server.auth(role="owner")
        member = await server.client.post("/v1/events/hook", headers=server.auth())
        made = (await server.client.post("/v1/events/hook", headers=owner)).json()
        path, secret = made["path"], made["secret"]
        note = event("@coach hello")
        text, headers = signed(secret, note)
        started = await server.client.post(path, content=text, headers=headers)
        redelivered = await server.client.post(path, content=text, headers=headers)
        forged_headers = {**headers, "webhook-id": "msg_x"}
        forged = await server.client.post(path, content=text, headers=forged_headers)
        other_org = await server.client.post(
            path.replace("/acme", "/other"), content=text, headers=headers
        )
        bad_text, bad_headers = signed(secret, {**event(), "type": "Not A Type"})
        bad = await server.client.post(path, content=bad_text, headers=bad_headers)
        off = await server.client.delete("/v1/events/hook", headers=owner)
        after = await server.client.post(path, content=text, headers=headers)
        runs = await runs_of(server, "coach")

    assert member.status_code == 403
    assert path == "/v1/event-hooks/acme" and secret.startswith("whsec_")
    assert started.status_code == 202, started.text
    assert [r["kind"] for r in started.json()["runs"]] == ["mention"]
    assert redelivered.json() == {**started.json(), "duplicate": True}
    for refused in (forged, other_org, after):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert off.status_code == 204
    assert len(runs) == 1


async def test_bad_events_are_refused_with_a_4xx(make_server: ServerFactory) -> None:
    bad: list[dict[str, Any]] = [
        {**event(), "id": "x" * 201},
        {**event(), "id": "has space"},
        {**event(), "type": "Created"},
        {**event(), "resource": {"type": "note"}},
        {**event(), "actor": {"type": "robot", "id": "r"}},
        {**event(), "actor": {"type": "agent", "id": "Not a handle"}},
        {**event(), "actor": {"type": "agent", "id": "coach", "run_id": "run_1"}},
        {**event(), "mentions": [f"a{n}x" for n in range(21)]},
        {**event(), "mentions": ["not a handle"]},
        {**event(), "text": "x" * 32_001},
        {**event(), "at": "2026-11-27T09:00:00"},
        {**event(), "at": "next tuesday"},
        {**event(), "reply_to": {"type": "note"}},
        {**event(), "extra": 1},
        {**event(), "resource": {"type": "note", "id": "n1", "title": "t" * 201}},
        {k: v for k, v in event().items() if k != "at"},
    ]
    raw = [
        json.dumps(event()).replace('"alice"', '"al\\u0000ice"'),
        json.dumps(event("hi")).replace('"hi"', '"\\ud800"'),
        "[" * 100,
        "not json",
    ]
    async with make_server(quick()) as server:
        await agent(server, "coach")
        answers = [await post(server, body) for body in bad]
        headers = {**server.auth(role="staff"), "content-type": "application/json"}
        answers += [
            await server.client.post("/v1/events", content=text, headers=headers) for text in raw
        ]
        bad_subs = [
            await server.client.post(
                "/v1/agents/coach/subscriptions", json=body, headers=server.auth(role="owner")
            )
            for body in (
                {},
                {"resource_type": "Note"},
                {"resource_type": "note", "event_types": ["x"] * 21},
                {"resource_type": "note", "resource_id": "a b"},
            )
        ]
        runs = await runs_of(server, "coach")

    for answer in [*answers, *bad_subs]:
        assert 400 <= answer.status_code < 500, answer.text
        assert answer.json()["error"]["code"] == "invalid_request", answer.text
    assert runs == []
