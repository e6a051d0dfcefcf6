"""The chat protocols' thread keyspace on real SQLite and PostgreSQL: one session id per
(org, user, thread id), the first reservation wins however many race for it, and a
thread goes with its session when retention removes it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from store import Store, utcnow


async def test_a_thread_id_is_per_org_and_user_and_the_first_reservation_wins(
    store: Store,
) -> None:
    before = await store.threads.find("acme", "alice", "chat-1")
    ids = [str(uuid.uuid4()) for _ in range(8)]
    raced = await asyncio.gather(
        *(store.threads.open("acme", "alice", "chat-1", session_id=i) for i in ids)
    )
    others = [
        await store.threads.open(org, user, "chat-1", session_id=str(uuid.uuid4()))
        for org, user in (("globex", "alice"), ("acme", "bob"))
    ]

    assert before is None
    assert len(set(raced)) == 1 and raced[0] in ids  # one winner, named to every racer
    assert await store.threads.find("acme", "alice", "chat-1") == raced[0]
    assert len({raced[0], *others}) == 3


async def test_a_thread_goes_with_its_session(store: Store) -> None:
    session_id = str(uuid.uuid4())
    await store.threads.open("acme", "alice", "old", session_id=session_id)
    await store.sessions.create(
        org_id="acme", user_id="alice", session_id=session_id, title="t", agent=None
    )
    report = await store.retention.prune(before=utcnow() + timedelta(days=1), apply=True)

    assert (report.sessions, report.protocol_threads) == (1, 1)
    assert await store.threads.find("acme", "alice", "old") is None
