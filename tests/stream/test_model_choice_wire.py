"""A request's model choice over HTTP (issue 27), with the bodies captured by the fake
Anthropic server through the real SDK: ``model`` runs every role that answers (each
step's tool loop, the merge, a direct answer, a forced-tools agent's loop, over the
agent's own models, also once the turn resumes), ``planner_model`` the planner (which
otherwise keeps its cheap model); ``plan_created`` and ``usage`` name the model of each
call; a spec outside ``models.allowed`` is 422 ``model_not_allowed`` on the native, AI SDK
and AG-UI routes, before any model call."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bosun.settings import Settings
from bosun.wiring import build_models
from bosun_demo import seed_demo
from conftest import DEMO, JWT_SECRET, OPEN_EGRESS, Server
from helpers import stream_turn
from providers import TokenUsage, ToolCall
from providers._anthropic import AnthropicModel
from providers._fake_anthropic import SSE_HEADERS
from providers._fake_server import Exchange
from providers.fake import FakeProvider, FakeServer, anthropic_reply

# The issue's own spec: the SDK warns that this model nears its end of life (2026-11-30).
pytestmark = pytest.mark.filterwarnings(
    "ignore:The model 'claude-sonnet-4-5' is deprecated:DeprecationWarning"
)
ORG = "acme"
HAIKU, SONNET, OPUS = "claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-6"
USAGE = TokenUsage(input_tokens=40, output_tokens=5)
TWO_STEPS = {
    "strategy": "complex",
    "reasoning": "two lookups",
    "steps": [
        {"id": "s1", "goal": "Find the member Sam Rivera", "tools": ["members.search"]},
        {"id": "s2", "goal": "List the programs", "tools": ["programs.list"]},
    ],
}
SIMPLE = {"strategy": "simple", "reasoning": "a plain reply", "steps": []}
TRAINER = {
    "handle": "trainer",
    "name": "Trainer",
    "tools": ["programs.list"],
    "loop": "forced_tools",
    # The agent's own answering models: a request's model wins over them.
    "models": {"executor": f"anthropic:{OPUS}", "merger": f"anthropic:{OPUS}"},
}


def role_of(body: dict[str, Any]) -> str:
    system = " ".join(block.get("text", "") for block in body.get("system") or [])
    if "You are the planner" in system:
        return "planner"
    if "You carry out ONE step" in system:
        return "executor"
    if "You write the answer" in system:
        return "merge"
    if "message_notify_user" in {t["name"] for t in body.get("tools") or []}:
        return "loop"
    if "You are Bosun, an assistant" in system:
        return "answer"
    return "upkeep"  # the session's title


class Provider:
    """The stand-in provider: a plan (``plan``), a tool call then a text per step, texts
    for the answer; the forced loop's replies in ``loop`` order. Each reply names the model
    its request asked for, as the real API does."""

    def __init__(self) -> None:
        self.plan: dict[str, Any] = SIMPLE
        self.loop: list[ToolCall] = []

    def respond(self, body: Any) -> tuple[bytes, ...]:
        role, last = role_of(body), body["messages"][-1]["content"]
        calls: list[ToolCall] = []
        text = ""
        if role == "planner":
            calls = [ToolCall(id=f"p{uuid.uuid4().hex[:8]}", name="plan", input=self.plan)]
        elif role == "loop":
            calls = [self.loop.pop(0)]
        elif role == "executor" and not any(b.get("type") == "tool_result" for b in last):
            name = "members_search" if "Sam" in str(body["messages"]) else "programs_list"
            query = {"query": "Sam Rivera"} if name == "members_search" else {}
            calls = [ToolCall(id=f"toolu_{uuid.uuid4().hex[:8]}", name=name, input=query)]
        else:
            text = "Sam Rivera is on the Strength program." if role != "upkeep" else "Sam"
        model = str(body["model"])
        return anthropic_reply(text=text, tool_calls=calls, usage=USAGE, model=model).chunks


@pytest.fixture
def stand_in() -> Provider:
    return Provider()


@pytest.fixture
def provider(stand_in: Provider) -> Iterator[FakeServer]:
    fake = FakeProvider().enqueue(
        *(Exchange(headers=SSE_HEADERS, respond=stand_in.respond) for _ in range(60))
    )
    with FakeServer(fake) as started:
        yield started


@pytest.fixture
async def served(db_url: str, provider: FakeServer) -> AsyncIterator[Server]:
    """The app over HTTP: Haiku for every role by default, Sonnet and Opus allowed."""
    settings = Settings(
        database_url=db_url, jwt_secret=JWT_SECRET, toolsets=[DEMO],
        limits={"requests_per_minute": 0, "tokens_per_minute": 0},  # type: ignore[arg-type]
        egress=OPEN_EGRESS,  # type: ignore[arg-type]
        models={"default": f"anthropic:{HAIKU}",  # type: ignore[arg-type]
                "allowed": [f"anthropic:{SONNET}", f"anthropic:{OPUS}"]},
        providers={"anthropic_api_key": "test-key", "anthropic_base_url": provider.url,
                   "max_retries": 0},  # type: ignore[arg-type]
    )  # fmt: skip
    models = build_models(settings)
    async with Server(settings, models) as server:
        await seed_demo(server.store, ORG)
        yield server
    for model in {id(m): m for m in [models.executor, *models.selectable.values()]}.values():
        assert isinstance(model, AnthropicModel)
        await model.aclose()


def sent(provider: FakeServer) -> list[tuple[str, str]]:
    """Each captured request's role and the model it named, in order."""
    return [(role_of(r.json), r.json["model"]) for r in provider.provider.requests]


def logged(frames: list[Any], kind: str) -> dict[str, Any]:
    [data] = [f.data for f in frames if f.event == kind]
    return data


async def test_a_requested_model_runs_every_step_and_the_merge(
    served: Server, provider: FakeServer, stand_in: Provider
) -> None:
    stand_in.plan = TWO_STEPS
    body = {"message": "Tell me about Sam Rivera", "model": f"anthropic:{SONNET}"}
    frames = await stream_turn(served.client, body, served.auth(org=ORG, role="owner"))

    assert frames[-1].data["status"] == "completed", frames[-1].data
    calls = sent(provider)
    roles = [role for role, _ in calls]
    assert roles.count("executor") == 4 and roles.count("merge") == 1, calls
    # The planner keeps its cheap model; every answering request names the chosen one.
    assert [model for role, model in calls if role == "planner"] == [HAIKU]
    assert {model for role, model in calls if role in ("executor", "merge")} == {SONNET}
    assert logged(frames, "plan_created")["models"] == {
        "planner": f"anthropic:{HAIKU}",
        "executor": f"anthropic:{SONNET}",
        "merger": f"anthropic:{SONNET}",
    }
    usage = [(c["role"], c["model"]) for c in logged(frames, "usage")["calls"]]
    ran = {"planner": "planner", "executor": "executor", "merge": "merger", "upkeep": "summariser"}
    assert usage == [(ran[role], model) for role, model in calls]


async def test_a_direct_answer_and_a_planner_named_apart(
    served: Server, provider: FakeServer
) -> None:
    body = {
        "message": "Hello there",
        "model": f"anthropic:{SONNET}",
        "planner_model": f"anthropic:{OPUS}",
    }
    frames = await stream_turn(served.client, body, served.auth(org=ORG))

    assert frames[-1].data["status"] == "completed", frames[-1].data
    calls = sent(provider)
    assert [c for c in calls if c[0] != "upkeep"] == [("planner", OPUS), ("answer", SONNET)]
    assert logged(frames, "plan_created")["models"] == {
        "planner": f"anthropic:{OPUS}",
        "executor": f"anthropic:{SONNET}",
        "merger": f"anthropic:{SONNET}",
    }
    models = {c["role"]: c["model"] for c in logged(frames, "usage")["calls"]}
    assert models == {"planner": OPUS, "merger": SONNET, "summariser": HAIKU}


async def test_the_request_wins_over_the_agents_models_in_a_forced_loop_and_its_resume(
    served: Server, provider: FakeServer, stand_in: Provider
) -> None:
    owner = served.auth(org=ORG, role="owner")
    made = await served.client.post("/v1/agents", json=TRAINER, headers=owner)
    assert made.status_code == 201, made.text
    stand_in.loop = [
        ToolCall(id="q1", name="message_ask_user", input={"question": "Which days?"}),
        ToolCall(id="n1", name="message_notify_user", input={"message": "Booked Monday."}),
        ToolCall(id="i1", name="agent_idle", input={"reason": "done"}),
    ]
    body = {"message": "Book me in", "agent": "trainer", "model": f"anthropic:{SONNET}"}
    frames = await stream_turn(served.client, body, owner)
    assert frames[-1].data["status"] == "suspended", frames[-1].data
    session_id = frames[0].data["session_id"]
    answered = await served.client.post(
        "/v1/chat", json={"message": "Monday", "session_id": session_id}, headers=owner
    )  # resumes the same turn, from its job: the choice it recorded

    assert answered.status_code == 200 and answered.json()["status"] == "completed"
    calls = sent(provider)
    assert [model for role, model in calls if role == "loop"] == [SONNET] * 3, calls
    assert [model for role, model in calls if role == "planner"] == [HAIKU]


@pytest.mark.parametrize("field", ["model", "planner_model"])
async def test_a_model_outside_allowed_is_422_on_every_route(
    served: Server, provider: FakeServer, field: str
) -> None:
    headers = served.auth(org=ORG)
    spec = "anthropic:claude-sonnet-4-6"  # a real model, but not one this server allows
    native = {"message": "hi", field: spec}
    ai_sdk = {
        "id": "chat-1",
        "trigger": "submit-message",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        field: spec,
    }
    agui = {
        "threadId": "thread-1",
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
        "forwardedProps": {field: spec},
    }
    for path, body in [
        ("/v1/chat", native),
        ("/v1/chat/stream", native),
        ("/v1/ai-sdk/chat", ai_sdk),
        ("/v1/ag-ui", agui),
    ]:
        response = await served.client.post(path, json=body, headers=headers)
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error["code"] == "model_not_allowed", (path, error)
        assert spec in error["message"] and f"anthropic:{SONNET}" in error["message"]
    assert provider.provider.requests == []
    listed = (await served.client.get("/v1/sessions", headers=headers)).json()
    assert listed["sessions"] == []
