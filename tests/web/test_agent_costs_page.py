"""The Agents view's costs in a real browser against a real ``bosun serve --dev``: an agent
its cost limit paused shows why, that it spent nothing yet and the alert it fired; Resume
unpauses it and a run can start again (the 409 of a paused agent's run is tested over
HTTP: the page would log the failed request)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCRIPT = """
- match: "You are the planner"
  text: '{"strategy": "simple", "reasoning": "A quick check."}'
- match: "You are Bosun"
  text: "Checked."
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("costs"), SCRIPT) as served:
        with served.api() as client:
            made = client.post(
                "/v1/agents",
                json={"handle": "spender", "name": "Spender",
                      "cost": {"alert_thresholds_usd": [1], "limit_usd": 2}},
            )  # fmt: skip
            assert made.status_code == 201, made.text
        now = datetime.now(UTC)
        served.query(  # what the cost guard does at the limit (a scripted model costs $0)
            "UPDATE agents SET paused_at = ?, paused_reason = 'cost_limit' WHERE handle = ?",
            now.strftime("%Y-%m-%d %H:%M:%S.%f"), "spender",
        )  # fmt: skip
        served.query(
            "INSERT INTO agent_cost_alerts VALUES (?, ?, ?, ?, ?, ?)",
            "dev-org", "spender", now.strftime("%Y-%m"), 1_000_000, 1_200_000,
            now.strftime("%Y-%m-%d %H:%M:%S.%f"),
        )  # fmt: skip
        yield served


async def test_a_paused_agent_shows_why_and_resumes(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await expect(page.locator("button.agent[data-handle=spender]")).to_contain_text("paused")
    await page.locator("button.agent[data-handle=spender]").click()

    banner = page.locator(".agent-paused")
    await expect(banner).to_contain_text("cost limit")
    # a scripted model costs nothing: no bars to draw, and the page says so
    await expect(page.locator(".cost-empty")).to_have_text("No spend yet in the last 14 days.")
    await expect(page.locator(".cost-alerts li")).to_have_count(1)
    await expect(page.locator(".cost-alerts li")).to_contain_text("$1.0000")

    await banner.get_by_role("button", name="Resume").click()
    await expect(page.locator(".agent-paused")).to_have_count(0)
    await expect(page.locator("button.agent[data-handle=spender]")).not_to_contain_text("paused")
    await page.get_by_label("Task").fill("Check the schedule")
    await page.get_by_role("button", name="Run in background").click()
    await expect(page.locator(".run-note")).to_have_text("Queued.")
    await expect(page.locator("tr.run[data-status=completed]")).to_have_count(1, timeout=20_000)
