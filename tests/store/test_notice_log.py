"""The notice log and webhook deliveries in the store: ids per org in order, deliveries
queued with their notice, and a due delivery claimed by exactly one of racing claimers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from cryptography.fernet import Fernet

from conftest import migrate
from store import AttemptResult, Store


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
