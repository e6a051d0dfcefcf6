"""The web page's links and reloads in a real browser against a real ``bosun serve --dev``:
a ``#token=`` link pasted into an open tab, the sign-in help, and a reload mid-turn.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import pytest
from playwright.async_api import Page, expect

from bosun.settings import DEV_JWT_SECRET
from bosun_web import Bosun, serve
from stream import TokenConfig, mint_token

pytestmark = pytest.mark.asyncio(loop_scope="module")

GREETING = "The front desk opens at seven, and towels are at the back."
LONG = (
    "Here is the slow plan, one word at a time: ten minutes of rowing, four rounds of "
    "lunges, push-ups and planks, then a long stretch and a cool down walk."
)
SCRIPT = f"""
- match: "front desk open"
  text: '{{"strategy": "simple", "reasoning": "Small talk."}}'
- match: "front desk open"
  text: "{GREETING}"
- match: "slow plan please"
  text: '{{"strategy": "simple", "reasoning": "Just talk."}}'
- match: "slow plan please"
  text: "{LONG}"
  delay_s: 0.15
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("links"), SCRIPT) as served:
        yield served


def member_token(user: str, ttl_s: int = 3600) -> str:
    config = TokenConfig(DEV_JWT_SECRET)
    return mint_token(config, user=user, org="dev-org", role="member", ttl_s=ttl_s)


async def paste_link(page: Page, token: str) -> None:
    """What pasting a ``#token=`` link of the same page does: only the fragment changes."""
    await page.evaluate("(token) => { location.hash = `#token=${token}`; }", token)


async def test_pasted_link_signs_in_without_reload(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.url)
    await expect(page.locator("#login")).to_be_visible()
    await expect(page.locator("#message")).to_be_disabled()
    await page.evaluate("window.loadedOnce = true")  # gone if the page loaded again
    dev, ada = bosun.token(), member_token("ada")  # minted once: a token holds its time

    await paste_link(page, dev)

    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")
    await expect(page.locator("#message")).to_be_enabled()
    await expect(page.locator("#login")).to_be_hidden()
    assert "token=" not in page.url
    assert await page.evaluate("localStorage.getItem('bosun.token')") == dev
    await page.locator("#message").fill("When does the front desk open?")
    await page.locator("#message").press("Enter")
    await expect(page.locator(".answer")).to_have_text(GREETING)
    await expect(page.locator("button.session")).to_have_count(1)

    # Another user's link replaces the signed-in one and everything it showed.
    await paste_link(page, ada)

    await expect(page.locator("#identity")).to_contain_text("ada · dev-org (member)")
    await expect(page.locator(".turn")).to_have_count(0)
    await expect(page.locator("#sessions-toggle")).to_have_text("Sessions (0)")
    await expect(page.locator("button.session")).to_have_count(0)
    assert "token=" not in page.url and "session=" not in page.url
    assert await page.evaluate("localStorage.getItem('bosun.token')") == ada

    await paste_link(page, dev)  # and back: dev's session is listed again
    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")
    await expect(page.locator("button.session")).to_have_count(1)
    assert await page.evaluate("window.loadedOnce") is True


async def test_sign_in_help_names_the_real_commands(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.url)
    help_text = page.locator("#token-help")
    await expect(help_text).to_be_visible()
    await expect(help_text).to_contain_text("bosun serve --dev")
    await expect(page.locator("#token-input")).to_have_attribute("aria-describedby", "token-help")
    minted = await help_text.locator("code", has_text="bosun token").inner_text()

    # The command it names mints a token the page signs in with.
    args = shlex.split(minted.replace("NAME", "ada").replace("ORG", "dev-org"))
    assert args[0] == "bosun"
    done = bosun.cli(*args[1:])
    assert done.returncode == 0, done.stderr
    await page.locator("#token-input").fill(done.stdout.strip())
    await page.locator("#token-input").press("Enter")
    await expect(page.locator("#identity")).to_contain_text("ada · dev-org (member)")
    await expect(help_text).to_be_hidden()

    # An expired token signs the page out: the help shows again.
    await paste_link(page, member_token("ada", ttl_s=-60))
    await expect(page.locator("#login")).to_be_visible()
    await expect(help_text).to_be_visible()
    await expect(page.locator("#identity")).to_be_hidden()
    assert await page.locator("#token-input").evaluate("input => input.validationMessage") == (
        "That token has expired: mint a new one."
    )


async def test_reload_reattaches_to_the_running_turn(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")
    await page.locator("#message").fill("The slow plan please")
    await page.locator("#message").press("Enter")
    answer = page.locator(".answer")
    await expect(answer).to_contain_text("Here is the slow plan")
    await expect(page).to_have_url(re.compile(r"#session=[\w-]+$"))
    opened = page.url.rsplit("#session=", 1)[1]
    assert not (await answer.inner_text()).endswith("walk.")  # still streaming

    await page.reload()

    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")
    await expect(page.locator("body")).to_have_attribute("data-busy", "true")  # following it
    await expect(page.locator(".bubble.user")).to_have_text("The slow plan please")
    current = page.locator("button.session[aria-current=true]")
    await expect(current).to_have_attribute("data-session-id", opened)
    await expect(page.locator(".turn-status[data-status=completed]")).to_be_visible()
    await expect(answer).to_have_text(LONG)  # every word, exactly once
    assert "token=" not in page.url and page.url.endswith(f"#session={opened}")
    ids = await page.locator("[data-event-id]").evaluate_all(
        "nodes => nodes.map(n => Number(n.dataset.eventId))"
    )
    assert len(ids) == len(set(ids))
    deltas = await answer.locator("[data-event-id]").evaluate_all(
        "nodes => nodes.map(n => Number(n.dataset.eventId))"
    )
    log = bosun.events(opened)
    assert deltas == [e["seq"] for e in log if e["type"] == "text_delta"]
