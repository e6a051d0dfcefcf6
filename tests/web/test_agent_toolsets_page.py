"""The Agents view shows the MCP toolsets an agent is granted, in a real browser against a
real ``bosun serve --dev``: one served over stdio by the tests' real MCP server is
connected, one whose server cannot be reached is down with the reason (its tools are
withheld from the agent's turns until it is back)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

ALLOW_STDIO_ENV = {"BOSUN_MCP__STDIO_COMMANDS": json.dumps([sys.executable])}
"""The test server runs under this Python (``mcp.stdio_commands``; off by default)."""
MCP_SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp_server.py"
SCRIPT = """
- match: "You are the planner"
  text: '{"strategy": "simple", "reasoning": "A quick check."}'
"""


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    workdir = tmp_path_factory.mktemp("toolsets")
    with serve(workdir, SCRIPT, env=ALLOW_STDIO_ENV) as served, served.api() as client:
        stdio = [sys.executable, str(MCP_SERVER), "--state", str(workdir / "state.json")]
        for name, body in (
            ("tickets", {"transport": "stdio", "command": stdio}),
            ("billing", {"transport": "http", "url": "http://127.0.0.1:9/mcp"}),  # nothing there
        ):
            saved = client.put(f"/v1/mcp/toolsets/{name}", json=body)
            assert saved.status_code in (200, 201), saved.text
        made = client.post(
            "/v1/agents",
            json={"handle": "helpdesk", "name": "Helpdesk", "tools": ["tickets.*", "billing.*"]},
        )
        assert made.status_code == 201, made.text
        yield served


async def test_an_agent_shows_its_connected_and_down_toolsets(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=helpdesk]").click()

    section = page.get_by_role("region", name="MCP toolsets")
    await expect(section.locator("h5")).to_have_text("Tools from MCP servers")
    connected = section.locator("li.toolset[data-toolset=tickets]")
    await expect(connected).to_have_attribute("data-state", "connected")
    await expect(connected).to_have_text("tickets · connected")
    down = section.locator("li.toolset[data-toolset=billing]")
    await expect(down).to_have_attribute("data-state", "down")
    await expect(down).to_contain_text("billing · down, its tools withheld: ")


async def test_an_agent_without_toolsets_shows_none(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=default]").click()
    await expect(page.locator("#agent-costs")).to_be_attached()
    await expect(page.locator("#agent-toolsets")).to_be_empty()
