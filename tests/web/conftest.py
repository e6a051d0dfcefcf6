"""Browser fixtures: Debian's headless Chromium driven by Playwright (never a downloaded
browser). Each test gets a fresh browser context (so a fresh localStorage) and leaves a
screenshot of its final state in ``artifacts/screenshots/<scenario>.png``.

``--docs-screenshots`` also writes the screenshots the docs show (``docs/web-*.png``) where
the tests take them (``docs_shot``): ``pytest tests/web --docs-screenshots`` refreshes them
all (docs/web.md)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

from bosun_web import DocsShot

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
DOCS = Path(__file__).resolve().parents[2] / "docs"
DESKTOP = {"width": 1280, "height": 900}
expect.set_options(timeout=15_000)
"""Playwright's 5 s default is for a quiet machine; the suite runs on every core at once."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--docs-screenshots",
        action="store_true",
        help="also write the docs' screenshots (docs/web-*.png) from the browser tests",
    )


@pytest.fixture
def docs_shot(request: pytest.FixtureRequest) -> DocsShot:
    """``await docs_shot(page, "web-agents.png")``: the page as the docs show it, written
    to ``artifacts/screenshots/`` and, with ``--docs-screenshots``, to ``docs/``."""
    refresh = bool(request.config.getoption("--docs-screenshots", default=False))

    async def shoot(page: Page, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=SCREENSHOTS / name)
        if refresh:
            (DOCS / name).write_bytes((SCREENSHOTS / name).read_bytes())

    return shoot


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but there is no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    require_chromium()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A page in a fresh context; fails the test on an uncaught script error."""
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield opened
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        scenario = request.node.name.removeprefix("test_")
        await opened.screenshot(path=SCREENSHOTS / f"{scenario}.png")
        await context.close()
    assert not errors, f"the page logged errors: {errors}"
