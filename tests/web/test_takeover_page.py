"""A turn taken over after its worker died, in a real browser against a real ``bosun serve
--dev``: the page drops the text each ``message_reset`` abandoned, replayed from the log
when the session is reopened and live while the page follows it, so the answer reads once.

The logs are written here as workers would have written them (into the server's SQLite
file): the dead attempts' text, then each takeover's reset and its own text. The turn's
holder is a worker on another host with a live lease, so the server never claims it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve
from events import (
    Done,
    Event,
    MessageDone,
    MessageReset,
    PlanCreated,
    PlanStep,
    SessionStarted,
    StepCompleted,
    StepStarted,
    TextDelta,
    UserMessage,
)
from store import Store

pytestmark = pytest.mark.asyncio(loop_scope="module")

STEP_TEXT = "Priya Natarajan is an active member."
ANSWER = "Welcome, Priya: your first class is Morning HIIT at six."
ELSEWHERE = "another-host:4242:abcdef"  # alive as far as this server can tell


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    keepalive = {"BOSUN_LIMITS__KEEPALIVE_S": "0.05"}  # a followed stream re-reads often
    with serve(tmp_path_factory.mktemp("takeover"), "[]", env=keepalive) as served:
        yield served


class _Turn:
    """A running turn of a new session in the server's database, written event by event."""

    def __init__(self, store: Store, title: str) -> None:
        self.store, self.title = store, title
        self.session_id, self.turn_id = str(uuid.uuid4()), str(uuid.uuid4())

    async def open(self, text: str) -> None:
        await self.store.sessions.create(
            org_id="dev-org", user_id="dev", session_id=self.session_id, title=self.title
        )
        opening: list[Event] = [
            SessionStarted(session_id=self.session_id, turn_id=self.turn_id),
            UserMessage(message_id="msg_1", text=text),
        ]
        await self.store.log.open_turn(
            self.session_id, opening, turn_id=self.turn_id, trace_id="trace-1",
            worker_id=ELSEWHERE, lease_until=datetime.now(UTC) + timedelta(minutes=10),
        )  # fmt: skip

    async def add(self, *events: Event) -> int:
        """Append ``events``; the seq of the first."""
        stored = await self.store.log.append(self.session_id, events, turn_id=self.turn_id)
        return stored[0].seq

    async def words(self, words: Sequence[str], step_id: str | None = None) -> int:
        return await self.add(*(TextDelta(delta=w, step_id=step_id) for w in words))

    async def reset(self, from_seq: int, step_id: str | None = None) -> None:
        await self.add(MessageReset(message_id="msg_1", reason="takeover", from_seq=from_seq,
                                    step_id=step_id))  # fmt: skip

    async def finish(self) -> None:
        closing = [MessageDone(message_id="msg_1", stop_reason="end_turn"),
                   Done(session_id=self.session_id, status="completed")]  # fmt: skip
        await self.store.log.append(
            self.session_id, closing, turn_id=self.turn_id, finish="completed"
        )


async def _taken_over_twice(turn: _Turn) -> None:
    """A complex plan whose worker died in step s1's text, and whose next one died in the
    merged answer; the third finished it."""
    await turn.open("Is Priya ready for her first week?")
    step = PlanStep(id="s1", goal="Find the member Priya", tools=["members.search"])
    await turn.add(PlanCreated(strategy="complex", reasoning="One lookup.", steps=[step]),
                   StepStarted(step_id="s1", executor_id="s1-exec"))  # fmt: skip
    cut = await turn.words(["Priya Natarajan ", "is an act"], "s1")
    await turn.reset(cut, "s1")  # the second worker: s1 speaks again, then the merge
    await turn.words([STEP_TEXT], "s1")
    done = StepCompleted(step_id="s1", executor_id="s1-exec", ok=True, summary=STEP_TEXT,
                         tool_calls=0, tokens=10, duration_ms=5)  # fmt: skip
    await turn.add(done)
    cut = await turn.words(["Welcome, ", "Priya: your ", "first"])
    await turn.reset(cut)  # the third worker writes the whole answer again
    await turn.words(["Welcome, ", "Priya: your first class ", "is Morning HIIT at six."])
    await turn.finish()


async def test_a_reopened_session_shows_a_taken_over_answer_once(page: Page, bosun: Bosun) -> None:
    store = Store(bosun.database_url)
    turn = _Turn(store, "Taken over twice")
    try:
        await _taken_over_twice(turn)
    finally:
        await store.close()

    await page.goto(bosun.page_url())
    await page.locator(f"button.session[data-session-id='{turn.session_id}']").click()

    await expect(page.locator(".turn-status[data-status=completed]")).to_be_visible()
    await expect(page.locator(".answer")).to_have_text(ANSWER)
    await expect(page.locator(".step[data-step-id=s1] .step-text")).to_have_text(STEP_TEXT)


async def test_a_takeover_followed_live_drops_the_abandoned_words(page: Page, bosun: Bosun) -> None:
    store = Store(bosun.database_url)
    turn = _Turn(store, "Taken over live")
    try:
        await turn.open("Say hello to Priya")
        await turn.add(PlanCreated(strategy="simple", reasoning="Small talk."))
        cut = await turn.words(["Welcome, ", "Pri"])
        await page.goto(bosun.page_url())
        await page.locator(f"button.session[data-session-id='{turn.session_id}']").click()
        answer = page.locator(".answer")
        await expect(answer).to_have_text("Welcome, Pri")  # the first worker's words so far

        await turn.reset(cut)  # the worker died; another takes over and writes it again
        await turn.words(["Welcome, ", "Priya: your first class ", "is Morning HIIT at six."])
        await turn.finish()
    finally:
        await store.close()

    await expect(page.locator(".turn-status[data-status=completed]")).to_be_visible()
    await expect(answer).to_have_text(ANSWER)
