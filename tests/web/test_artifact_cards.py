"""Artifact cards in a real browser against a real ``bosun serve --dev`` playing
``examples/trainer.yaml``: a scripted conversation generates a workout and delivers it
with message_notify_user; the page renders the workout card (exercises with their
type's fields), then version 2 after a swap, and again after a reload from the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainer.yaml"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    steps = yaml.safe_load(EXAMPLE.read_text())["steps"]
    # Default budgets: the trainer's tools are sent whole with no override (issue 26).
    with serve(tmp_path_factory.mktemp("trainer"), yaml.safe_dump(steps)) as served:
        yield served


async def send(page: Page, text: str) -> None:
    await page.locator("#message").fill(text)
    await page.locator("#message").press("Enter")


async def test_the_delivered_workout_renders_as_a_card(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await send(page, "Give me a quick chest workout")

    card = page.locator(".agent-message .card.artifact[data-artifact-type=workout]")
    await expect(card).to_have_count(1, timeout=20_000)
    await expect(page.locator(".agent-message .bubble.agent")).to_contain_text(
        "quick chest workout"
    )
    await expect(card.locator(".artifact-title")).to_have_text("Quick chest workout")
    exercises = card.locator("li.exercise")
    await expect(exercises).to_have_count(3)
    await expect(exercises.nth(0).locator(".exercise-name")).to_have_text("Push-up")
    await expect(exercises.nth(0).locator(".exercise-facts")).to_have_text(
        "3 × 12, 10, 8 · rest 60 s"  # noqa: RUF001
    )
    await expect(exercises.nth(1).locator(".exercise-facts")).to_have_text(
        "3 × 30 s, 40 s, 45 s hold · rest 30 s"  # noqa: RUF001
    )
    await expect(exercises.nth(2).locator(".exercise-facts")).to_have_text(
        "6 rounds · 20 s on / 10 s off"
    )
    await expect(exercises.nth(2).locator(".exercise-group")).to_contain_text("circuit Finisher")
    await expect(page.locator(".note.artifact-saved")).to_contain_text(
        "workout “Quick chest workout” created"
    )
    await expect(
        page.locator(".turn").last.locator(".done, [data-status=completed]").first
    ).to_be_attached(timeout=20_000)

    await send(page, "Swap the first exercise for dips")
    revised = page.locator(".card.artifact[data-version='2']")
    await expect(revised).to_have_count(1, timeout=20_000)
    await expect(revised.locator("li.exercise").nth(0).locator(".exercise-name")).to_have_text(
        "Bench dip"
    )
    await expect(revised.locator(".badge").first).to_have_text("workout · v2")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / "artifact_card.png", full_page=True)

    await page.reload()  # read back from the log: the same cards
    await page.locator("#sessions li, #sessions button").first.click()
    await expect(page.locator(".card.artifact[data-artifact-type=workout]")).to_have_count(
        2, timeout=20_000
    )
