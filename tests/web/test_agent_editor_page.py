"""The finished Agents view and the agent editor in a real browser against a real
``bosun serve --dev`` (``workouts.delete`` blocked on the server), at 1280 and 390 px: the
selected agent, a labelled spend chart or "No spend yet", headed run tables in the
singular where it is one, run rows on a phone that never wrap past two lines with the
detail opened in view, a header that fits a phone; an owner edits an agent's tools and
identity and saves version 2, shown with what changed; bad input shows the API's error;
members get no editor."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, Page, expect

from bosun.settings import DEV_JWT_SECRET
from bosun_web import Bosun, DocsShot, serve
from stream import TokenConfig, mint_token

pytestmark = pytest.mark.asyncio(loop_scope="module")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
QUICK = 8  # runs of the quick task: more than a phone shows above the fold
SIMPLE = """
- match: "Check the schedule"
  text: '{"strategy": "simple", "reasoning": "A quick check."}'
- match: "You are Bosun"
  text: "Checked: nothing clashes."
"""
LOOKUP = """
- match: "Look up Priya"
  text: >-
    {"strategy": "tool", "reasoning": "One search.",
     "steps": [{"id": "s1", "goal": "Find the member Priya",
                "tools": ["members.get", "members.search"], "max_tool_calls": 3}]}
- match: "Find the member Priya"
  tool_calls: [{id: toolu_ghost, name: members_get, input: {member_id: mem_ghost}}]
- match: "Find the member Priya"
  tool_calls: [{id: toolu_find, name: members_search, input: {query: Priya}}]
- match: "Find the member Priya"
  text: "Priya Natarajan is an active member."
"""
SCRIPT = LOOKUP + SIMPLE * QUICK
BLOCKED = {"BOSUN_EXECUTOR__BLOCK_TOOLS": json.dumps(["workouts.delete"])}


def _run(bosun: Bosun, handle: str, task: str) -> str:
    """Queue a run over the API and wait for it to complete."""
    with bosun.api() as client:
        made = client.post(f"/v1/agents/{handle}/runs", json={"task": task})
        assert made.status_code == 202, made.text
        run_id: str = made.json()["run_id"]
        deadline = time.monotonic() + 30
        while (status := client.get(f"/v1/runs/{run_id}").json()["status"]) != "completed":
            assert status in ("queued", "running") and time.monotonic() < deadline, status
            time.sleep(0.1)
    return run_id


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    with serve(tmp_path_factory.mktemp("editor"), SCRIPT, env=BLOCKED) as served:
        with served.api() as client:
            for body in (
                {"handle": "coach", "name": "Coach", "identity_prompt": "You are Coach.",
                 "tools": ["members.*"], "runs_per_minute": 30},
                {"handle": "spender", "name": "Spender", "runs_per_minute": 30},
            ):  # fmt: skip
                made = client.post("/v1/agents", json=body)
                assert made.status_code == 201, made.text
        _run(served, "spender", "Look up Priya")
        for _ in range(QUICK):
            _run(served, "coach", "Check the schedule")
        # A scripted model costs nothing: give the spender's calls a cost, over two days.
        spent = "SELECT id FROM sessions WHERE agent = 'spender'"
        served.query(f"UPDATE usage SET cost_usd_micros = 4200 WHERE session_id IN ({spent})")  # noqa: S608
        served.query(
            f"UPDATE usage SET created_at = datetime(created_at, '-3 days') WHERE id = "  # noqa: S608
            f"(SELECT min(id) FROM usage WHERE session_id IN ({spent}))"
        )
        yield served


async def open_agent(page: Page, bosun: Bosun, handle: str) -> None:
    await page.goto(bosun.page_url())
    await page.get_by_role("button", name="Agents").click()
    await page.locator(f"button.agent[data-handle={handle}]").click()
    await expect(page.locator(f"button.agent[data-handle={handle}]")).to_have_attribute(
        "aria-current", "true"
    )


async def test_the_agents_view_is_finished(page: Page, bosun: Bosun, docs_shot: DocsShot) -> None:
    await page.set_viewport_size(DESKTOP)
    await open_agent(page, bosun, "coach")
    await expect(page.locator("button.agent[aria-current=true]")).to_have_count(1)
    await expect(page.locator(".cost-empty")).to_have_text("No spend yet in the last 14 days.")
    await expect(page.locator(".cost-bars")).to_have_count(0)
    heads = page.locator("table.runs thead th")
    await expect(heads).to_have_text(["Task", "Trigger", "Status", "Work and cost", "Started"])
    runs = page.locator("tr.run")
    await expect(runs).to_have_count(QUICK)
    await expect(runs.first.locator(".run-figures")).to_have_text(
        "0 steps · 0 tool calls · $0.0000"
    )

    await page.locator("button.agent[data-handle=spender]").click()
    await expect(page.locator("button.agent[data-handle=spender]")).to_have_attribute(
        "aria-current", "true"
    )
    await expect(page.locator("button.agent[data-handle=coach]")).not_to_have_attribute(
        "aria-current", "true"
    )
    chart = page.locator("figure.cost-chart")
    calls = len(bosun.query("SELECT id FROM usage WHERE session_id IN "
                            "(SELECT id FROM sessions WHERE agent = 'spender')"))  # fmt: skip
    await expect(chart.locator("figcaption")).to_contain_text(f"${calls * 4200 / 1e6:.4f} in all")
    await expect(chart.locator(".cost-axis span").first).to_have_text(
        f"${(calls - 1) * 0.0042:.4f}"
    )
    await expect(chart.locator(".cost-bars li")).to_have_count(14)
    days = await chart.locator(".cost-day").all_inner_texts()
    assert days[-1] and days[0] and sum(1 for d in days if d) >= 7, days  # labelled days
    labels = await chart.locator(".cost-bars li").evaluate_all(
        "nodes => nodes.map(n => n.getAttribute('aria-label'))"
    )
    assert labels[10].endswith(": $0.0042") and labels[13].endswith(
        f": ${(calls - 1) * 0.0042:.4f}"
    )
    lookup = page.locator("tr.run")
    await expect(lookup).to_have_count(1)
    await expect(lookup.locator(".run-figures")).to_have_text(
        f"1 step · 2 tool calls · ${calls * 4200 / 1e6:.4f}"
    )
    await lookup.click()
    await expect(lookup).to_have_attribute("aria-current", "true")
    await expect(page.locator("#run-detail .run-steps li")).to_have_text(
        ["s1: done, 1 tool call failed · 2 tool calls"]  # a failed call: not a plain "ok"
    )
    await expect(page.locator("#run-detail .run-calls li")).to_have_count(2)
    await page.locator("#agents").evaluate("n => n.scrollTo(0, 0)")  # the docs show it whole
    await docs_shot(page, "web-agents.png")


async def test_the_agents_view_fits_a_phone(page: Page, bosun: Bosun, docs_shot: DocsShot) -> None:
    await page.set_viewport_size(PHONE)
    await open_agent(page, bosun, "coach")
    runs = page.locator("tr.run")
    await expect(runs).to_have_count(QUICK)
    line = await page.evaluate("parseFloat(getComputedStyle(document.body).lineHeight)")
    for box in [await runs.nth(i).bounding_box() for i in range(QUICK)]:
        assert box is not None and box["height"] <= 2 * line + 12, box  # one or two lines
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    for name in ("Agents", "Approvals", "Sign out"):
        button = page.locator("#identity").get_by_role("button", name=name)
        box = await button.bounding_box()
        assert box is not None and box["height"] < 1.5 * line, (name, box)  # never wraps
        assert box["x"] + box["width"] <= PHONE["width"], (name, box)

    await docs_shot(page, "web-agents-phone.png")

    await runs.last.click()  # below the fold: the detail scrolls into view
    detail = page.locator("#run-detail h4")
    await expect(detail).to_contain_text("Completed")
    await expect(detail).to_be_in_viewport()


async def test_an_owner_edits_tools_and_identity_and_sees_version_2(
    page: Page, bosun: Bosun, docs_shot: DocsShot
) -> None:
    await page.set_viewport_size(DESKTOP)
    await open_agent(page, bosun, "coach")
    await page.get_by_role("button", name="Edit agent").click()
    editor = page.locator("form.agent-editor")
    await expect(editor.locator(".edit-title")).to_have_text("Edit @coach · v1")
    await expect(editor.get_by_label("Identity prompt")).to_have_value("You are Coach.")
    members = editor.locator("fieldset.edit-router[data-router=members]")
    await expect(members.locator("input[value='members.*']")).to_be_checked()
    await expect(members.locator("input[value='members.search']")).to_be_disabled()  # covered
    blocked = editor.locator("label.edit-tool[data-tool='workouts.delete']")
    await expect(blocked.locator("input")).to_be_disabled()
    await expect(blocked.locator(".edit-tag.blocked")).to_have_text("blocked")
    routers = await editor.locator("fieldset.edit-router").evaluate_all(
        "nodes => nodes.map(n => n.dataset.router)"
    )
    assert {"members", "workouts", "tasks"} <= set(routers), routers

    await editor.locator("input[value='workouts.create']").check()
    await editor.get_by_label("Identity prompt").fill("You are Coach: brief and kind.")
    await editor.get_by_role("button", name="Save as v2").click()
    await expect(editor.locator(".edit-title")).to_have_text("Edit @coach · v2")
    changes = editor.locator(".edit-changes")
    await expect(changes.locator("h5")).to_have_text("Changes in v2 (from v1)")
    await expect(changes.locator("li")).to_have_count(2)
    await expect(changes.locator("li[data-field=tools]")).to_have_text('tools: + "workouts.create"')
    await expect(changes.locator("li[data-field=identity_prompt]")).to_have_text(
        'identity_prompt: "You are Coach." → "You are Coach: brief and kind."'
    )
    await expect(page.locator("button.agent[data-handle=coach] .agent-meta")).to_contain_text("v2")
    with bosun.api() as client:
        saved = client.get("/v1/agents/coach").json()
    assert (saved["version"], saved["tools"]) == (2, ["members.*", "workouts.create"])
    assert saved["identity_prompt"] == "You are Coach: brief and kind."
    await docs_shot(page, "web-agent-editor.png")

    # Reopened (a reload), the editor shows what version 2 changed, read from version 1.
    # A real load: going to the same link in the open tab is only a fragment change,
    # whose sign-in re-renders the agents view under the clicks below.
    await page.set_viewport_size(PHONE)
    await page.goto("about:blank")
    await open_agent(page, bosun, "coach")
    await page.get_by_role("button", name="Edit agent").click()
    await expect(editor.locator(".edit-title")).to_have_text("Edit @coach · v2")
    await expect(changes.locator("li")).to_have_count(2)
    await expect(editor.locator("input[value='workouts.create']")).to_be_checked()
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert await editor.evaluate("n => n.scrollWidth <= n.clientWidth")
    await docs_shot(page, "web-agent-editor-phone.png")

    # On the phone too: untick the tool, save v3, see just that change.
    await editor.locator("input[value='workouts.create']").uncheck()
    await editor.get_by_role("button", name="Save as v3").click()
    await expect(editor.locator(".edit-title")).to_have_text("Edit @coach · v3")
    await expect(changes.locator("h5")).to_have_text("Changes in v3 (from v2)")
    await expect(changes.locator("li")).to_have_text(['tools: \u2212 "workouts.create"'])
    await expect(editor.locator(".edit-title")).to_be_in_viewport()


async def test_bad_input_shows_the_apis_error(browser: Browser, bosun: Bosun) -> None:
    """A fresh page of its own: the refused save's 422 is logged by the browser, which the
    ``page`` fixture counts as an error."""
    context = await browser.new_context(viewport=DESKTOP)
    page = await context.new_page()
    logged: list[str] = []
    page.on("console", lambda msg: logged.append(msg.text) if msg.type == "error" else None)
    try:
        await open_agent(page, bosun, "spender")
        await page.get_by_role("button", name="Edit agent").click()
        editor = page.locator("form.agent-editor")
        await editor.get_by_label("Cron (UTC)").fill("0 0 30 2 *")  # 30 February: never
        await editor.get_by_label("Scheduled task").fill("Report")
        await editor.get_by_role("button", name="Save as v2").click()
        error = editor.locator(".edit-error")
        await expect(error).to_have_attribute("data-code", "invalid_schedule")
        await expect(error).to_contain_text("invalid_schedule: ")
        await expect(editor.locator(".edit-title")).to_have_text("Edit @spender · v1")
    finally:
        await context.close()
    assert [m for m in logged if "422" not in m] == [], logged
    with bosun.api() as client:
        assert client.get("/v1/agents/spender").json()["version"] == 1  # nothing saved


async def test_members_get_no_editor(page: Page, bosun: Bosun) -> None:
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="ada", org="dev-org", role="member", ttl_s=3600
    )
    await page.goto(f"{bosun.url}/#token={token}")
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=coach]").click()
    await expect(page.locator("button.agent[data-handle=coach]")).to_have_attribute(
        "aria-current", "true"
    )
    await expect(page.locator("table.runs thead th")).to_have_count(5)
    await expect(page.get_by_role("button", name="Edit agent")).to_have_count(0)
    await expect(page.locator("form.agent-create")).to_have_count(0)  # the org has not let them
    await expect(page.locator("fieldset.org-settings")).to_have_count(0)  # owners only


async def test_changes_list_each_changed_field(page: Page, bosun: Bosun) -> None:
    """The editor's diff, in the browser: a list's additions and removals, a nested
    field's old and new, a long text cut short, the server's own fields left out."""
    await page.goto(bosun.url)
    lines = await page.evaluate(
        """async () => {
            const { changes } = await import("/web/editor.js");
            const before = {name: "A", identity_prompt: "x".repeat(100), tools: ["a.*", "b.c"],
                            limits: {max_steps: 30}, schedule: null, version: 1};
            const after = {name: "A", identity_prompt: "y", tools: ["b.c", "d.*"],
                           limits: {max_steps: 20}, schedule: null, version: 2};
            return changes(before, after);
        }"""
    )
    assert lines == [
        {"path": "identity_prompt", "text": f'"{"x" * 79}… → "y"'},
        {"path": "limits.max_steps", "text": "30 → 20"},
        {"path": "tools", "text": '+ "d.*", \u2212 "a.*"'},
    ]


async def test_an_owner_gives_an_agent_to_a_member(page: Page, bosun: Bosun) -> None:
    """The editor's Parent field: a user of the org who then owns the agent (blank: the
    org's); the save says so in its changes and the API has it."""
    with bosun.api() as client:
        made = client.post("/v1/agents", json={"handle": "helper", "name": "Helper"})
        assert made.status_code == 201, made.text
    await page.set_viewport_size(DESKTOP)
    await open_agent(page, bosun, "helper")
    await page.get_by_role("button", name="Edit agent").click()
    editor = page.locator("form.agent-editor")
    parent = editor.get_by_label("Parent")
    await expect(parent).to_have_value("")
    await parent.fill("ada")
    await editor.get_by_role("button", name="Save as v2").click()
    await expect(editor.locator(".edit-title")).to_have_text("Edit @helper · v2")
    changes = editor.locator(".edit-changes li")
    await expect(changes).to_have_text(['parent: unset → "ada"'])
    with bosun.api() as client:
        assert client.get("/v1/agents/helper").json()["parent"] == "ada"


async def test_a_member_edits_the_agent_they_parent(page: Page, bosun: Bosun) -> None:
    """Ada parents @mine: she gets its editor (its Parent read-only: she stays its
    parent) and saves a version; the org's agents stay uneditable for her."""
    with bosun.api() as client:
        made = client.post("/v1/agents", json={"handle": "mine", "name": "Mine", "parent": "ada"})
        assert made.status_code == 201, made.text
    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="ada", org="dev-org", role="member", ttl_s=3600
    )
    await page.set_viewport_size(DESKTOP)
    await page.goto(f"{bosun.url}/#token={token}")
    await page.get_by_role("button", name="Agents").click()
    await page.locator("button.agent[data-handle=mine]").click()
    await page.get_by_role("button", name="Edit agent").click()
    editor = page.locator("form.agent-editor")
    await expect(editor.get_by_label("Parent")).to_have_value("ada")
    await expect(editor.get_by_label("Parent")).not_to_be_editable()
    await editor.get_by_label("Identity prompt").fill("You are Ada's helper.")
    await editor.get_by_role("button", name="Save as v2").click()
    await expect(editor.locator(".edit-title")).to_have_text("Edit @mine · v2")
    await page.locator("button.agent[data-handle=coach]").click()
    await expect(page.locator("button.agent[data-handle=coach]")).to_have_attribute(
        "aria-current", "true"
    )
    await expect(page.get_by_role("button", name="Edit agent")).to_have_count(0)
    with bosun.api() as client:
        saved = client.get("/v1/agents/mine").json()
    assert (saved["version"], saved["parent"]) == (2, "ada")
    assert saved["identity_prompt"] == "You are Ada's helper."


async def test_an_owner_lets_members_create_agents_and_a_member_makes_one(
    page: Page, browser: Browser, bosun: Bosun
) -> None:
    """The owner's Organisation box turns members_create_agents on; a member then gets
    the New agent form, and the agent they create is theirs (its parent) to edit."""
    await page.set_viewport_size(DESKTOP)
    await page.goto("about:blank")
    await open_agent(page, bosun, "coach")
    allow = page.locator("fieldset.org-settings").get_by_label(
        "Members may create their own agents"
    )
    await expect(allow).not_to_be_checked()
    await allow.check()
    await expect(page.locator(".settings-note")).to_have_text("Saved.")

    token = mint_token(
        TokenConfig(DEV_JWT_SECRET), user="ben", org="dev-org", role="member", ttl_s=3600
    )
    context = await browser.new_context(viewport=DESKTOP)
    member = await context.new_page()
    try:
        await member.goto(f"{bosun.url}/#token={token}")
        await member.get_by_role("button", name="Agents").click()
        create = member.locator("form.agent-create")
        await create.get_by_label("Handle").fill("bens")
        await create.get_by_label("Name").fill("Ben's helper")
        await create.get_by_role("button", name="Create agent").click()
        made = member.locator("button.agent[data-handle=bens]")
        await expect(made).to_have_attribute("aria-current", "true")
        await expect(member.get_by_role("button", name="Edit agent")).to_have_count(1)
        await expect(member.locator("fieldset.org-settings")).to_have_count(0)
    finally:
        await context.close()
    with bosun.api() as client:
        assert client.get("/v1/org/settings").json() == {"members_create_agents": True}
        assert client.get("/v1/agents/bens").json()["parent"] == "ben"
        client.put("/v1/org/settings", json={"members_create_agents": False})
