"""The chat page for a member of an org whose default agent talks only to owners and
staff, in a real browser: the message is refused with the forbidden_role card and no
session opens."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, ViewportSize, expect

from bosun.settings import DEV_JWT_SECRET
from bosun_web import Bosun, serve
from stream import TokenConfig, mint_token

pytestmark = pytest.mark.asyncio(loop_scope="module")
DESKTOP: ViewportSize = {"width": 1280, "height": 900}  # conftest's

ANSWER = """
- match: "You are Bosun"
  text: "Never sent: the member is refused first."
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("access"), ANSWER) as served:
        with served.api() as owner:
            staff_only = {"name": "Default", "access": {"chat": ["owner", "staff"]}}
            saved = owner.put("/v1/agents/default", json=staff_only)
            assert saved.status_code == 200, saved.text
        yield served


@pytest_asyncio.fixture(loop_scope="module")
async def page_403(browser: Browser) -> AsyncIterator[Page]:
    """conftest's ``page``, but a 403 is expected: Chromium logs the refused request as a
    console error, so that one line is allowed; any other error still fails the test."""
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield opened
    finally:
        await context.close()
    refused = "Failed to load resource: the server responded with a status of 403 (Forbidden)"
    assert [e for e in errors if e != refused] == [], f"the page logged errors: {errors}"


async def test_a_members_message_to_a_staff_only_agent_is_refused(
    page_403: Page, bosun: Bosun
) -> None:
    page = page_403
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="mia", org="dev-org", role="member", ttl_s=3600
    )
    await page.goto(f"{bosun.url}/#token={token}")
    composer = page.locator("#message")
    await composer.fill("hello")
    await composer.press("Enter")

    card = page.locator(".card.error[data-code=forbidden_role]")
    await expect(card.locator(".error-text")).to_have_text(
        "This agent does not take that from your role: ask an owner or staff."
    )
    await expect(card.locator(".error-detail")).to_contain_text("talks only to owner or staff")
    await expect(page.locator("button.session")).to_have_count(0)
    assert bosun.query("SELECT count(*) FROM sessions") == [(0,)]
