"""The notice log and webhook deliveries in the store: ids per org in order, deliveries
queued with their notice, a due delivery claimed by exactly one of racing claimers, claims
dealt fairly across orgs and webhooks, and each webhook's circuit breaker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import update

from conftest import migrate
from store import AttemptResult, Breaker, Store, utcnow
from store._webhook_rows import DeliveryRow, WebhookRow


@pytest.fixture
async def keyed(db_url: str) -> AsyncIterator[Store]:
    await migrate(db_url, demo=False)
    opened = Store(db_url, secrets_key=Fernet.generate_key().decode())
    yield opened
    await opened.close()


async def test_notices_are_read_per_org_in_order(keyed: Store) -> None:
    ids = [
        await keyed.notices.publish(org, "run_finished", {"run_id": str(i)})
        for i, org in enumerate(["acme", "globex", "acme", "acme"])
    ]
    acme = await keyed.notices.after("acme", 0)
    limited = await keyed.notices.after("acme", ids[0], limit=1)

    assert ids == sorted(ids)
    assert [n.id for n in acme] == [ids[0], ids[2], ids[3]]
    assert [n.data["run_id"] for n in acme] == ["0", "2", "3"]
    assert {n.org_id for n in acme} == {"acme"}
    assert [n.id for n in limited] == [ids[2]]
    assert await keyed.notices.last_id("acme") == ids[3]
    assert await keyed.notices.last_id("nobody") == 0


async def test_one_of_racing_claimers_wins_each_attempt(keyed: Store) -> None:
    hooks = keyed.webhooks
    hook, _ = await hooks.create(
        "acme", url="http://127.0.0.1:9/x", event_types=[], secret=None, by="alice"
    )
    await hooks.create(
        "acme", url="http://127.0.0.1:9/y", event_types=["cost_alert"], secret=None, by="alice"
    )
    await keyed.notices.publish("acme", "agent_paused", {"agent": "coach"})  # hook only
    await keyed.notices.publish("globex", "agent_paused", {"agent": "spy"})  # not acme's

    claims = await asyncio.gather(*(hooks.claim_due(lease_s=60) for _ in range(6)))
    won = [due for batch in claims for due in batch]
    again = await hooks.claim_due(lease_s=60)  # held by its claim until the lease runs out
    [due] = won
    failed = AttemptResult(status_code=500, error=None, duration_ms=3)
    await hooks.finish(due, failed, retry_at=None)
    await hooks.finish(due, failed, retry_at=None)  # a lapsed claim: recorded, settles nothing
    [delivery] = await hooks.deliveries(hook.id, limit=10)

    assert (due.webhook_id, due.number, due.notice_data) == (hook.id, 1, {"agent": "coach"})
    assert hooks.secret_of(due).startswith("whsec_")
    assert again == []
    assert delivery.status == "failed" and len(delivery.attempts) == 2


async def hooks_of(store: Store, org: str, n: int) -> list[str]:
    made = [
        await store.webhooks.create(
            org, url=f"http://127.0.0.1:9/{i}", event_types=[], secret=None, by="alice"
        )
        for i in range(n)
    ]
    return [hook.id for hook, _ in made]


async def test_claims_take_one_per_webhook_and_deal_round_robin_across_orgs(keyed: Store) -> None:
    acme = await hooks_of(keyed, "acme", 3)
    [globex] = await hooks_of(keyed, "globex", 1)
    for i in range(3):  # nine of acme's deliveries are due before globex's one
        await keyed.notices.publish("acme", "run_finished", {"run_id": str(i)})
    await keyed.notices.publish("globex", "run_finished", {"run_id": "g"})
    hooks = keyed.webhooks

    first = await hooks.claim_due(lease_s=60, limit=3, per_org=2)
    busy_acme = await hooks.claim_due(
        lease_s=60, limit=10, per_org=2, busy={"acme": 2}, skip_webhooks=acme
    )
    one_more = await hooks.claim_due(lease_s=60, limit=10, per_org=2, busy={"acme": 1})

    assert sorted(d.org_id for d in first) == ["acme", "acme", "globex"]
    assert len({d.webhook_id for d in first}) == 3  # never two of one webhook
    assert globex in {d.webhook_id for d in first}
    assert {d.notice_data["run_id"] for d in first if d.org_id == "acme"} == {"0"}
    assert busy_acme == []  # acme is at its bound; globex has nothing left
    [third] = one_more  # acme's webhook not yet sending, its oldest delivery
    assert third.webhook_id in set(acme) - {d.webhook_id for d in first}
    assert third.notice_data == {"run_id": "0"}


async def test_failures_in_a_row_open_the_circuit_and_postpone_its_deliveries(
    keyed: Store,
) -> None:
    hooks, breaker = keyed.webhooks, Breaker(failures=2, cooldown_s=60)
    [hook_id] = await hooks_of(keyed, "acme", 1)
    await keyed.notices.publish("acme", "run_finished", {"run_id": "1"})
    await keyed.notices.publish("acme", "run_finished", {"run_id": "2"})
    timeout = AttemptResult(status_code=None, error="ReadTimeout", duration_ms=5)
    no_key = AttemptResult(status_code=None, error="SecretsKeyError", duration_ms=0)
    soon = utcnow()  # retried at once

    [one] = await hooks.claim_due(lease_s=60)
    assert await hooks.finish(one, timeout, retry_at=soon, breaker=breaker) is None
    [two] = await hooks.claim_due(lease_s=60)
    assert await hooks.finish(two, no_key, retry_at=soon, breaker=breaker) is None  # ours
    [three] = await hooks.claim_due(lease_s=60)
    opened = await hooks.finish(three, timeout, retry_at=soon, breaker=breaker)
    await keyed.notices.publish("acme", "run_finished", {"run_id": "3"})  # while open
    held = await hooks.claim_due(lease_s=60)
    hook = await hooks.get("acme", hook_id)
    log = await hooks.deliveries(hook_id, limit=10)

    assert opened is not None and opened > soon
    assert held == []
    assert hook is not None and hook.circuit_open(utcnow())
    assert (hook.consecutive_failures, hook.circuit_open_until) == (2, opened)
    assert [d.status for d in log] == ["pending"] * 3  # postponed, none dropped
    assert {d.next_attempt_at for d in log} == {opened}
    assert sorted(len(d.attempts) for d in log) == [0, 1, 2]

    async with keyed.db.write() as conn:  # the cool-down is over
        await conn.execute(
            update(DeliveryRow).values(next_attempt_at=utcnow() - timedelta(seconds=1))
        )
        await conn.execute(update(WebhookRow).values(circuit_open_until=utcnow()))
    [trial] = await hooks.claim_due(lease_s=60)  # one at a time per webhook
    ok = AttemptResult(status_code=204, error=None, duration_ms=5)
    assert await hooks.finish(trial, ok, retry_at=None, breaker=breaker) is None
    closed = await hooks.get("acme", hook_id)
    assert closed is not None and not closed.circuit_open(utcnow())
    assert (closed.consecutive_failures, closed.circuit_open_until) == (0, None)


async def test_a_notice_is_queued_for_each_enabled_webhook_that_wants_its_type(
    keyed: Store,
) -> None:
    """PostgreSQL queues them in the notice's own statement (store/_hot_pg.py): the same
    rows as enqueue_deliveries on SQLite."""
    made = {
        name: (
            await keyed.webhooks.create(
                "acme", url=f"http://127.0.0.1:9/{name}", event_types=types, secret=None, by="a"
            )
        )[0].id
        for name, types in [
            ("all", []), ("runs", ["run_finished"]), ("costs", ["cost_alert"]), ("off", []),
            ("open", ["cost_alert", "run_finished"]),
        ]
    }  # fmt: skip
    later = utcnow() + timedelta(minutes=5)
    async with keyed.db.write() as conn:
        await conn.execute(
            update(WebhookRow).where(WebhookRow.id == made["off"]).values(enabled=False)
        )
        await conn.execute(
            update(WebhookRow).where(WebhookRow.id == made["open"]).values(circuit_open_until=later)
        )
    before = utcnow()
    notice_id = await keyed.notices.publish("acme", "run_finished", {"run_id": "r"})
    queued = {name: await keyed.webhooks.deliveries(hook, limit=5) for name, hook in made.items()}

    assert {name for name, rows in queued.items() if rows} == {"all", "runs", "open"}
    for rows in (queued["all"], queued["runs"], queued["open"]):
        [row] = rows
        assert row.notice_id == notice_id and row.status == "pending" and row.attempts == []
        assert row.id.startswith("msg_") and len(row.id) == 36
    assert queued["all"][0].id != queued["runs"][0].id
    assert before <= queued["all"][0].next_attempt_at <= utcnow()
    assert queued["open"][0].next_attempt_at == later  # due when its circuit closes
