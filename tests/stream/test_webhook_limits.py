"""One org cannot hold up another's webhooks: deliveries are sent concurrently with a
per-org bound and claimed round-robin across orgs, a webhook that keeps failing has its
circuit opened (its deliveries wait, none lost), connecting has its own shorter timeout,
and an org has at most ``webhooks.max_per_org`` webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from test_notices import add_webhook, deliveries_until, receiver, settings_for

from conftest import Server
from turn import TurnModels

OWNER = {"role": "owner"}
GLOBEX = {"role": "owner", "org": "globex", "user": "gina"}


def with_webhooks(db_url: str, retry_s: list[float], **webhooks: Any) -> Any:
    settings = settings_for(db_url, retry_s)
    merged = settings.webhooks.model_copy(update=webhooks)
    return settings.model_copy(update={"webhooks": merged})


@contextmanager
def silent_listener(*, accept: bool) -> Iterator[str]:
    """A URL on 127.0.0.1 that never answers. ``accept``: connections complete (the
    kernel's backlog) and then hear nothing; else the backlog is full and connecting hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128 if accept else 0)
    port = sock.getsockname()[1]
    fillers = []
    if not accept:  # fill the one-connection backlog: later SYNs are dropped
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/never"
    finally:
        for filler in fillers:
            filler.close()
        sock.close()


async def test_hanging_webhooks_of_one_org_do_not_delay_another_orgs(db_url: str) -> None:
    settings = with_webhooks(db_url, [0.05], timeout_s=5.0, max_per_org=40)
    with silent_listener(accept=True) as hanging, receiver([]) as rx:
        async with Server(settings, TurnModels()) as server:
            for _ in range(40):
                await add_webhook(server, hanging)
            made = await server.client.post(
                "/v1/webhooks", json={"url": rx.url}, headers=server.auth(**GLOBEX)
            )
            assert made.status_code == 201, made.text
            await server.store.notices.publish("acme", "cost_alert", {"agent": "a"})
            await server.store.notices.publish("acme", "cost_alert", {"agent": "b"})
            await asyncio.sleep(0.2)  # acme's 80 deliveries are due first
            started = time.monotonic()
            await server.store.notices.publish("globex", "run_finished", {"run_id": "r"})
            [(body, _)] = await asyncio.to_thread(rx.take, 1, 5.0)
            waited = time.monotonic() - started

    assert b'"run_finished"' in body
    assert waited < 3.0  # before: behind acme's attempts, each waiting out its 5 s timeout


async def test_an_org_has_at_most_max_per_org_webhooks(db_url: str) -> None:
    settings = with_webhooks(db_url, [1.0], max_per_org=3)
    async with Server(settings, TurnModels()) as server:
        racing = await asyncio.gather(
            *(
                server.client.post(
                    "/v1/webhooks",
                    json={"url": f"http://127.0.0.1:9/{i}"},
                    headers=server.auth(**OWNER),
                )
                for i in range(6)
            )
        )
        listed = await server.client.get("/v1/webhooks", headers=server.auth(**OWNER))
        other = await server.client.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/g"}, headers=server.auth(**GLOBEX)
        )
        gone = await server.client.delete(
            f"/v1/webhooks/{listed.json()[0]['id']}", headers=server.auth(**OWNER)
        )
        again = await add_webhook(server, "http://127.0.0.1:9/again")

    assert sorted(r.status_code for r in racing) == [201] * 3 + [409] * 3
    refused = [r.json()["error"] for r in racing if r.status_code == 409]
    assert {e["code"] for e in refused} == {"webhook_limit"}
    assert "webhooks.max_per_org=3" in refused[0]["message"]
    assert len(listed.json()) == 3
    assert other.status_code == 201  # another org's count is its own
    assert gone.status_code == 204 and again["url"].endswith("/again")


async def test_a_failing_webhook_opens_its_circuit_and_its_deliveries_wait(
    db_url: str,
) -> None:
    settings = with_webhooks(
        db_url, [0.05] * 5, breaker_failures=3, breaker_cooldown_s=4.0, timeout_s=2.0
    )  # a cool-down long enough that a loaded machine still reads the page while it holds
    with receiver([500, 500, 500]) as rx:
        async with Server(settings, TurnModels()) as server:
            hook = await add_webhook(server, rx.url)
            await server.store.notices.publish("acme", "cost_alert", {"agent": "a"})
            await asyncio.to_thread(rx.take, 3)
            held = await deliveries_until(
                server, hook["id"], lambda d: d and len(d[0]["attempts"]) == 3
            )
            page = await server.client.get(
                f"/v1/webhooks/{hook['id']}/deliveries", headers=server.auth(**OWNER)
            )
            listed = await server.client.get("/v1/webhooks", headers=server.auth(**OWNER))
            done = await deliveries_until(
                server, hook["id"], lambda d: d and d[0]["status"] == "delivered"
            )
            closed = await server.client.get("/v1/webhooks", headers=server.auth(**OWNER))

    circuit = page.json()["circuit"]
    assert (circuit["state"], circuit["consecutive_failures"]) == ("open", 3)
    assert listed.json()[0]["circuit"] == circuit
    [delivery] = held
    assert delivery["status"] == "pending"  # held back, not dropped
    # not tried before the circuit closes: due when it does, or later once a worker has
    # claimed it for the next attempt (a loaded machine may read it after the cool-down)
    assert delivery["next_attempt_at"] >= circuit["open_until"]
    [delivered] = done
    attempts = delivered["attempts"]
    assert [a["status_code"] for a in attempts] == [500, 500, 500, 200]
    third, fourth = (datetime.fromisoformat(a["attempted_at"]) for a in attempts[2:])
    assert (fourth - third).total_seconds() >= 3.9  # the cool-down, not the 0.05 s retry
    assert closed.json()[0]["circuit"] == {
        "state": "closed",
        "open_until": None,
        "consecutive_failures": 0,
    }


async def test_connecting_gives_up_sooner_than_waiting_for_an_answer(sqlite_url: str) -> None:
    """SQLite only: the timeouts are the HTTP client's, whatever the database. The bounds
    leave a busy machine room (an event loop held up past the connect timeout times out
    even a connection the kernel completed)."""
    settings = with_webhooks(sqlite_url, [], timeout_s=4.0, connect_timeout_s=1.0)
    with silent_listener(accept=False) as unreachable, silent_listener(accept=True) as mute:
        async with Server(settings, TurnModels()) as server:
            hooks = [await add_webhook(server, url) for url in (unreachable, mute)]
            await server.store.notices.publish("acme", "cost_alert", {"agent": "a"})
            failed = [
                await deliveries_until(
                    server, hook["id"], lambda d: d and d[0]["status"] == "failed"
                )
                for hook in hooks
            ]

    [(connect,)], [(read,)] = ([d["attempts"] for d in log] for log in failed)
    assert connect["error"] == "ConnectTimeout" and connect["duration_ms"] < 3000
    assert read["error"] == "ReadTimeout" and read["duration_ms"] >= 3900


async def test_a_receiver_trickling_its_answer_is_cut_off_at_the_attempts_limit(
    sqlite_url: str,
) -> None:
    """SQLite only, as above. The trickle never ends, so failing at all is the cut-off."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nx-slow: ")
        with contextlib.suppress(ConnectionError):
            while True:  # a header byte now and then: no single read ever times out
                writer.write(b"a")
                await writer.drain()
                await asyncio.sleep(0.1)

    listener = await asyncio.start_server(trickle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/slow"
    settings = with_webhooks(sqlite_url, [], timeout_s=1.0, connect_timeout_s=0.2)
    try:
        async with Server(settings, TurnModels()) as server:
            hook = await add_webhook(server, url)
            await server.store.notices.publish("acme", "cost_alert", {"agent": "a"})
            [delivery] = await deliveries_until(
                server, hook["id"], lambda d: d and d[0]["status"] == "failed", timeout_s=10.0
            )
    finally:
        listener.close()

    [attempt] = delivery["attempts"]
    assert attempt["error"] == "TimeoutError" and attempt["duration_ms"] < 4000
