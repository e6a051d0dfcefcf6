"""At the daily cap the web chat says so and stops taking messages (a real browser and a
real ``bosun serve --dev`` whose org is moved to a zero-dollar tier)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    script = '- text: "Never sent: the cap stops the turn before any model call."'
    tiers = {"BOSUN_CAPS__TIERS": '{"lite": 1.0, "zero": 0}'}
    with serve(tmp_path_factory.mktemp("budget"), script, env=tiers) as served:
        yield served


async def test_budget_exceeded(page: Page, bosun: Bosun) -> None:
    moved = bosun.cli("org-tier", "--org", "dev-org", "--tier", "zero",
                      "--database-url", bosun.database_url)  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == "org dev-org: tier zero ($0.00 a day)"
    await page.goto(bosun.page_url())
    usage = page.locator("#usage")
    await expect(usage).to_have_text("Today: $0.00 of $0.00 (100 %), tier zero")
    await expect(usage).to_have_class(re.compile(r"\bwarning\b"))
    composer = page.locator("#message")
    await expect(composer).to_be_enabled()

    await composer.fill("Plan my week")
    await composer.press("Enter")

    notice = page.locator("#blocked")
    await expect(notice).to_be_visible()
    await expect(notice).to_contain_text("Your organisation's daily model budget is used up.")
    await expect(notice.locator("code")).to_have_text("budget_exceeded")
    await expect(composer).to_be_disabled()
    await expect(page.locator("#send")).to_be_disabled()
    error = page.locator(".card.error[data-code=budget_exceeded]")
    await expect(error.locator(".error-detail")).to_contain_text("(tier zero) is used up")
    await expect(error.locator(".trace")).to_have_text(re.compile(r"^[0-9a-f]{32}$"))
    await expect(page.locator(".turn-status")).to_have_text("Failed")
    await expect(page.locator(".answer")).to_have_text("")
