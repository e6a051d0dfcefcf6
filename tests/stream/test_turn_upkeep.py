"""After the answer: a long history is compressed into a summary event; new sessions get
a title. Both come from the summariser role and are best-effort."""

from __future__ import annotations

from conftest import ServerFactory
from helpers import stream_turn, types
from providers import FunctionModel, ModelError, ModelRequest, Reply, TokenUsage
from turn import TurnModels

LONG = "Tell me everything about kettlebell programming for beginners. " * 30


def summariser(request: ModelRequest) -> Reply:
    prompt = request.system[0].text
    if prompt.startswith("Write a short title"):
        return Reply(
            text='"Kettlebell Basics."', usage=TokenUsage(input_tokens=50, output_tokens=4)
        )
    return Reply(
        text="SUMMARY: the user asks about kettlebells.", usage=TokenUsage(input_tokens=900)
    )


async def test_long_histories_are_summarised_and_sessions_titled(
    make_server: ServerFactory,
) -> None:
    answers: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        answers.append(request)
        return "Start light. " * 40

    models = TurnModels(executor=FunctionModel(answer), summariser=FunctionModel(summariser))
    async with make_server(models) as server:
        headers = server.auth()
        first = await stream_turn(server.client, {"message": LONG}, headers)
        session = {"session_id": first[0].data["session_id"]}
        detail = await server.client.get(f"/v1/sessions/{session['session_id']}", headers=headers)
        assert detail.json()["title"] == "Kettlebell Basics"
        assert first[-2].data["by_role"]["summariser"]["input_tokens"] == 50

        turns = [first]
        while not any(f.event == "history_summarised" for f in turns[-1]):
            assert len(turns) < 8, "the history was never compressed"
            turns.append(await stream_turn(server.client, {"message": LONG, **session}, headers))
        summarised = next(f for f in turns[-1] if f.event == "history_summarised")
        assert summarised.data["summary"] == "SUMMARY: the user asks about kettlebells."
        assert types(turns[-1])[-4:] == ["history_summarised", "message_done", "usage", "done"]

        await stream_turn(server.client, {"message": "and next?", **session}, headers)
    replay = answers[-1].messages
    assert "SUMMARY: the user asks about kettlebells." in replay[0].text
    assert len(replay) < 2 * len(turns)


async def test_a_failing_summariser_changes_nothing(make_server: ServerFactory) -> None:
    def broken(_request: ModelRequest) -> str:
        raise ModelError("provider_overloaded", "busy")

    models = TurnModels(executor=FunctionModel(lambda _r: "fine"), summariser=FunctionModel(broken))
    async with make_server(models) as server:
        frames = await stream_turn(server.client, {"message": "hello"}, server.auth())
        detail = await server.client.get(
            f"/v1/sessions/{frames[0].data['session_id']}", headers=server.auth()
        )
    assert frames[-1].data["status"] == "completed"
    assert detail.json()["title"] == "hello"  # the first message stays the title
