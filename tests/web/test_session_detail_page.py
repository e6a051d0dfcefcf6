"""A past session drawn from ``GET /v1/sessions/{id}`` in a real browser against a real
``bosun serve --dev``: after a reload, each message's tool calls show collapsed (tool,
step, status) and expand to their input, output or error, without the raw log being read;
at 1280 px and at 390 px."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
ANSWER = "There is no member mem_ghost, so I booked Leg day for the studio."
SCRIPT = f"""
- match: "ghost member a workout"
  text: >-
    {{"strategy": "tool", "reasoning": "Look up, then book.",
      "steps": [{{"id": "s1", "goal": "Look up mem_ghost and book Leg day",
                 "tools": ["members.get", "workouts.create"], "max_tool_calls": 3}}]}}
- match: "Look up mem_ghost and book Leg day"
  tool_calls: [{{id: toolu_ghost, name: members_get, input: {{member_id: mem_ghost}}}}]
- match: "Look up mem_ghost and book Leg day"
  tool_calls: [{{id: toolu_book, name: workouts_create, input: {{title: Leg day}}}}]
- match: "Look up mem_ghost and book Leg day"
  text: "{ANSWER}"
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("detail"), SCRIPT) as served:
        yield served


async def test_a_reloaded_past_session_shows_its_tool_calls(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.locator("#message").fill("Give the ghost member a workout")
    await page.locator("#message").press("Enter")
    await expect(page.locator(".turn-status[data-status=completed]")).to_be_visible()

    read: list[str] = []
    page.on("request", lambda request: read.append(request.url))
    await page.reload()  # reopens #session=<id> from its detail
    turn = page.locator("article.turn.past")
    await expect(turn.locator(".bubble.user")).to_have_text("Give the ghost member a workout")
    await expect(turn.locator(".answer")).to_have_text(ANSWER)
    await expect(turn.locator(".turn-status")).to_have_text("Done")
    calls = turn.locator("details.call")
    await expect(calls).to_have_count(2)
    assert await calls.evaluate_all("nodes => nodes.map(n => n.open)") == [False, False]

    ghost = turn.locator("details.call[data-tool-use-id=toolu_ghost]")
    await expect(ghost).to_have_attribute("data-status", "error")
    await expect(ghost.locator(".tool-name")).to_have_text("members.get")
    await expect(ghost).to_have_attribute("data-step-id", "s1")
    await expect(turn.locator(".step[data-step-id=s1] details.call")).to_have_count(2)
    await expect(turn.locator(".step[data-step-id=s1]")).to_have_attribute("data-status", "ok")
    await expect(ghost.locator("summary .badge")).to_have_text("error")
    await expect(ghost.locator(".io.input")).to_be_hidden()  # collapsed
    await ghost.locator("summary").click()
    await expect(ghost.locator(".io.input")).to_contain_text('"member_id": "mem_ghost"')
    await expect(ghost.locator(".tool-error code")).to_have_text("not_found")

    book = turn.locator("details.call[data-tool-use-id=toolu_book]")
    await expect(book).to_have_attribute("data-status", "ok")
    await book.locator("summary").click()
    await expect(book.locator(".io.output")).to_contain_text('"title": "Leg day"')
    assert [u for u in read if "/v1/sessions/" in u and "/events" in u] == []
    opened = await _session(page)
    assert any(u.endswith(f"/v1/sessions/{opened}") for u in read)  # the detail instead
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "session_detail_1280.png", full_page=True)

    await page.set_viewport_size({"width": 390, "height": 844})
    await expect(ghost.locator(".tool-error")).to_be_visible()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    head = await ghost.locator("summary").bounding_box()
    badge = await ghost.locator("summary .badge").bounding_box()
    assert head is not None and badge is not None
    assert badge["x"] + badge["width"] <= head["x"] + head["width"] + 1  # nothing runs off
    await page.screenshot(path=SCREENSHOTS / "session_detail_390.png", full_page=True)


async def _session(page: Page) -> str:
    current = page.locator("button.session[aria-current=true]")
    await expect(current).to_have_count(1)
    found = await current.get_attribute("data-session-id")
    assert found is not None
    return found
