"""The Agents view for a member in a real browser: they start a run from the page, see
it through to its answer, and never see the owner's run (their list is their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.async_api import Page, expect

from bosun.settings import DEV_JWT_SECRET
from bosun_web import Bosun, serve
from stream import TokenConfig, mint_token

pytestmark = pytest.mark.asyncio(loop_scope="module")

PLAN = """
- match: "You are the planner"
  text: '{"strategy": "simple", "reasoning": "A quick check."}'
"""
ANSWER = """
- match: "You are Bosun"
  text: "Checked: nothing clashes."
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("member"), PLAN * 2 + ANSWER * 2) as served:
        with served.api() as owner:
            made = owner.post("/v1/agents", json={"handle": "scheduler", "name": "Scheduler"})
            assert made.status_code == 201, made.text
            queued = owner.post("/v1/agents/scheduler/runs", json={"task": "The owner's task"})
            assert queued.status_code == 202, queued.text
        yield served


async def test_a_member_sees_and_follows_their_own_runs_only(page: Page, bosun: Bosun) -> None:
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="mia", org="dev-org", role="member", ttl_s=3600
    )
    await page.goto(f"{bosun.url}/#token={token}")
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=scheduler]").click()
    await page.get_by_label("Task").fill("Mia's check")
    await page.get_by_role("button", name="Run in background").click()
    await expect(page.locator(".run-note")).to_have_text("Queued.")

    runs = page.locator("tr.run")
    await expect(page.locator("tr.run[data-status=completed]")).to_have_count(1, timeout=20_000)
    await expect(runs).to_have_count(1)  # the owner's run is not in a member's list
    await expect(runs.first.locator(".run-task")).to_have_text("Mia's check")
    await runs.first.click()
    await expect(page.locator("#run-detail .run-answer")).to_have_text("Checked: nothing clashes.")
