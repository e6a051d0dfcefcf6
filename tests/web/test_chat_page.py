"""The web chat in a real browser against a real ``bosun serve --dev``: what the user sees.

One server (and one scripted model) serves every scenario here. Each scenario's planner
step matches words of its own message, and its executor steps match their step's goal, so
the scenarios never take each other's replies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, expect

from bosun_demo import seed_id
from bosun_web import Bosun, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

ORG = "dev-org"
SAM_RIVERA, SAM_OKAFOR = seed_id(ORG, "mem", 0), seed_id(ORG, "mem", 1)
TEMPO_RUN, ENGINE_BUILDER = seed_id(ORG, "wo", 1), seed_id(ORG, "wo", 4)

GREETING = "Ahoy! The studio opens at six tomorrow, and the coffee is on from quarter past."
MERGED = "Priya Natarajan is ready for her first week: she prefers mornings, and no tasks clash."
SLOW = (
    "Here is the long answer, word by word: warm up for ten minutes, then three rounds of "
    "squats, presses and rows, and finish with a slow walk."
)
PARTIAL = "There is no member mem_ghost, and the program list could not be read just now."
CUT = "Three programs so far; I could not look any further."
SCRIPT = f"""
# (1) a simple answer
- match: "opening hours tomorrow"
  text: '{{"strategy": "simple", "reasoning": "Small talk."}}'
- match: "opening hours tomorrow"
  text: "{GREETING}"
# (2) a complex plan: s1 and s2 side by side (slow answers keep both running), then s3
- match: "Priya ready for her first week"
  text: >-
    {{"strategy": "complex", "reasoning": "Two lookups, then a draft.", "executors": 2,
      "steps": [
        {{"id": "s1", "goal": "Find the member Priya Natarajan", "tools": ["members.search"]}},
        {{"id": "s2", "goal": "List the open studio tasks", "tools": ["tasks.list"]}},
        {{"id": "s3", "goal": "Draft Priya's first-week welcome", "tools": ["members.get"],
          "depends_on": ["s1", "s2"]}}]}}
  usage: {{input_tokens: 760, output_tokens: 160}}
- match: "Find the member Priya Natarajan"
  tool_calls: [{{id: toolu_find_priya, name: members_search, input: {{query: Priya}}}}]
  usage: {{input_tokens: 640, output_tokens: 30}}
- match: "Find the member Priya Natarajan"
  text: "Priya Natarajan is an active member who prefers early mornings."
  usage: {{input_tokens: 760, output_tokens: 14}}
  delay_s: 0.12
- match: "List the open studio tasks"
  tool_calls: [{{id: toolu_tasks, name: tasks_list, input: {{}}}}]
  usage: {{input_tokens: 620, output_tokens: 20}}
- match: "List the open studio tasks"
  text: "Three tasks are open; none of them involves Priya."
  usage: {{input_tokens: 740, output_tokens: 12}}
  delay_s: 0.12
- match: "Draft Priya's first-week welcome"
  text: "Welcome, Priya: your first class is Morning HIIT."
  usage: {{input_tokens: 820, output_tokens: 12}}
- match: ["You write the answer to the user's latest message", "Priya ready for her first week"]
  text: "{MERGED}"
  usage: {{input_tokens: 980, output_tokens: 20}}
# (3) a destructive call, approved
- match: "Delete the Engine builder workout"
  text: >-
    {{"strategy": "tool", "reasoning": "One destructive change.", "steps": [{{"id": "s1",
      "goal": "Delete the Engine builder workout ({ENGINE_BUILDER})",
      "tools": ["workouts.delete"]}}]}}
- match: "({ENGINE_BUILDER})"
  tool_calls: [{{id: toolu_delete_engine, name: workouts_delete,
                input: {{workout_id: {ENGINE_BUILDER}}}}}]
- match: "({ENGINE_BUILDER})"
  text: "Deleted the Engine builder workout."
# (4) a destructive call, rejected: the executor then gets rejected_by_user
- match: "Remove the tempo run workout"
  text: >-
    {{"strategy": "tool", "reasoning": "One destructive change.", "steps": [{{"id": "s1",
      "goal": "Delete the workout {TEMPO_RUN}", "tools": ["workouts.delete"]}}]}}
- match: "Delete the workout {TEMPO_RUN}"
  tool_calls: [{{id: toolu_delete_tempo, name: workouts_delete,
                input: {{workout_id: {TEMPO_RUN}}}}}]
- match: "Delete the workout {TEMPO_RUN}"
  text: "Understood: you declined, so the Tempo run + core workout stays."
# (5) the user picks one of two members
- match: "Book Sam into Morning HIIT"
  text: >-
    {{"strategy": "tool", "reasoning": "Two members are called Sam.", "steps": [{{"id": "s1",
      "goal": "Ask which Sam to book", "tools": ["ui.ask_user_to_pick"]}}]}}
- match: "Ask which Sam to book"
  tool_calls:
    - id: toolu_which_sam
      name: ui_ask_user_to_pick
      input:
        kind: member
        prompt: "Which Sam?"
        candidates:
          - {{id: {SAM_RIVERA}, label: Sam Rivera, sublabel: Half marathon training}}
          - {{id: {SAM_OKAFOR}, label: Sam Okafor, sublabel: Knee rehab}}
- match: "Ask which Sam to book"
  text: "Sam Okafor it is: booked into Morning HIIT, with no deep lunges."
# (6) a write with an inverse, to undo
- match: "mobility workout for the team"
  text: >-
    {{"strategy": "tool", "reasoning": "One write.", "steps": [{{"id": "s1",
      "goal": "Create the Mobility reset workout", "tools": ["workouts.create"]}}]}}
- match: "Create the Mobility reset workout"
  tool_calls: [{{id: toolu_create_mobility, name: workouts_create,
                input: {{title: Mobility reset, duration_min: 30}}}}]
- match: "Create the Mobility reset workout"
  text: "Created the Mobility reset workout (30 minutes)."
# (8) a partial answer: s1's lookup fails yet it answers, s2's model provider fails
- match: "Audit the ghost member"
  text: >-
    {{"strategy": "complex", "reasoning": "Two lookups.", "executors": 2, "steps": [
      {{"id": "s1", "goal": "Look up member mem_ghost", "tools": ["members.get"]}},
      {{"id": "s2", "goal": "List the programs for the audit", "tools": ["programs.list"]}}]}}
- match: "Look up member mem_ghost"
  tool_calls: [{{id: toolu_ghost, name: members_get, input: {{member_id: mem_ghost}}}}]
- match: "Look up member mem_ghost"
  text: "Member mem_ghost does not exist."
- match: "List the programs for the audit"
  error: {{code: provider_overloaded, message: Overloaded}}
- match: "Member mem_ghost does not exist"
  text: "{PARTIAL}"
# (9) an answer cut short: the step's one tool call is used, so it is asked to wrap up
- match: "Count the programs briefly"
  text: >-
    {{"strategy": "tool", "reasoning": "One lookup.", "steps": [{{"id": "s1",
      "goal": "Count the programs for a brief", "tools": ["programs.list"],
      "max_tool_calls": 1}}]}}
- match: "Count the programs for a brief"
  tool_calls: [{{id: toolu_count, name: programs_list, input: {{}}}}]
- match: "Count the programs for a brief"
  text: "{CUT}"
# (7) a slow answer, to drop the connection in the middle of
- match: "the long answer please"
  text: '{{"strategy": "simple", "reasoning": "Just talk."}}'
- match: "the long answer please"
  text: "{SLOW}"
  delay_s: 0.12
"""
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "render.js": "text/javascript; charset=utf-8",
    "sse.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
NOT_ASSETS = ["index.html", "missing.js", "..%2F_web.py", "__init__.py", ".hidden.js"]


@pytest.fixture(scope="module")
def bosun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bosun]:
    # Keep-alive comments every 50 ms of quiet: the page's SSE parser meets them mid-turn.
    keepalive = {"BOSUN_LIMITS__KEEPALIVE_S": "0.05"}
    with serve(tmp_path_factory.mktemp("web"), SCRIPT, env=keepalive) as served:
        yield served


async def open_chat(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.page_url())
    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")


async def send(page: Page, text: str) -> None:
    await page.locator("#message").fill(text)
    await page.locator("#message").press("Enter")


async def turn_ends(page: Page, status: str = "completed") -> None:
    await expect(
        page.locator(f".turn:last-child .turn-status[data-status={status}]")
    ).to_be_visible()


async def session_id(page: Page) -> str:
    current = page.locator("button.session[aria-current=true]")
    await expect(current).to_have_count(1)
    found = await current.get_attribute("data-session-id")
    assert found is not None
    return found


async def rendered_ids(page: Page) -> list[int]:
    ids: list[str] = await page.locator("[data-event-id]").evaluate_all(
        "nodes => nodes.map(n => n.dataset.eventId)"
    )
    return [int(i) for i in ids]


async def test_streamed_answer(page: Page, bosun: Bosun) -> None:
    await page.goto(bosun.link)  # the link `bosun serve --dev` printed
    await expect(page.locator("#identity")).to_contain_text("dev · dev-org (owner)")
    assert "#token=" not in page.url  # kept in localStorage, gone from the address bar
    assert await page.evaluate("localStorage.getItem('bosun.token')") == bosun.link.split("=", 1)[1]
    composer = page.locator("#message")
    await expect(composer).to_be_focused()
    sent: list[Any] = []
    page.on(
        "request",
        lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/stream") else None,
    )

    await composer.fill("What are the opening hours tomorrow?")
    await composer.press("Shift+Enter")  # a new line, not a send
    await composer.press_sequentially("Thanks!")
    assert await composer.input_value() == "What are the opening hours tomorrow?\nThanks!"
    await composer.press("Enter")

    await expect(page.locator(".bubble.user")).to_have_text(
        "What are the opening hours tomorrow?\nThanks!"
    )
    answer = page.locator(".answer[aria-live=polite]")
    await expect(answer).to_have_text(GREETING)
    await turn_ends(page)
    await expect(page.locator(".plan-head")).to_have_text("Direct answer")
    await expect(composer).to_be_enabled()
    await expect(composer).to_be_focused()
    await expect(composer).to_have_value("")
    await expect(page.locator("#send")).to_be_enabled()
    await expect(page.locator("#usage")).to_contain_text("Today: $0.00 of $1.00")
    await expect(page.locator("button.session")).to_have_count(1)
    # the page says where the user is and their language (docs/api.md, client context)
    language = await page.evaluate("navigator.language")
    assert language and sent == [
        {"message": "What are the opening hours tomorrow?\nThanks!",
         "context": {"page": "/chat", "locale": language}}
    ]  # fmt: skip


async def test_complex_plan(page: Page, bosun: Bosun) -> None:
    await page.set_viewport_size({"width": 1280, "height": 1080})
    await open_chat(page, bosun)
    await send(page, "Get Priya ready for her first week")

    def step(step_id: str) -> Locator:
        return page.locator(f".step[data-step-id={step_id}]")

    await expect(page.locator(".plan-head")).to_have_text(
        "Complex plan · 3 steps · up to 2 in parallel"
    )
    # The two independent steps run side by side while the third waits for them.
    await page.wait_for_function(
        """() => ["s1", "s2"].every(id =>
             document.querySelector(`.step[data-step-id=${id}]`)?.dataset.status === "running")
           && document.querySelector(".step[data-step-id=s3]").dataset.status === "waiting" """
    )
    await expect(step("s1").locator(".badge").first).to_have_text("running")
    await turn_ends(page)

    for step_id in ("s1", "s2", "s3"):
        await expect(step(step_id)).to_have_attribute("data-status", "ok")
        await expect(step(step_id).locator(".step-head .badge")).to_have_text("ok")
    await expect(step("s3").locator(".step-deps")).to_have_text("after s1, s2")
    await expect(step("s1").locator(".card.tool .tool-name")).to_have_text("members.search")
    await expect(step("s2").locator(".card.tool .tool-name")).to_have_text("tasks.list")
    await expect(step("s1").locator(".step-text")).to_have_text(
        "Priya Natarajan is an active member who prefers early mornings."
    )
    await expect(page.locator(".answer")).to_have_text(MERGED)
    await expect(page.locator(".turn-usage")).to_have_text("5,588 tokens · $0.00")

    # Reopened from the sidebar, the session is drawn from its detail (GET
    # /v1/sessions/{id}): the same steps with their text, their tool calls collapsed, and
    # the answer.
    opened = await session_id(page)
    await page.locator("#new-chat").click()
    await expect(page.locator(".turn")).to_have_count(0)
    await page.locator(f"button.session[data-session-id='{opened}']").click()
    await expect(page.locator(".turn.past .answer")).to_have_text(MERGED)
    for step_id in ("s1", "s2", "s3"):
        await expect(step(step_id)).to_have_attribute("data-status", "ok")
    await expect(step("s3").locator(".step-deps")).to_have_text("after s1, s2")
    await expect(step("s1").locator(".step-text")).to_have_text(
        "Priya Natarajan is an active member who prefers early mornings."
    )
    found = step("s1").locator("details.call")
    await expect(found.locator(".tool-name")).to_have_text("members.search")
    await expect(found).to_have_attribute("data-status", "ok")
    assert await found.evaluate("node => node.open") is False
    await expect(step("s2").locator("details.call .tool-name")).to_have_text("tasks.list")
    await expect(page.locator(".turn-status")).to_have_text("Done")


async def test_partial_answer(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Audit the ghost member")
    await turn_ends(page)

    s1, s2 = page.locator(".step[data-step-id=s1]"), page.locator(".step[data-step-id=s2]")
    # s1 answered, over a failed call: not a plain "ok"; s2's provider failed.
    await expect(s1).to_have_attribute("data-status", "degraded")
    await expect(s1.locator(".step-head .badge")).to_have_text("ok · 1 failed")
    await expect(s1.locator(".step-facts")).to_contain_text("1 tool call (1 failed)")
    await expect(s2).to_have_attribute("data-status", "failed")
    await expect(s2.locator(".step-facts")).to_contain_text("provider_overloaded")
    await expect(page.locator(".answer")).to_have_text(PARTIAL)
    await expect(page.locator(".note.partial")).to_have_text(
        "Partial answer: failed s2 (The model provider is overloaded: try again shortly.)"
    )


async def test_cut_short_answer(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Count the programs briefly")
    await turn_ends(page)

    await expect(page.locator(".answer")).to_have_text(CUT)
    await expect(page.locator(".note.cut-short")).to_have_text(
        "Cut short: the step's limit of tool calls (max_tool_calls)."
    )


async def test_approve_confirmation(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Delete the Engine builder workout")
    card = page.locator(".card.ask.confirm")
    await expect(card.locator(".ask-title")).to_have_text("Approve workouts.delete?")
    await expect(card.locator(".io")).to_contain_text(ENGINE_BUILDER)
    await turn_ends(page, "suspended")
    await expect(page.locator(".turn-status")).to_have_text("Waiting for your answer")
    await expect(page.locator("#message")).to_be_enabled()

    await card.get_by_role("button", name="Approve").click()

    await expect(page.locator(".answer")).to_have_text("Deleted the Engine builder workout.")
    await turn_ends(page)
    await expect(card.locator(".ask-decision")).to_have_text("Approved")
    await expect(card.get_by_role("button")).to_have_count(0)
    tool = page.locator(".card.tool", has_text="workouts.delete")
    await expect(tool).to_have_attribute("data-status", "ok")
    await expect(tool.locator(".badge")).to_have_text("ok")
    assert bosun.query("SELECT id FROM workouts WHERE id = ?", ENGINE_BUILDER) == []


async def test_reject_confirmation(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Remove the tempo run workout")
    card = page.locator(".card.ask.confirm")
    await expect(card.locator(".io")).to_contain_text(TEMPO_RUN)

    await card.get_by_role("button", name="Reject").click()

    await expect(page.locator(".answer")).to_have_text(
        "Understood: you declined, so the Tempo run + core workout stays."
    )
    await turn_ends(page)
    await expect(card.locator(".ask-decision")).to_have_text("Rejected")
    await expect(card).to_have_attribute("data-state", "rejected")
    tool = page.locator(".card.tool", has_text="workouts.delete")  # what the model was told
    await expect(tool).to_have_attribute("data-status", "failed")
    await expect(tool.locator(".tool-error code")).to_have_text("rejected_by_user")
    assert bosun.query("SELECT title FROM workouts WHERE id = ?", TEMPO_RUN) == [
        ("Tempo run + core",)
    ]


async def test_pick_candidate(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Book Sam into Morning HIIT")
    card = page.locator(".card.ask.pick")
    await expect(card.locator(".ask-title")).to_have_text("Which Sam?")
    candidates = card.locator("button.candidate")
    await expect(candidates).to_have_count(2)
    await expect(candidates.nth(0)).to_contain_text("Sam Rivera")
    await expect(candidates.nth(1)).to_contain_text("Sam OkaforKnee rehab")
    await turn_ends(page, "suspended")

    await candidates.filter(has_text="Sam Okafor").click()

    await expect(page.locator(".answer")).to_have_text(
        "Sam Okafor it is: booked into Morning HIIT, with no deep lunges."
    )
    await turn_ends(page)
    await expect(card.locator(".ask-decision")).to_have_text("Picked: Sam Okafor")
    picked = [
        e["data"] for e in bosun.events(await session_id(page)) if e["type"] == "tool_resolved"
    ]
    assert picked == [{"tool_use_id": "toolu_which_sam", "decision": "picked",
                       "picked_id": SAM_OKAFOR, "type": "tool_resolved"}]  # fmt: skip


async def test_undo_write(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Make a mobility workout for the team")
    card = page.locator(".card.tool", has_text="workouts.create")
    undo = card.get_by_role("button", name="Undo")
    await expect(undo).to_be_visible()
    await expect(card.locator(".undo-left")).to_have_text(re.compile(r"^1[0-5] s$"))
    await turn_ends(page)
    assert bosun.query("SELECT count(*) FROM workouts WHERE title = 'Mobility reset'") == [(1,)]

    await undo.click()

    await expect(card.locator(".badge")).to_have_text("undone")
    await expect(card.locator(".undo-result summary")).to_have_text("Undone")
    await expect(undo).to_have_count(0)
    assert bosun.query("SELECT count(*) FROM workouts WHERE title = 'Mobility reset'") == [(0,)]


async def test_dropped_connection(page: Page, bosun: Bosun) -> None:
    await open_chat(page, bosun)
    await send(page, "Give me the long answer please")
    answer = page.locator(".answer")
    await expect(answer).to_contain_text("Here is the long answer")
    assert not (await answer.inner_text()).endswith("walk.")  # still streaming

    await page.evaluate("window.bosunDebug.dropConnection()")

    await expect(page.locator("#connection")).to_have_text("Reconnecting...")
    await turn_ends(page)
    await expect(answer).to_have_text(SLOW)  # every word, exactly once
    await expect(page.locator("#connection")).to_have_text("")
    assert await page.locator("#connection").get_attribute("data-reconnects") == "1"
    ids = await rendered_ids(page)
    assert len(ids) == len(set(ids))
    log = bosun.events(await session_id(page))
    deltas = await answer.locator("[data-event-id]").evaluate_all(
        "nodes => nodes.map(n => Number(n.dataset.eventId))"
    )
    assert deltas == [e["seq"] for e in log if e["type"] == "text_delta"]


async def test_phone_width(page: Page, bosun: Bosun) -> None:
    await page.set_viewport_size({"width": 390, "height": 844})
    await open_chat(page, bosun)
    sidebar, chat = page.locator("#sidebar"), page.locator("main.chat")
    sessions = page.locator("#sessions")
    await expect(sessions).to_be_hidden()  # collapsed above the chat
    side_box, chat_box = await sidebar.bounding_box(), await chat.bounding_box()
    assert side_box is not None and chat_box is not None
    assert side_box["y"] + side_box["height"] <= chat_box["y"] + 1
    assert side_box["width"] == chat_box["width"] == 390

    toggle = page.locator("#sessions-toggle")
    await expect(toggle).to_have_text(re.compile(r"^Sessions \(\d+\)$"))
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(sessions).to_be_visible()
    await sessions.locator("button.session").first.click()  # the long answer, most recent

    await expect(sessions).to_be_hidden()
    await expect(page.locator(".answer")).to_have_text(SLOW)
    await expect(page.locator("#message")).to_be_focused()
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # nothing runs off the side


async def test_page_and_assets_need_no_token(bosun: Bosun) -> None:
    async with httpx.AsyncClient(base_url=bosun.url) as client:
        index = await client.get("/")
        assets = {name: await client.get(f"/web/{name}") for name in ASSETS}
        missing = [await client.get(f"/web/{name}") for name in NOT_ASSETS]
        usage = await client.get("/v1/usage")
        schema = (await client.get("/schema/openapi.json")).json()

    assert index.status_code == 200
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    assert index.headers["content-security-policy"].startswith("default-src 'self';")
    assert '<script type="module" src="/web/app.js"></script>' in index.text
    assert "<script>" not in index.text and "style=" not in index.text  # nothing inline
    assert {name: (r.status_code, r.headers["content-type"]) for name, r in assets.items()} == {
        name: (200, kind) for name, kind in ASSETS.items()
    }
    assert [(r.status_code, r.json()["error"]["code"]) for r in missing] == [
        (404, "not_found")
    ] * len(NOT_ASSETS)
    assert usage.status_code == 401  # the API still wants the token
    assert not [path for path in schema["paths"] if path == "/" or path.startswith("/web")]


async def test_sse_parser(page: Page, bosun: Bosun) -> None:
    """The page's parser, in the browser, on chunks cut anywhere (even inside a CRLF)."""
    await page.goto(bosun.url)
    frames = await page.evaluate(
        """async (chunks) => {
            const { SseParser } = await import("/web/sse.js");
            const parser = new SseParser();
            return chunks.flatMap((chunk) => parser.feed(chunk));
        }""",
        [": keep-alive\n\nid: 7\nevent: text_del", "ta\ndata: {\"delta\":\"a\"}\r",
         "\n\r\nid:8\r\nevent: done\r\ndata: {\"x\":1,\r\ndata:  \"y\":2}\r\n",
         "\r\n: bye\n\n"],
    )  # fmt: skip
    assert frames == [
        {"id": "7", "event": "text_delta", "data": '{"delta":"a"}'},
        {"id": "8", "event": "done", "data": '{"x":1,\n "y":2}'},
    ]
