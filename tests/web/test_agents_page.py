"""The Agents view in a real browser against a real ``bosun serve --dev``: an owner picks
an agent, starts background runs from the page, and watches them go from queued (two run
per agent at a time) to completed, then reads a run's detail; subscribes the agent to the
host app's events and sees a run a mention started, with its trigger."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

DONE = "Checked the schedule: nothing clashes this week."
PLAN = """
- match: "You are the planner"
  text: '{"strategy": "simple", "reasoning": "A quick check."}'
"""
ANSWER = """
- match: "You are Bosun"
  chunks: ["Checked the schedule: ", "nothing clashes ", "this week."]
  delay_s: 1.0
"""
SCRIPT = PLAN * 4 + ANSWER * 4  # four runs (three from the page, one mention), each its own


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("agents"), SCRIPT) as served:
        with served.api() as client:
            made = client.post(
                "/v1/agents",
                json={"handle": "scheduler", "name": "Scheduler", "runs_per_minute": 5},
            )
            assert made.status_code == 201, made.text
        yield served


async def test_background_runs_go_from_queued_to_completed(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await expect(page.locator("#chat")).to_be_hidden()
    await page.locator("button.agent[data-handle=scheduler]").click()

    task = page.get_by_label("Task")
    runs = page.locator("tr.run")
    for queued in range(1, 4):  # each answered before the next: a fill never races a clear
        await task.fill("Check this week's schedule")
        await page.get_by_role("button", name="Run in background").click()
        await expect(page.locator(".run-note")).to_have_text("Queued.")
        await expect(task).to_have_value("")
        await expect(runs).to_have_count(queued)

    await expect(page.locator("tr.run[data-status=queued]")).to_have_count(1)  # two at a time
    await expect(page.locator("tr.run[data-status=completed]")).to_have_count(3, timeout=20_000)
    await expect(runs.first.locator(".run-status")).to_have_text("Completed")

    await runs.first.click()
    detail = page.locator("#run-detail")
    await expect(detail.locator("h4")).to_contain_text("Completed")
    await expect(detail.locator(".run-answer")).to_have_text(DONE)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "agents_view.png")
    await page.get_by_role("button", name="Agents").click()  # back to the chat
    await expect(page.locator("#chat")).to_be_visible()


async def test_subscriptions_and_a_mentioned_runs_trigger_show(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=scheduler]").click()
    subs = page.locator("#agent-subs")
    await expect(subs.locator(".subs-none")).to_be_visible()

    await page.get_by_label("Resource type").fill("note")
    await page.get_by_label("Event types (optional)").fill("commented, updated")
    await subs.get_by_role("button", name="Subscribe").click()
    await expect(subs.locator("li.sub")).to_have_text("every note · commented, updated Remove")

    event = {
        "id": "evt-web-1", "type": "created", "resource": {"type": "task", "id": "t1"},
        "actor": {"type": "user", "id": "sam"}, "text": "@scheduler check my week",
        "at": datetime.now(UTC).isoformat(),
    }  # fmt: skip
    with bosun.api() as client:
        posted = client.post("/v1/events", json=event)
    assert posted.status_code == 202, posted.text
    await page.locator("button.agent[data-handle=scheduler]").click()  # the list again
    mentioned = page.locator("tr.run", has=page.locator(".run-trigger", has_text="mentioned"))
    await expect(mentioned).to_have_count(1)
    await mentioned.click()
    await expect(page.locator("#run-detail .run-trigger-detail")).to_have_text(
        "Trigger: mentioned (event evt-web-1, hop 1)"
    )

    await subs.locator("li.sub").get_by_role("button", name="Remove").click()
    await expect(subs.locator(".subs-none")).to_be_visible()
