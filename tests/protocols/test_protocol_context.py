"""The chat protocols carry the client context and locale (issue 27): the AI SDK's body
field ``context``, AG-UI's ``forwardedProps.context`` and its own ``context`` entries (as
notes), and the ``x-locale`` / ``Accept-Language`` headers on both routes."""

from __future__ import annotations

from typing import Any

from conftest import ServerFactory
from providers import FunctionModel, ModelRequest
from turn import TurnModels

NOTE = "NOTE-MARKER-PROTO"


def answering() -> FunctionModel:
    async def reply(_request: ModelRequest) -> str:
        return "Привет"

    return FunctionModel(reply)


def sent_text(request: ModelRequest) -> str:
    return "\n".join(m.text for m in request.messages)


async def test_the_ai_sdk_body_and_headers_carry_context_and_locale(
    make_server: ServerFactory,
) -> None:
    model = answering()
    payload: dict[str, Any] = {
        "id": "chat-ctx", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
        "context": {"page": "/programs", "entity": {"type": "program", "id": "prg_1"},
                    "notes": NOTE},
    }  # fmt: skip
    async with make_server(TurnModels(executor=model)) as server:
        headers = {**server.auth(role="owner"), "accept-language": "ru-RU,ru;q=0.9"}
        response = await server.client.post("/v1/ai-sdk/chat", json=payload, headers=headers)
        refused = await server.client.post(
            "/v1/ai-sdk/chat",
            json={**payload, "id": "chat-bad", "context": {"entity": {"type": "program"}}},
            headers=headers,
        )

    assert response.status_code == 200, response.text
    [request] = model.calls
    text = sent_text(request)
    assert 'entity_type="program" entity_id="prg_1"' in text and NOTE in text
    assert "Reply in Russian (ru-RU) unless the user switches language." in text
    assert refused.status_code == 400 and "context.entity.id" in refused.json()["error"]["message"]


async def test_ag_ui_forwarded_context_and_its_own_entries_reach_the_model(
    make_server: ServerFactory,
) -> None:
    model = answering()
    payload = {
        "threadId": "t-ctx", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
        "context": [{"description": "Selected rows", "value": "Sam, Priya"}, {"junk": 1}],
        "forwardedProps": {"context": {"page": "/members", "notes": NOTE}},
    }  # fmt: skip
    async with make_server(TurnModels(executor=model)) as server:
        headers = {**server.auth(role="owner"), "x-locale": "he"}
        async with server.client.stream(
            "POST", "/v1/ag-ui", json=payload, headers=headers
        ) as response:
            assert response.status_code == 200, await response.aread()
            await response.aread()

    [request] = model.calls
    text = sent_text(request)
    assert 'page="/members"' in text
    assert f"{NOTE}\nSelected rows: Sam, Priya" in text
    assert "Reply in Hebrew (he) unless the user switches language." in text
