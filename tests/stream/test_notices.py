"""Org notifications over real HTTP: the org event stream (SSE with Last-Event-ID, one
org's notices only) and outbound webhooks signed per Standard Webhooks, retried after
failures, with their delivery log; owners and staff only; secrets shown once."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook
from test_agent_costs import make_agent, priced
from test_agent_costs import notices as agent_notices
from test_agent_costs import run as spend_run
from test_approvals import CLEANER, models, run_to_end

from bosun.settings import Settings
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, OPEN_EGRESS, Server, free_port
from telemetry_testing import tracing
from turn import TurnModels

OWNER = {"role": "owner"}
APPROVAL = {"approval_id": "apr_1", "agent": "coach", "tool": "workouts.delete"}


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: answers with ``statuses`` in turn (then 200)."""

    statuses: list[int]
    got: queue.Queue[tuple[bytes, dict[str, str]]] = field(default_factory=queue.Queue)
    url: str = ""

    def take(self, n: int, timeout_s: float = 10.0) -> list[tuple[bytes, dict[str, str]]]:
        return [self.got.get(timeout=timeout_s) for _ in range(n)]


@contextmanager
def receiver(statuses: list[int]) -> Iterator[Receiver]:
    rx = Receiver(statuses=list(statuses))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            rx.got.put((body, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(rx.statuses.pop(0) if rx.statuses else 200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rx.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rx
    finally:
        server.shutdown()
        server.server_close()


def settings_for(db_url: str, retry_s: list[float]) -> Settings:
    return Settings(
        toolsets=[DEMO],
        database_url=db_url,
        jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        secrets_key=Fernet.generate_key().decode(),  # type: ignore[arg-type]
        limits={"requests_per_minute": 0, "tokens_per_minute": 0, "keepalive_s": 0.5},  # type: ignore[arg-type]
        webhooks={"retry_schedule_s": retry_s, "timeout_s": 2.0},  # type: ignore[arg-type]
        egress=OPEN_EGRESS,  # type: ignore[arg-type]
    )


async def add_webhook(server: Server, url: str, **body: Any) -> dict[str, Any]:
    made = await server.client.post(
        "/v1/webhooks", json={"url": url, **body}, headers=server.auth(**OWNER)
    )
    assert made.status_code == 201, made.text
    return made.json()  # type: ignore[no-any-return]


async def deliveries_until(
    server: Server, hook_id: str, done: Any, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Poll the delivery log until ``done(deliveries)``."""
    deadline = time.monotonic() + timeout_s
    while True:
        page = await server.client.get(
            f"/v1/webhooks/{hook_id}/deliveries", headers=server.auth(**OWNER)
        )
        assert page.status_code == 200, page.text
        deliveries: list[dict[str, Any]] = page.json()["deliveries"]
        if done(deliveries) or time.monotonic() > deadline:
            return deliveries
        await asyncio.sleep(0.05)


async def test_a_receiver_verifies_the_signature_and_gets_the_third_attempt(db_url: str) -> None:
    with receiver([500, 500]) as rx:
        async with Server(settings_for(db_url, [0.05, 0.1, 5.0]), TurnModels()) as server:
            hook = await add_webhook(server, rx.url, event_types=["approval_requested"])
            await server.store.notices.publish("acme", "run_finished", {"run_id": "r"})  # unwanted
            notice_id = await server.store.notices.publish("acme", "approval_requested", APPROVAL)
            attempts = await asyncio.to_thread(rx.take, 3)
            log = await deliveries_until(
                server, hook["id"], lambda d: d and d[0]["status"] == "delivered"
            )
            listed = await server.client.get("/v1/webhooks", headers=server.auth(**OWNER))

    assert hook["secret"].startswith("whsec_")
    for body, headers in attempts:  # every attempt is signed afresh, with the same id
        payload = Webhook(hook["secret"]).verify(body, headers)
        assert payload["type"] == "approval_requested" and payload["data"] == APPROVAL
        assert payload["notice_id"] == notice_id and payload["timestamp"].endswith("Z")
    assert len({headers["webhook-id"] for _, headers in attempts}) == 1
    assert rx.got.empty()  # run_finished was not subscribed to
    [delivery] = log
    assert (delivery["notice_id"], delivery["type"]) == (notice_id, "approval_requested")
    assert delivery["id"] == attempts[0][1]["webhook-id"]
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 200]
    assert [a["number"] for a in delivery["attempts"]] == [1, 2, 3]
    assert delivery["next_attempt_at"] is None
    assert listed.status_code == 200
    assert [h["id"] for h in listed.json()] == [hook["id"]]
    assert "secret" not in listed.json()[0] and hook["secret"] not in listed.text


async def test_with_tracing_on_each_attempt_carries_its_spans_traceparent(db_url: str) -> None:
    with tracing() as spans, receiver([500]) as rx:
        async with Server(settings_for(db_url, [0.05, 5.0]), TurnModels()) as server:
            hook = await add_webhook(server, rx.url, event_types=["approval_requested"])
            await server.store.notices.publish("acme", "approval_requested", APPROVAL)
            attempts = await asyncio.to_thread(rx.take, 2)
            await deliveries_until(
                server, hook["id"], lambda d: d and d[0]["status"] == "delivered"
            )

    posts = sorted(spans.named("POST"), key=lambda s: s.start_time)
    sent = [headers["traceparent"].split("-") for _, headers in attempts]
    assert [(t, p) for _, t, p, _ in sent] == [
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in posts
    ]
    failed, delivered = (dict(s.attributes or {}) for s in posts)
    assert failed["http.response.status_code"] == 500 and failed["error.type"] == "500"
    assert delivered["http.response.status_code"] == 200 and "error.type" not in delivered
    assert delivered["bosun.delivery.attempt"] == 2 and delivered["server.address"] == "127.0.0.1"


async def test_a_delivery_fails_once_the_schedule_is_spent(db_url: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}/nobody"  # nothing listens: a connect error
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes
    with receiver([503, 503]) as rx:
        async with Server(settings_for(db_url, [0.05]), TurnModels()) as server:
            answering = await add_webhook(server, rx.url, secret=secret)
            silent = await add_webhook(server, closed)
            await server.store.notices.publish("acme", "cost_alert", {"agent": "coach"})
            failed = [
                await deliveries_until(
                    server, hook["id"], lambda d: d and d[0]["status"] == "failed"
                )
                for hook in (answering, silent)
            ]

    assert answering["secret"] == secret
    for deliveries in failed:
        [delivery] = deliveries
        assert delivery["status"] == "failed" and delivery["next_attempt_at"] is None
        assert len(delivery["attempts"]) == 2  # the first attempt and one retry
    assert [a["status_code"] for a in failed[0][0]["attempts"]] == [503, 503]
    assert {a["error"] for a in failed[1][0]["attempts"]} == {"ConnectError"}
    assert {a["status_code"] for a in failed[1][0]["attempts"]} == {None}


async def frames(response: httpx.Response, n: int) -> list[dict[str, Any]]:
    """The next ``n`` SSE frames of ``response`` (keep-alive comments skipped)."""
    found: list[dict[str, Any]] = []
    frame: dict[str, Any] = {}
    lines = response.aiter_lines()
    while len(found) < n:
        line = await asyncio.wait_for(anext(lines), timeout=10)
        if line.startswith(("id:", "event:", "data:")):
            key, _, value = line.partition(": ")
            frame[key] = json.loads(value) if key == "data" else value
        elif not line and frame:
            found.append(frame)
            frame = {}
    return found


async def test_the_event_stream_is_in_order_resumes_and_shows_one_org(db_url: str) -> None:
    async with Server(settings_for(db_url, [1.0]), TurnModels()) as server:
        publish = server.store.notices.publish
        before = await publish("acme", "run_finished", {"run_id": "old"})  # not live any more
        auth = server.auth(**OWNER)
        async with server.client.stream("GET", "/v1/events/stream", headers=auth) as live:
            assert live.status_code == 200
            assert live.headers["content-type"].startswith("text/event-stream")
            ids = [
                await publish("acme", "approval_requested", APPROVAL),
                await publish("globex", "agent_paused", {"agent": "spy"}),
                await publish("acme", "approval_resolved", {**APPROVAL, "status": "approved"}),
                await publish("acme", "cost_alert", {"agent": "coach", "period": "day"}),
            ]
            got = await frames(live, 3)
        resumed_headers = {**auth, "Last-Event-ID": str(ids[0])}
        async with server.client.stream(
            "GET", "/v1/events/stream", headers=resumed_headers
        ) as resumed:
            again = await frames(resumed, 2)
        async with server.client.stream(
            "GET", "/v1/events/stream", params={"after": 0}, headers=auth
        ) as replay:
            everything = await frames(replay, 4)
        async with server.client.stream(
            "GET", "/v1/events/stream", headers=server.auth(role="staff", org="globex")
        ) as other:
            theirs = await frames(other, 0)  # nothing new for them yet: the stream stays open
            assert other.status_code == 200
            await publish("globex", "agent_paused", {"agent": "spy2"})
            [their_next] = await frames(other, 1)

    acme = [ids[0], ids[2], ids[3]]
    assert [int(f["id"]) for f in got] == acme
    assert [f["event"] for f in got] == ["approval_requested", "approval_resolved", "cost_alert"]
    assert got[0]["data"]["data"] == APPROVAL and got[0]["data"]["org_id"] == "acme"
    assert got[0]["data"]["id"] == ids[0] and got[0]["data"]["type"] == "approval_requested"
    assert [int(f["id"]) for f in again] == acme[1:]
    assert [int(f["id"]) for f in everything] == [before, *acme]
    assert theirs == [] and their_next["data"]["data"] == {"agent": "spy2"}


async def test_only_owners_and_staff_and_bad_input_is_refused(db_url: str) -> None:
    async with Server(settings_for(db_url, [1.0]), TurnModels()) as server:
        client, member = server.client, server.auth(role="member")
        owner, staff = server.auth(**OWNER), server.auth(role="staff")
        forbidden = [
            await client.get("/v1/events/stream", headers=member),
            await client.get("/v1/webhooks", headers=member),
            await client.post("/v1/webhooks", json={"url": "https://x.test/"}, headers=member),
        ]
        bad = {
            "ftp": {"url": "ftp://example.test/hook"},
            "no_host": {"url": "https:///path"},
            "credentials": {"url": "https://user:pw@example.test/"},
            "port": {"url": "https://example.test:99999/"},
            "ipv6": {"url": "http://[::1/"},
            "newline": {"url": "https://example.test/\n"},
            "secret": {"url": "https://example.test/", "secret": "hunter2"},
            "short_secret": {"url": "https://example.test/", "secret": "whsec_c2hvcnQ="},
            "type": {"url": "https://example.test/", "event_types": ["everything"]},
            "extra": {"url": "https://example.test/", "enabled": False},
        }
        refused = {
            name: await client.post("/v1/webhooks", json=body, headers=owner)
            for name, body in bad.items()
        }
        hook = await add_webhook(server, "https://example.test/in", event_types=["cost_alert"])
        elsewhere = server.auth(role="owner", org="globex")
        foreign = await client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=elsewhere)
        foreign_delete = await client.delete(f"/v1/webhooks/{hook['id']}", headers=elsewhere)
        bad_id = await client.get("/v1/webhooks/nope/deliveries", headers=owner)
        bad_cursor = await client.get("/v1/events/stream", headers={**owner, "Last-Event-ID": "x1"})
        deleted = await client.delete(f"/v1/webhooks/{hook['id']}", headers=staff)
        gone = await client.delete(f"/v1/webhooks/{hook['id']}", headers=staff)
        empty = await client.get("/v1/webhooks", headers=staff)

    assert [r.status_code for r in forbidden] == [403, 403, 403]
    assert {r.json()["error"]["code"] for r in forbidden} == {"forbidden"}
    codes = {name: (r.status_code, r.json()["error"]["code"]) for name, r in refused.items()}
    assert codes == {
        "ftp": (422, "invalid_webhook_url"),
        "no_host": (422, "invalid_webhook_url"),
        "credentials": (422, "invalid_webhook_url"),
        "port": (422, "invalid_webhook_url"),
        "ipv6": (422, "invalid_webhook_url"),
        "newline": (422, "invalid_webhook_url"),
        "secret": (422, "invalid_webhook_secret"),
        "short_secret": (422, "invalid_webhook_secret"),
        "type": (400, "invalid_request"),
        "extra": (400, "invalid_request"),
    }
    assert hook["event_types"] == ["cost_alert"]
    assert (foreign.status_code, foreign_delete.status_code) == (404, 404)
    assert (bad_id.status_code, bad_cursor.status_code) == (400, 400)
    assert (deleted.status_code, gone.status_code) == (204, 404)
    assert empty.json() == []


async def test_without_a_secrets_key_no_webhook_is_added(db_url: str) -> None:
    settings = settings_for(db_url, [1.0]).model_copy(update={"secrets_key": None})
    async with Server(settings, TurnModels()) as server:
        made = await server.client.post(
            "/v1/webhooks", json={"url": "https://example.test/"}, headers=server.auth(**OWNER)
        )
    assert made.status_code == 400 and "BOSUN_SECRETS_KEY" in made.json()["error"]["message"]


@pytest.mark.postgres
async def test_two_workers_send_each_notice_once_and_stream_each_others(
    postgres_url: str,
) -> None:
    settings = settings_for(postgres_url, [0.05])
    with receiver([]) as rx:
        async with Server(settings, TurnModels()) as one, Server(settings, TurnModels()) as two:
            await add_webhook(one, rx.url)
            auth = two.auth(**OWNER)
            async with two.client.stream("GET", "/v1/events/stream", headers=auth) as live:
                ids = [
                    await one.store.notices.publish("acme", "run_finished", {"n": n})
                    for n in range(6)
                ]
                got = await frames(live, 6)  # published by one, streamed by two (NOTIFY)
            sent = await asyncio.to_thread(rx.take, 6)
            await asyncio.sleep(0.5)  # time for a second, duplicate attempt: there is none

    assert [int(f["id"]) for f in got] == ids
    assert len({headers["webhook-id"] for _, headers in sent}) == 6
    assert sorted(json.loads(body)["data"]["n"] for body, _ in sent) == list(range(6))
    assert rx.got.empty()


async def test_a_deferred_call_reaches_the_webhook_and_the_event_stream(db_url: str) -> None:
    """End to end: a background run's delete is queued for approval; the org's receiver
    gets a signed ``approval_requested`` naming it, as does the event stream."""
    with receiver([]) as rx:
        async with Server(settings_for(db_url, [0.05]), models()) as server:
            hook = await add_webhook(server, rx.url, event_types=["approval_requested"])
            await seed_demo(server.store, "acme")
            made = await server.client.post(
                "/v1/agents", json=CLEANER, headers=server.auth(**OWNER)
            )
            assert made.status_code == 201, made.text
            async with server.client.stream(
                "GET", "/v1/events/stream?after=0", headers=server.auth(**OWNER)
            ) as stream:
                run = await run_to_end(server)
                [frame] = await frames(stream, 1)
            [(body, headers)] = await asyncio.to_thread(rx.take, 1)

    payload = Webhook(hook["secret"]).verify(body, headers)
    data = payload["data"]
    assert payload["type"] == "approval_requested" and data["run_id"] == run["run_id"]
    assert (data["tool"], data["agent"], data["mode"]) == ("workouts.delete", "cleaner", "defer")
    assert frame["event"] == "approval_requested" and frame["data"]["data"] == data


async def test_cost_alerts_and_the_pause_reach_the_stream_and_the_webhook(db_url: str) -> None:
    """The cost acceptance end to end: thresholds $0.001 / $0.002 and a limit of $0.003 on
    a priced scripted model: two ``cost_alert``s then ``agent_paused``, on the org's event
    stream and at its webhook receiver, in that order."""
    kinds = ["cost_alert", "agent_paused"]
    with receiver([]) as rx:
        async with Server(settings_for(db_url, [0.05]), priced()) as server:
            hook = await add_webhook(server, rx.url, event_types=kinds)
            await make_agent(server)
            async with server.client.stream(
                "GET", "/v1/events/stream?after=0", headers=server.auth(**OWNER)
            ) as stream:
                for n in range(1, 4):  # 1200, 2400, 3600 micro-dollars
                    await spend_run(server)
                    await agent_notices(server, "run_finished", n)
                got = [f for f in await frames(stream, 6) if f["event"] in kinds]
            delivered = await asyncio.to_thread(rx.take, 3)
            refused = await server.client.post(
                "/v1/agents/spender/runs", json={"task": "More"}, headers=server.auth()
            )

    assert [f["event"] for f in got] == ["cost_alert", "cost_alert", "agent_paused"]
    payloads = [Webhook(hook["secret"]).verify(body, headers) for body, headers in delivered]
    assert [p["type"] for p in payloads] == ["cost_alert", "cost_alert", "agent_paused"]
    assert [p["data"] for p in payloads] == [f["data"]["data"] for f in got]
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "agent_paused"
