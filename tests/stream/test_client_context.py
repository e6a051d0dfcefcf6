"""Issue 27, points 1 and 2, over HTTP with the real Anthropic SDK against the provider
stand-in (request bodies captured): a chat's client context (page, entity, notes) reaches
the planner's and the executors' requests as one block, budgeted as the ``client``
section; a source bound to the entity's type loads that entity; the locale (``x-locale``,
``Accept-Language``, ``context.locale``) tells every role that writes to the user to reply
in it; BuildOS's fields map onto the shape; bad context is a 400."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import seed_demo, seed_id
from bosun_demo._tables import MemberRow
from conftest import DEMO, JWT_SECRET, OPEN_EGRESS, Server, ServerFactory
from context import ClientContext, Entity, TokenCounter, fit_client
from helpers import stream_post, stream_turn
from providers import FunctionModel, ScriptedModel, ToolCall
from providers._fake_anthropic import SSE_HEADERS
from providers._fake_server import Exchange
from providers.fake import FakeProvider, FakeServer, anthropic_reply
from store._models import TurnRow
from stream._client import accept_language
from turn import TurnModels

ORG = "acme"
ENGINE = seed_id(ORG, "wo", 4)  # "Engine builder"
MODEL = "claude-haiku-4-5"
NOTE = "NOTE-MARKER-27"
HEBREW = "Reply in Hebrew (he) unless the user switches language."
STEP = {"goal": "Check the member on the user's page", "tools": ["members.get"]}
PLANS: dict[str, dict[str, Any]] = {
    "simple": {"strategy": "simple", "reasoning": "chat", "steps": []},
    "tool": {"strategy": "tool", "reasoning": "one read", "steps": [{"id": "s1", **STEP}]},
    "complex": {"strategy": "complex", "reasoning": "two reads", "steps": [
        {"id": "s1", **STEP}, {"id": "s2", **STEP, "goal": "List the programs"},
    ]},
}  # fmt: skip
FORCED_AGENT = {"handle": "coach", "name": "Coach", "tools": ["members.get"],
                "loop": "forced_tools"}  # fmt: skip


def role_of(body: dict[str, Any]) -> str:
    system = " ".join(block.get("text", "") for block in body.get("system") or [])
    for marker, role in (
        ("You are the planner", "planner"),
        ("You carry out ONE step", "executor"),
        ("you act ONLY through tool calls", "forced"),
        ("You write the answer", "merge"),
        ("You are Bosun, an assistant", "answer"),
    ):
        if marker in system:
            return role
    return "upkeep"


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the request's current user message (the planner's request, a step's
    goal, the user's message to the writer), all of its text blocks."""
    for message in reversed(body["messages"]):
        blocks = message["content"]
        if message["role"] == "user" and not any(b.get("type") == "tool_result" for b in blocks):
            return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    return ""


def respond(body: Any) -> tuple[bytes, ...]:
    """The stand-in model: a plan named by a ``[strategy]`` tag in the user's message,
    a text answer from executors and writers, notify-then-idle from a forced loop."""
    role = role_of(body)
    calls: list[ToolCall] = []
    text = ""
    if role == "planner":
        request = last_user_text(body)
        strategy = next((s for s in PLANS if f"[{s}]" in request), "simple")
        calls = [ToolCall(id="plan1", name="plan", input=PLANS[strategy])]
    elif role == "forced":
        results = sum(
            b.get("type") == "tool_result" for m in body["messages"] for b in m["content"]
        )
        calls = [
            ToolCall(id="n1", name="message_notify_user", input={"message": "שלום"})
            if results == 0
            else ToolCall(id="i1", name="agent_idle", input={"reason": "done"})
        ]
    else:
        text = "שלום" if role != "upkeep" else "A title"
    return anthropic_reply(text=text, tool_calls=calls, model=MODEL).chunks


@pytest.fixture
def provider() -> Iterator[FakeServer]:
    fake = FakeProvider().enqueue(
        *(Exchange(headers=SSE_HEADERS, respond=respond) for _ in range(80))
    )
    with FakeServer(fake) as started:
        yield started


@pytest.fixture
async def served(db_url: str, provider: FakeServer) -> AsyncIterator[Server]:
    settings = Settings(
        database_url=db_url, jwt_secret=JWT_SECRET, toolsets=[DEMO],
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
        egress=OPEN_EGRESS,  # type: ignore[arg-type]
        models={"default": f"anthropic:{MODEL}"},  # type: ignore[arg-type]
        providers={"anthropic_api_key": "test-key", "anthropic_base_url": provider.url,
                   "max_retries": 0},  # type: ignore[arg-type]
    )  # fmt: skip
    models = build_models(settings)
    async with Server(settings, models) as server:
        await seed_demo(server.store, ORG)
        yield server
    assert models.executor is not None
    await models.executor.aclose()  # type: ignore[attr-defined]


async def a_member(server: Server) -> tuple[str, str]:
    """A seeded member's id and first name."""
    async with server.store.db.read() as conn:
        row = (
            await conn.execute(
                select(MemberRow.id, MemberRow.first_name)
                .where(MemberRow.org_id == ORG)
                .order_by(MemberRow.id)
                .limit(1)
            )
        ).one()
    return str(row.id), str(row.first_name)


def bodies(provider: FakeServer) -> list[dict[str, Any]]:
    bodies = [r.json for r in provider.provider.requests]
    provider.provider.requests.clear()
    return bodies


async def chat(
    server: Server, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    auth = {**server.auth(org=ORG, role="owner"), **(headers or {})}
    frames = await stream_turn(server.client, body, auth)
    assert frames[-1].data["status"] == "completed", frames[-1].data
    return frames


async def test_the_context_block_reaches_the_planner_and_executor_and_loads_the_entity(
    served: Server, provider: FakeServer
) -> None:
    member_id, first_name = await a_member(served)
    context = {
        "page": f"/members/{member_id}",
        "entity": {"type": "member", "id": member_id},
        "notes": f"{NOTE}: the user selected the row",
    }
    frames = await chat(
        served, {"message": "[tool] Is this one active?", "context": context}, {"x-locale": "he"}
    )

    sent = bodies(provider)
    planner = next(b for b in sent if role_of(b) == "planner")
    executors = [b for b in sent if role_of(b) == "executor"]
    assert executors
    for body in [planner, *executors]:
        text = last_user_text(body)
        assert f'entity_type="member" entity_id="{member_id}"' in text, role_of(body)
        assert NOTE in text and f'page="/members/{member_id}"' in text
    # the planner picks, it does not write to the user; the tool plan's step does
    assert HEBREW not in last_user_text(planner)
    assert all(HEBREW in last_user_text(b) for b in executors)
    # the source bound to `member` loaded that member, and the executor has it
    loaded = [f.data for f in frames if f.event == "context_loaded"]
    assert [(c["source"], c["params"]) for c in loaded] == [("members.card", {"id": member_id})]
    assert first_name in loaded[0]["text"]
    assert all(first_name in json.dumps(b["system"], ensure_ascii=False) for b in executors)
    # budgeted as a section of its own, like the others
    reports = [f.data for f in frames if f.event == "context_budget"]
    for report in reports:
        sections = {s["name"]: s for s in report["report"]["sections"]}
        assert 0 < sections["client"]["used"] <= sections["client"]["allocated"], report["role"]
    assert {r["role"] for r in reports} == {"planner", "executor"}
    # recorded on the turn's job: a resume or takeover runs with the same context
    async with served.store.db.read() as conn:
        job = (await conn.execute(select(TurnRow.job))).scalars().one()
    assert job["client"] == {**context, "locale": "he"}


async def test_hebrew_reaches_every_role_that_writes_to_the_user(
    served: Server, provider: FakeServer
) -> None:
    hebrew = {"x-locale": "he"}
    await chat(served, {"message": "[simple] Hello"}, hebrew)
    await chat(served, {"message": "[complex] Check and list"}, hebrew)
    made = await served.client.post(
        "/v1/agents", json=FORCED_AGENT, headers=served.auth(org=ORG, role="owner")
    )
    assert made.status_code == 201, made.text
    await chat(served, {"message": "[simple] Hello coach", "agent": "coach"}, hebrew)

    sent = bodies(provider)
    by_role: dict[str, list[dict[str, Any]]] = {}
    for body in sent:
        by_role.setdefault(role_of(body), []).append(body)
    assert {"planner", "answer", "merge", "executor", "forced"} <= set(by_role)
    for role in ("answer", "merge", "forced"):
        for body in by_role[role]:
            assert HEBREW in last_user_text(body), role
    # a complex plan's steps report to the merge, not to the user
    assert all(HEBREW not in last_user_text(b) for b in by_role["executor"])
    assert all(HEBREW not in last_user_text(b) for b in by_role["planner"])


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        ({}, {"accept-language": "en-US;q=0.5, ru;q=0.9, he;q=0.1"}, "Russian (ru)"),
        ({}, {"x-locale": "pt-BR", "accept-language": "ru"}, "Portuguese (pt-BR)"),
        ({"context": {"locale": "he"}}, {"x-locale": "ru"}, "Hebrew (he)"),
        ({"context": {"locale": "tlh"}}, {}, "Reply in tlh unless"),
    ],
)
async def test_the_locale_comes_from_context_then_x_locale_then_accept_language(
    served: Server,
    provider: FakeServer,
    body: dict[str, Any],
    headers: dict[str, str],
    expected: str,
) -> None:
    await chat(served, {"message": "[simple] Hi", **body}, headers)

    [answer] = [b for b in bodies(provider) if role_of(b) == "answer"]
    assert expected in last_user_text(answer)


async def test_without_context_or_locale_no_block_is_sent(
    served: Server, provider: FakeServer
) -> None:
    frames = await chat(served, {"message": "[tool] Hello"})

    for body in bodies(provider):
        assert "client_context" not in json.dumps(body) and "Reply in" not in json.dumps(body)
    for frame in frames:
        if frame.event == "context_budget":
            assert "client" not in {s["name"] for s in frame.data["report"]["sections"]}


async def test_buildos_fields_map_onto_the_context(served: Server, provider: FakeServer) -> None:
    member_id, _ = await a_member(served)
    body = {
        "message": "[tool] What about this member?",
        "context_type": "member",
        "entity_id": member_id,
        "project_focus": {"focus_type": "task", "focus_entity_name": "Spring plan"},
    }
    frames = await chat(served, body)

    planner = next(b for b in bodies(provider) if role_of(b) == "planner")
    text = last_user_text(planner)
    assert f'page="member" entity_type="member" entity_id="{member_id}"' in text
    assert 'focus="focus_type: task; focus_entity_name: Spring plan"' in text
    assert [f.data["source"] for f in frames if f.event == "context_loaded"] == ["members.card"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"entity_id": "p1"}, '<client_context entity_type="project" entity_id="p1"/>'),
        ({"context_type": "top", "context": {"context_type": "inner"}}, 'page="inner"'),
        ({"context": {"entity": {"type": "member", "id": "m1"}, "entity_id": "p1"}},
         'entity_type="member" entity_id="m1"'),
        ({"context": {"focus": "f", "project_focus": "pf"}}, 'focus="f"'),
        ({"context": {"page": "/x", "context_type": "calendar"}}, 'page="/x"'),
    ],
)  # fmt: skip
async def test_bosun_fields_win_over_buildos_ones_and_context_over_the_top_level(
    served: Server, provider: FakeServer, body: dict[str, Any], expected: str
) -> None:
    await chat(served, {"message": "[simple] hi", **body})

    planner = next(b for b in bodies(provider) if role_of(b) == "planner")
    assert expected in last_user_text(planner)


@pytest.mark.parametrize(
    ("body", "headers", "names"),
    [
        ({"context": {"where": "x"}}, {}, "context.where"),
        ({"context": {"entity": {"type": "member"}}}, {}, "context.entity.id"),
        ({"context": {"entity": {"type": "no spaces", "id": "1"}}}, {}, "context.entity.type"),
        ({"context": {"notes": "n" * 2_001}}, {}, "context.notes"),
        ({"context": {"page": "p" * 501}}, {}, "context.page"),
        ({"context": {"locale": "not a tag"}}, {}, "context.locale"),
        ({"context": {"project_focus": {f"k{i}": "v" for i in range(9)}}}, {}, "project_focus"),
        ({"context": {"project_focus": {"k": "v" * 201}}}, {}, "project_focus"),
        ({}, {"x-locale": "he_IL!"}, "x-locale must be a language tag"),
    ],
)
async def test_bad_context_is_a_400_naming_the_field(
    served: Server,
    provider: FakeServer,
    body: dict[str, Any],
    headers: dict[str, str],
    names: str,
) -> None:
    response = await served.client.post(
        "/v1/chat",
        json={"message": "Hi", **body},
        headers={**served.auth(org=ORG, role="owner"), **headers},
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and names in error["message"], error
    assert provider.provider.requests == []  # refused before any model call


async def test_a_resumed_turn_keeps_its_context_and_locale(make_server: ServerFactory) -> None:
    delete = "Delete the Engine builder workout"
    plan = {"strategy": "tool", "reasoning": "one write",
            "steps": [{"id": "s1", "goal": delete, "tools": ["workouts.delete"]}]}  # fmt: skip
    model = ScriptedModel(
        [
            {"match": "You are the planner", "text": json.dumps(plan)},
            {"match": delete, "tool_calls": [
                {"id": "t_del", "name": "workouts_delete", "input": {"workout_id": ENGINE}}]},
            {"match": delete, "text": "נמחק."},
        ]
    )  # fmt: skip
    async with make_server(TurnModels(planner=model, executor=model)) as server:
        await seed_demo(server.store, ORG)
        owner = server.auth(org=ORG, role="owner")
        body = {"message": "delete it", "context": {"page": "/workouts", "notes": NOTE}}
        first = await stream_turn(server.client, body, {**owner, "x-locale": "he"})
        session = first[0].data["session_id"]
        assert first[-1].data["status"] == "suspended"
        path = f"/v1/sessions/{session}/confirm/t_del"
        resumed = await stream_post(server.client, path, {"approved": True}, owner)

    assert resumed[-1].data["status"] == "completed"
    model.assert_complete()
    after = model.calls[-1]  # the resumed executor's request, rebuilt from the job
    text = "\n".join(m.text for m in after.messages)
    assert NOTE in text and 'page="/workouts"' in text and HEBREW in text


def test_accept_language_takes_the_heaviest_valid_tag() -> None:
    assert accept_language("en-US,en;q=0.9,he;q=0.8") == "en-US"
    assert accept_language("fr;q=0.2, he-IL;q=0.7, *;q=0.9") == "he-IL"  # * is no language
    assert accept_language("de;q=0, x_y, ru;q=bad, pt-BR;q=0.3") == "pt-BR"
    assert accept_language("de;q=0") is None and accept_language("") is None


def test_the_block_cuts_the_notes_first_and_escapes_values() -> None:
    client = ClientContext(
        page='/a"b<c>', entity=Entity(type="member", id="m&1"), notes="word " * 2_000,
        locale="ru",
    )  # fmt: skip
    counter = TokenCounter(MODEL)

    fill = fit_client(client, 120, reply=True, counter=counter)

    assert fill is not None and fill.used <= 120 and fill.cuts
    assert fill.text.startswith("Reply in Russian (ru) unless the user switches language.")
    assert 'page="/a&quot;b&lt;c&gt;" entity_type="member" entity_id="m&amp;1"' in fill.text
    assert [c.section for c in fill.cuts] == ["client"]
    silent = fit_client(client, 600, reply=False, counter=counter)
    assert silent is not None and "Reply in" not in silent.text
    assert fit_client(ClientContext(locale="he"), reply=False, counter=counter) is None


async def test_a_dry_run_plans_with_the_client_context(make_server: ServerFactory) -> None:
    plan = json.dumps({"strategy": "simple", "reasoning": "chat"})
    planner = FunctionModel(lambda _request: plan)
    async with make_server(TurnModels(planner=planner, executor=planner)) as server:
        context = {"entity": {"type": "member", "id": "mem_9"}, "notes": NOTE}
        response = await server.client.post(
            "/v1/plan", json={"message": "this one?", "context": context}, headers=server.auth()
        )

    assert response.status_code == 200, response.text
    [request] = planner.calls
    text = "\n".join(m.text for m in request.messages)
    assert 'entity_type="member" entity_id="mem_9"' in text and NOTE in text
    sections = {s["name"] for s in response.json()["budget"]["planner"]["sections"]}
    assert "client" in sections
