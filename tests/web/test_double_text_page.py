"""A message sent while a reply is being written, in a real browser against a real
``bosun serve --dev``: refused (``reject``, the default) it says so and gives the text
back; queued (``enqueue``) it says it waits, then runs once the reply ends."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

LONG = "Here is the slow plan, one word at a time: rowing, lunges, planks, then a walk."
SIMPLE = '{"strategy": "simple", "reasoning": "Small talk."}'
SCRIPT = f"""
- match: "first chat hello"
  text: '{SIMPLE}'
- match: "first chat hello"
  text: "Hi, first chat."
- match: "second chat hello"
  text: '{SIMPLE}'
- match: "second chat hello"
  text: "Hi, second chat."
- match: "slow plan please"
  text: '{SIMPLE}'
- match: "slow plan please"
  text: "{LONG}"
  delay_s: 0.15
- match: "add a rest day"
  text: '{SIMPLE}'
- match: "add a rest day"
  text: "Rest day added on Sunday."
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("double"), SCRIPT) as served:
        yield served


@pytest_asyncio.fixture(loop_scope="module")
async def page_409(browser: Browser) -> AsyncIterator[Page]:
    """conftest's ``page``, but the refused request's 409 is expected: Chromium logs it as
    a console error, so that one line is allowed; any other error still fails the test."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield opened
    finally:
        await context.close()
    refused = "Failed to load resource: the server responded with a status of 409 (Conflict)"
    assert [e for e in errors if e != refused] == [], f"the page logged errors: {errors}"


async def open_chat(page: Page, bosun: Bosun, hello: str) -> str:
    await page.goto(bosun.page_url())
    await page.locator("#message").fill(hello)
    await page.locator("#message").press("Enter")
    await expect(page.locator(".turn-status[data-status=completed]")).to_be_visible()
    await expect(page).to_have_url(re.compile(r"#session=[\w-]+$"))
    return page.url.rsplit("#session=", 1)[1]


async def slow_turn_elsewhere(bosun: Bosun, session_id: str) -> asyncio.Task[int]:
    """Another client (another tab, the API) starts a slow reply in the session."""

    def post() -> int:
        with bosun.api() as client:
            body = {"message": "slow plan please", "session_id": session_id}
            return client.post("/v1/chat", json=body).status_code

    task = asyncio.create_task(asyncio.to_thread(post))
    running = "SELECT count(*) FROM turns WHERE session_id = ? AND status = 'running'"
    for _ in range(500):
        if bosun.query(running, session_id)[0][0] == 1:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("the slow turn never started")


async def test_a_refused_double_text_says_why_and_gives_the_text_back(
    page_409: Page, bosun: Bosun
) -> None:
    page = page_409
    session_id = await open_chat(page, bosun, "first chat hello")
    slow = await slow_turn_elsewhere(bosun, session_id)

    await page.locator("#message").fill("add a rest day")
    await page.locator("#message").press("Enter")

    refused = page.locator(".card.error[data-code=turn_in_progress]")
    await expect(refused).to_contain_text("A reply is still being written in this chat")
    await expect(refused.locator(".error-detail")).to_contain_text("is still running")
    await expect(page.locator("#message")).to_have_value("add a rest day")
    assert await slow == 200
    assert bosun.query("SELECT count(*) FROM turns WHERE session_id = ?", session_id) == [(2,)]


async def test_a_queued_double_text_says_it_waits_then_runs(page: Page, bosun: Bosun) -> None:
    with bosun.api() as client:
        body = {"name": "Default", "double_texting": "enqueue"}
        assert client.put("/v1/agents/default", json=body).status_code == 200
    session_id = await open_chat(page, bosun, "second chat hello")
    slow = await slow_turn_elsewhere(bosun, session_id)

    await page.locator("#message").fill("add a rest day")
    await page.locator("#message").press("Enter")

    connection = page.locator("#connection")
    await expect(connection).to_have_text(re.compile(r"^Queued: your message runs when"))
    await expect(page.locator(".answer").last).to_have_text("Rest day added on Sunday.")
    await expect(connection).to_have_text("")
    assert await slow == 200
    statuses = "SELECT status FROM turns WHERE session_id = ? ORDER BY started_at"
    assert bosun.query(statuses, session_id) == [("completed",)] * 3
