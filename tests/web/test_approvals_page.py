"""The Approvals view in a real browser against a real ``bosun serve --dev``: a background
run of the agent ``cleaner`` (triggered by staff) queues its ``workouts.delete`` for
approval; the owner sees the pending count and the item (tool, time left), approves it,
and the count drops while the call runs once; the run's session then reads truthfully
(queued, then approved and ran). An approval someone else answered first says so in
clear words (the 409). A member sees no Approvals at all."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, ViewportSize, expect

from bosun.settings import DEV_JWT_SECRET
from bosun_demo import seed_id
from bosun_web import Bosun, serve
from stream import TokenConfig, mint_token

pytestmark = pytest.mark.asyncio(loop_scope="module")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
DESKTOP: ViewportSize = {"width": 1280, "height": 900}  # conftest's

ORG = "dev-org"  # `serve --dev` seeds its demo data (bosun_demo.seed_demo) at start-up
WORKOUT, OTHER = seed_id(ORG, "wo", 0), seed_id(ORG, "wo", 1)
TASK, OTHER_TASK = "Tidy the old workouts", "Tidy the tempo workout"
GOAL = f"Delete the old workout ({WORKOUT})"


def steps(task: str, workout: str, tool_use_id: str) -> str:
    """A run's scripted replies: a one-step plan, the delete, then the executor's text."""
    return f"""
- match: "{task}"
  text: >-
    {{"strategy": "tool", "reasoning": "One destructive change.", "steps": [{{"id": "s1",
      "goal": "Delete the old workout ({workout})", "tools": ["workouts.delete"]}}]}}
- match: "({workout})"
  tool_calls: [{{id: {tool_use_id}, name: workouts_delete, input: {{workout_id: {workout}}}}}]
- match: "({workout})"
  text: "The delete waits for approval."
"""


SCRIPT = steps(TASK, WORKOUT, "toolu_del") + steps(OTHER_TASK, OTHER, "toolu_other")
CLEANER = {"handle": "cleaner", "name": "Cleaner", "tools": ["workouts.*"], "runs_per_minute": 10}


def token(role: Literal["staff", "member"], user: str) -> str:
    return mint_token(TokenConfig(DEV_JWT_SECRET), user=user, org=ORG, role=role, ttl_s=3600)


def until(check: Any, what: str, timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def run_cleaner(bosun: Bosun, task: str) -> None:
    """Trigger a run of the cleaner as staff (deletes are staff's), wait for its end."""
    staff = {"Authorization": f"Bearer {token('staff', 'sam')}"}
    with bosun.api() as owner:
        queued = owner.post("/v1/agents/cleaner/runs", json={"task": task}, headers=staff)
        assert queued.status_code == 202, queued.text
        run_id = queued.json()["run_id"]
        until(
            lambda: owner.get(f"/v1/runs/{run_id}").json()["status"] == "completed",
            "the run to complete",
        )


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("approvals"), SCRIPT) as served:
        with served.api() as owner:
            made = owner.post("/v1/agents", json=CLEANER)
            assert made.status_code == 201, made.text
        run_cleaner(served, TASK)
        with served.api() as owner:
            pending = owner.get("/v1/approvals", params={"status": "pending"}).json()
        assert pending["counts"] == {"pending": 1}, pending
        yield served


@pytest_asyncio.fixture(loop_scope="module")
async def page_409(browser: Browser) -> AsyncIterator[Page]:
    """conftest's ``page``, but a 409 is expected: Chromium logs the refused request as a
    console error, so that one line is allowed; any other error still fails the test."""
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield opened
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await opened.screenshot(path=SCREENSHOTS / "approval_answered_elsewhere.png")
        await context.close()
    refused = "Failed to load resource: the server responded with a status of 409 (Conflict)"
    assert [e for e in errors if e != refused] == [], f"the page logged errors: {errors}"


def approvals(client: httpx.Client) -> dict[str, Any]:
    listed: dict[str, Any] = client.get("/v1/approvals").json()
    return listed


async def test_owner_approves_a_queued_call(page: Page, bosun: Bosun) -> None:
    assert bosun.query("SELECT id FROM workouts WHERE id = ?", WORKOUT) == [(WORKOUT,)]
    await page.goto(bosun.page_url())
    toggle = page.get_by_role("button", name="Approvals")
    await expect(toggle).to_be_visible()
    count = page.locator("#approvals-count")
    await expect(count).to_have_text("1")  # the top bar's poll, before the view opens

    await toggle.click()
    await expect(page.locator("#chat")).to_be_hidden()
    await expect(toggle).to_have_attribute("aria-pressed", "true")
    item = page.locator("li.approval[data-status=pending]")
    await expect(item).to_have_count(1)
    await expect(item.locator(".tool-name")).to_have_text("workouts.delete")
    await expect(item.locator(".approval-agent")).to_have_text("@cleaner")
    await expect(item.locator(".approval-summary")).to_have_text(GOAL)
    await expect(item.locator(".io.input")).to_contain_text(WORKOUT)
    await expect(item.locator(".approval-left")).to_have_text(
        # the default wait is a day: "expires in 23 h 59 min" (or 24 h 0 min on the edge)
        re.compile(r"^expires in 2[34] h \d+ min$")
    )
    await expect(item.locator(".approval-mode")).to_contain_text("Queued from a run")
    await expect(item.get_by_role("button", name="Open run")).to_be_visible()

    await item.get_by_label("Reason (optional)").fill("old data")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "approvals_view.png")
    await item.get_by_role("button", name="Approve").click()
    answered = page.locator("li.approval[data-status=approved]")
    await expect(answered.locator(".approval-decision")).to_contain_text("Approved by dev")
    await expect(answered.locator(".approval-decision")).to_contain_text("old data")
    await expect(count).to_have_text("0")
    await expect(answered.locator(".approval-outcome")).to_have_text("workouts.delete ran: ok")

    with bosun.api() as client:
        [approval] = approvals(client)["approvals"]
    assert approval["status"] == "approved" and approval["resolved_by"] == "dev"
    assert approval["reason"] == "old data" and approval["outcome"]["ok"] is True
    assert bosun.query("SELECT id FROM workouts WHERE id = ?", WORKOUT) == []

    # The run's session, opened from the item (drawn from its detail), reads truthfully:
    # the queued call was approved and ran.
    await answered.get_by_role("button", name="Open session").click()
    await expect(page.locator("#chat")).to_be_visible()
    await expect(toggle).to_have_attribute("aria-pressed", "false")
    card = page.locator(".card.tool[data-tool-use-id=toolu_del]")
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(card.locator(".badge")).to_have_text("approved · ok")


async def test_an_approval_answered_elsewhere_says_so(page_409: Page, bosun: Bosun) -> None:
    page = page_409
    await asyncio.to_thread(run_cleaner, bosun, OTHER_TASK)
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Approvals").click()
    item = page.locator("li.approval[data-status=pending]")
    await expect(item.locator(".io.input")).to_contain_text(OTHER)
    approval_id = await item.get_attribute("data-approval-id")
    with bosun.api() as client:  # someone else rejects it while the page shows it pending
        rejected = client.post(f"/v1/approvals/{approval_id}/reject", json={"reason": "keep"})
    assert rejected.status_code == 200, rejected.text

    await item.get_by_role("button", name="Approve").click()
    answered = page.locator(f"li.approval[data-approval-id={approval_id}]")
    await expect(answered).to_have_attribute("data-status", "rejected")
    await expect(answered.locator(".approval-error")).to_have_text(
        "Someone answered this already: the first answer stands."
    )
    await expect(answered.locator(".approval-decision")).to_contain_text("Rejected by dev")
    await expect(page.locator("#approvals-count")).to_have_text("0")
    assert bosun.query("SELECT id FROM workouts WHERE id = ?", OTHER) == [(OTHER,)]


async def test_members_see_no_approvals(page: Page, bosun: Bosun) -> None:
    await page.goto(f"{bosun.url}/#token={token('member', 'mo')}")
    await expect(page.locator("#identity")).to_contain_text("mo · dev-org (member)")
    await expect(page.locator("#approvals-toggle")).to_be_hidden()
    await expect(page.get_by_role("button", name="Agents")).to_be_visible()


async def test_an_interrupted_call_shows_as_such(page: Page, bosun: Bosun) -> None:
    with bosun.api() as client:
        approved = [a for a in approvals(client)["approvals"] if a["status"] == "approved"]
    approval_id = approved[0]["id"]
    # What the sweep leaves of a call whose worker died mid-run (the state, written here).
    bosun.query(
        "UPDATE approvals SET status = 'interrupted', outcome = NULL, finished_at = NULL "
        "WHERE id = ?",
        approval_id,
    )
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Approvals").click()
    await expect(page.locator("#approval-counts")).to_contain_text("1 interrupted")
    await page.locator("#approvals-filter").select_option("interrupted")
    item = page.locator(f"li.approval[data-approval-id={approval_id}]")
    await expect(item).to_have_attribute("data-status", "interrupted")
    await expect(item.locator(".badge")).to_have_text("interrupted")
    await expect(item.locator(".approval-decision")).to_contain_text(
        "interrupted: its worker stopped while running it"
    )
    await expect(item.locator(".approval-outcome")).to_have_text("")
    await expect(page.locator("li.approval")).to_have_count(1)
