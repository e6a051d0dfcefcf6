"""The public test doubles (``FunctionModel``, ``ScriptedModel``) and ``model_from_spec``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from providers import (
    Completion,
    FunctionModel,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelSpecError,
    Reply,
    ScriptedModel,
    ScriptExhaustedError,
    StreamItem,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolResult,
    in_conversation,
    model_from_spec,
)
from providers import _testing as testing
from providers._testing import ScriptStep


def _request(text: str = "hello") -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),))


async def collect(model: Model, request: ModelRequest | None = None) -> list[StreamItem]:
    """Every item of one reply stream, in order."""
    return [item async for item in model.stream(request or _request())]


def _text(items: list[StreamItem]) -> str:
    return "".join(i.text for i in items if isinstance(i, TextChunk))


# FunctionModel


async def test_function_model_str_reply_is_one_chunk_then_end_turn() -> None:
    model = FunctionModel(lambda req: f"you said {req.messages[-1].text}", name="echo")

    items = await collect(model, _request("hi there"))

    assert items == [
        TextChunk(text="you said hi there"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="echo"),
    ]
    assert model.name == "echo"


async def test_function_model_reply_with_tool_calls_stops_for_tool_use() -> None:
    call = ToolCall(id="toolu_1", name="search", input={"q": "bosun"})
    usage = TokenUsage(input_tokens=12, output_tokens=3)
    model = FunctionModel(lambda _req: Reply(text="Searching.", tool_calls=(call,), usage=usage))

    items = await collect(model)

    assert items == [
        TextChunk(text="Searching."),
        call,
        Completion(stop_reason="tool_use", usage=usage, model="function"),
    ]


async def test_function_model_reply_with_no_text_sends_no_chunk() -> None:
    model = FunctionModel(lambda _req: Reply(stop_reason="max_tokens"))

    items = await collect(model)

    assert items == [Completion(stop_reason="max_tokens", usage=TokenUsage(), model="function")]


async def test_function_model_awaits_an_async_function() -> None:
    async def answer(req: ModelRequest) -> Reply:
        await asyncio.sleep(0)
        return Reply(text=req.messages[0].text.upper(), stop_reason="stop_sequence")

    items = await collect(FunctionModel(answer), _request("loud"))

    assert items == [
        TextChunk(text="LOUD"),
        Completion(stop_reason="stop_sequence", usage=TokenUsage(), model="function"),
    ]


async def test_function_model_streams_an_async_generator_and_sums_usage() -> None:
    call = ToolCall(id="t1", name="lookup", input={"key": "a"})

    async def pieces(_req: ModelRequest) -> AsyncIterator[str | ToolCall | TokenUsage]:
        yield "Hel"
        yield TokenUsage(input_tokens=10, output_tokens=1)
        yield "lo"
        yield call
        yield TokenUsage(output_tokens=4, cache_read_tokens=7, cache_write_tokens=2)

    items = await collect(FunctionModel(pieces, name="gen"))

    assert items == [
        TextChunk(text="Hel"),
        TextChunk(text="lo"),
        call,
        Completion(
            stop_reason="tool_use",
            usage=TokenUsage(
                input_tokens=10, output_tokens=5, cache_read_tokens=7, cache_write_tokens=2
            ),
            model="gen",
        ),
    ]


async def test_function_model_async_generator_without_tool_calls_ends_turn() -> None:
    async def pieces(_req: ModelRequest) -> AsyncIterator[str | ToolCall | TokenUsage]:
        for word in ("a ", "b ", "c"):
            yield word

    items = await collect(FunctionModel(pieces))

    assert _text(items) == "a b c"
    assert items[-1] == Completion(stop_reason="end_turn", usage=TokenUsage(), model="function")


async def test_function_model_records_every_request_in_order() -> None:
    model = FunctionModel(lambda _req: "ok")
    first, second = _request("one"), _request("two")

    await collect(model, first)
    await collect(model, second)

    assert model.calls == [first, second]


async def test_function_model_early_close_closes_the_callers_generator() -> None:
    events: list[str] = []

    async def pieces(_req: ModelRequest) -> AsyncIterator[str | ToolCall | TokenUsage]:
        try:
            for word in ("one ", "two ", "three"):
                events.append(f"sent {word.strip()}")
                yield word
        finally:
            events.append("closed")

    model = FunctionModel(pieces)
    received: list[StreamItem] = []
    async with contextlib.aclosing(model.stream(_request())) as stream:
        async for item in stream:
            received.append(item)
            break

    assert received == [TextChunk(text="one ")]
    assert events == ["sent one", "closed"]


# ScriptedModel


async def test_scripted_text_streams_word_by_word_and_joins_back() -> None:
    text = "The quick  brown fox\njumps over the lazy dog. "
    model = ScriptedModel([text])

    items = await collect(model)

    chunks = [i.text for i in items if isinstance(i, TextChunk)]
    assert chunks == [
        "The ",
        "quick  ",
        "brown ",
        "fox\n",
        "jumps ",
        "over ",
        "the ",
        "lazy ",
        "dog. ",
    ]
    assert "".join(chunks) == text
    assert items[-1] == Completion(stop_reason="end_turn", usage=TokenUsage(), model="scripted")


async def test_scripted_steps_are_replayed_one_per_call_and_recorded() -> None:
    model = ScriptedModel(["first reply", "second reply"], name="script")
    requests = [_request("a"), _request("b")]

    replies = [_text(await collect(model, r)) for r in requests]

    assert replies == ["first reply", "second reply"]
    assert model.calls == requests
    assert model.remaining == 0
    assert model.name == "script"


async def test_scripted_empty_text_sends_only_the_completion() -> None:
    items = await collect(ScriptedModel([""]))

    assert items == [Completion(stop_reason="end_turn", usage=TokenUsage(), model="scripted")]


async def test_scripted_mapping_step_with_chunks_tool_calls_usage_and_stop_reason() -> None:
    model = ScriptedModel(
        [
            {
                "text": "ignored when chunks are given",
                "chunks": ["Let me ", "check."],
                "tool_calls": [
                    {"id": "call_given", "name": "search", "input": {"q": "x"}},
                    {"name": "fetch"},
                ],
                "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_tokens": 1},
                "stop_reason": "max_tokens",
            }
        ]
    )

    items = await collect(model)

    assert items == [
        TextChunk(text="Let me "),
        TextChunk(text="check."),
        ToolCall(id="call_given", name="search", input={"q": "x"}),
        ToolCall(id="toolu_1_1", name="fetch", input={}),
        Completion(
            stop_reason="max_tokens",
            usage=TokenUsage(input_tokens=5, output_tokens=2, cache_read_tokens=1),
            model="scripted",
        ),
    ]


async def test_scripted_tool_calls_default_to_tool_use_with_ids_unique_across_calls() -> None:
    step = {"tool_calls": [{"name": "a"}, {"name": "b"}]}
    model = ScriptedModel([step, step])

    first = await collect(model)
    second = await collect(model)

    assert [i.id for i in first if isinstance(i, ToolCall)] == ["toolu_1_0", "toolu_1_1"]
    assert [i.id for i in second if isinstance(i, ToolCall)] == ["toolu_2_0", "toolu_2_1"]
    assert first[-1] == Completion(stop_reason="tool_use", usage=TokenUsage(), model="scripted")


async def test_scripted_accepts_reply_objects_and_script_steps() -> None:
    call = ToolCall(id="t9", name="calc", input={"expr": "1+1"})
    usage = TokenUsage(input_tokens=3, output_tokens=4, cache_write_tokens=5)
    model = ScriptedModel([Reply(text="Computing now", tool_calls=(call,), usage=usage)])

    items = await collect(model)

    assert items == [
        TextChunk(text="Computing "),
        TextChunk(text="now"),
        call,
        Completion(stop_reason="tool_use", usage=usage, model="scripted"),
    ]
    step = ScriptStep(text="x", stop_reason="refusal")
    assert await collect(ScriptedModel([step.model_dump()])) == [
        TextChunk(text="x"),
        Completion(stop_reason="refusal", usage=TokenUsage(), model="scripted"),
    ]


async def test_scripted_error_is_raised_after_the_given_number_of_chunks() -> None:
    model = ScriptedModel(
        [
            {
                "text": "one two three four",
                "error": {
                    "code": "provider_overloaded",
                    "message": "busy",
                    "after_chunks": 2,
                },
            }
        ]
    )
    received: list[StreamItem] = []

    with pytest.raises(ModelError) as info:
        async for item in model.stream(_request()):
            received.append(item)

    assert received == [TextChunk(text="one "), TextChunk(text="two ")]
    assert info.value.code == "provider_overloaded"
    assert info.value.message == "busy"


async def test_scripted_error_with_zero_chunks_fails_before_anything_is_sent() -> None:
    model = ScriptedModel([{"text": "never sent", "error": {"code": "provider_rate_limited"}}])
    received: list[StreamItem] = []

    with pytest.raises(ModelError, match="scripted provider failure") as info:
        async for item in model.stream(_request()):
            received.append(item)

    assert received == []
    assert info.value.code == "provider_rate_limited"


async def test_scripted_error_still_fires_when_the_reply_has_fewer_chunks() -> None:
    model = ScriptedModel(
        [{"text": "short", "error": {"code": "provider_timeout", "after_chunks": 10}}]
    )
    received: list[StreamItem] = []

    with pytest.raises(ModelError) as info:
        async for item in model.stream(_request()):
            received.append(item)

    assert received == [TextChunk(text="short")]
    assert info.value.code == "provider_timeout"


def test_scripted_error_code_must_be_a_known_provider_code() -> None:
    with pytest.raises(ValidationError, match="code"):
        ScriptedModel([{"text": "x", "error": {"code": "boom"}}])


async def test_scripted_delay_waits_before_each_chunk() -> None:
    model = ScriptedModel([{"text": "a b c", "delay_s": 0.01}])
    loop = asyncio.get_running_loop()

    started = loop.time()
    items = await collect(model)
    elapsed = loop.time() - started

    assert _text(items) == "a b c"
    assert elapsed >= 0.03 * 0.9  # three chunks, 10 ms each (allow timer granularity)


def test_scripted_delay_is_bounded() -> None:
    with pytest.raises(ValidationError, match="delay_s"):
        ScriptedModel([{"text": "x", "delay_s": 61}])


async def test_scripted_exhausted_raises_a_clear_error() -> None:
    model = ScriptedModel(["only one"], name="replies")
    await collect(model)

    with pytest.raises(ScriptExhaustedError) as info:
        await collect(model)

    assert str(info.value) == "replies has no step left for call 2 (1 scripted)"
    assert isinstance(info.value, AssertionError)


async def test_each_conversation_keeps_its_own_place_in_the_script() -> None:
    """A new session starts at the first step whatever others did; parallel steps of one
    turn (tasks started inside the block) share its place; no key: one shared place."""
    model = ScriptedModel(["one", "two", "three"])

    async def say(key: str | None) -> str:
        if key is None:
            return _text(await collect(model))
        with in_conversation(key):
            return _text(await collect(model))

    async def turn() -> list[str]:  # two tasks of one turn, as parallel steps run
        with in_conversation("c"):
            tasks = [asyncio.create_task(collect(model)) for _ in range(2)]
            return sorted(_text(items) for items in await asyncio.gather(*tasks))

    replies = [await say("a"), await say("b"), await say("a"), await say(None), await say(None)]

    assert replies == ["one", "one", "two", "one", "two"]
    assert await turn() == ["one", "two"]
    assert len(model.calls) == 7
    assert model.remaining == 1  # "three": no conversation used it
    with pytest.raises(AssertionError, match="1 of 3 scripted steps unused"):
        model.assert_complete()
    assert await say("b") == "two" and await say("b") == "three"
    model.assert_complete()


async def test_the_oldest_conversations_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testing, "MAX_CONVERSATIONS", 2)
    model = ScriptedModel(["one", "two"])
    for key in ("a", "b", "a", "c"):  # "b" is now the least recently used: dropped
        with in_conversation(key):
            await collect(model)
    with in_conversation("a"), pytest.raises(ScriptExhaustedError):
        await collect(model)  # "a" is kept: both its steps are used
    with in_conversation("b"):
        assert _text(await collect(model)) == "one"  # "b" starts over


async def test_exhausted_names_the_script_and_the_request_only_for_its_client() -> None:
    model = ScriptedModel([{"match": "planner", "text": "{}"}], name="scripted:demo.yaml")
    words = "Say hello to the new members of the studio this week please"

    with pytest.raises(ScriptExhaustedError) as info:
        await collect(model, _request(words))
    error = info.value
    error.role = "planner"

    assert error.code == "script_exhausted"
    assert str(error) == (
        "scripted:demo.yaml has no step left for call 1 (1 scripted, 1 unused but not matching)"
    )  # no user text: it may reach a log
    assert error.describe() == (
        "The script 'scripted:demo.yaml' has no step for the planner that answers this call "
        '(the request began "Say hello to the new members of the …"); add a step whose '
        "match this request contains, or start a new session"
    )


async def test_a_match_list_needs_every_phrase_and_sees_tool_results() -> None:
    result = ToolResult(tool_use_id="t1", content='{"error": "rejected_by_user"}', is_error=True)
    declined = ModelRequest(
        messages=(Message.user("Delete it"), Message(role="user", parts=(result,)))
    )
    model = ScriptedModel(
        [
            {"match": ["Delete it", "rejected_by_user"], "text": "Not deleted."},
            {"match": "Delete it", "text": "Deleted."},
        ],
        repeat=True,
    )

    assert _text(await collect(model, _request("Delete it"))) == "Deleted."
    assert _text(await collect(model, declined)) == "Not deleted."


async def test_scripted_with_no_steps_is_exhausted_even_with_repeat() -> None:
    with pytest.raises(ScriptExhaustedError, match="0 scripted"):
        await collect(ScriptedModel([], repeat=True))


async def test_scripted_repeat_cycles_through_the_steps() -> None:
    model = ScriptedModel(["one", "two"], repeat=True)

    replies = [_text(await collect(model)) for _ in range(5)]

    assert replies == ["one", "two", "one", "two", "one"]
    assert len(model.calls) == 5
    model.assert_complete()


async def test_assert_complete_fails_while_steps_are_unused() -> None:
    model = ScriptedModel(["one", "two", "three"], name="plan")
    await collect(model)

    with pytest.raises(AssertionError, match=r"^plan: 2 of 3 scripted steps unused$"):
        model.assert_complete()

    await collect(model)
    await collect(model)
    model.assert_complete()


async def test_scripted_stream_can_be_closed_early() -> None:
    model = ScriptedModel(["alpha beta gamma", "next reply"])

    async with contextlib.aclosing(model.stream(_request())) as stream:
        first = await anext(stream)

    assert first == TextChunk(text="alpha ")
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    # The closed call used up its step; the next call gets the next one.
    assert _text(await collect(model)) == "next reply"


# ScriptedModel.from_file


async def test_from_file_reads_a_json_list(tmp_path: Path) -> None:
    path = tmp_path / "replies.json"
    path.write_text(
        json.dumps([{"text": "Hello there"}, {"tool_calls": [{"id": "c1", "name": "search"}]}]),
        encoding="utf-8",
    )

    model = ScriptedModel.from_file(path)

    assert model.name == "scripted:replies.json"
    assert model.remaining == 2
    assert await collect(model) == [
        TextChunk(text="Hello "),
        TextChunk(text="there"),
        Completion(stop_reason="end_turn", usage=TokenUsage(), model="scripted:replies.json"),
    ]
    assert await collect(model) == [
        ToolCall(id="c1", name="search", input={}),
        Completion(stop_reason="tool_use", usage=TokenUsage(), model="scripted:replies.json"),
    ]
    model.assert_complete()


async def test_from_file_reads_a_yaml_mapping_with_repeat(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(
        "steps:\n"
        "  - text: first answer\n"
        "    usage: {input_tokens: 4, output_tokens: 2}\n"
        "  - chunks: ['sec', 'ond']\n"
        "repeat: true\n",
        encoding="utf-8",
    )

    model = ScriptedModel.from_file(str(path))

    replies = [await collect(model) for _ in range(3)]
    assert [_text(r) for r in replies] == ["first answer", "second", "first answer"]
    assert replies[0][-1] == Completion(
        stop_reason="end_turn",
        usage=TokenUsage(input_tokens=4, output_tokens=2),
        model="scripted:demo.yaml",
    )
    model.assert_complete()


def test_from_file_rejects_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("steps:\n  - text: hi\n    colour: blue\n", encoding="utf-8")

    with pytest.raises(ValidationError, match="colour"):
        ScriptedModel.from_file(path)


def test_from_file_rejects_an_unknown_top_level_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"steps": [{"text": "hi"}], "loop": True}), encoding="utf-8")

    with pytest.raises(ValidationError, match="loop"):
        ScriptedModel.from_file(path)


# model_from_spec


async def test_model_from_spec_builds_a_scripted_model(tmp_path: Path) -> None:
    path = tmp_path / "replies.yaml"
    path.write_text("- text: Hi from the script\n", encoding="utf-8")

    model = model_from_spec(f"scripted:{path}")

    assert isinstance(model, ScriptedModel)
    assert model.name == "scripted:replies.yaml"
    assert _text(await collect(model)) == "Hi from the script"


def test_model_from_spec_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(ModelSpecError, match="does not exist") as info:
        model_from_spec(f"scripted:{missing}")

    assert str(missing) in str(info.value)


def test_model_from_spec_invalid_script_names_the_file_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- text: hi\n  colour: blue\n", encoding="utf-8")

    with pytest.raises(ModelSpecError, match="is not a valid script") as info:
        model_from_spec(f"scripted:{path}")

    assert "colour" in str(info.value)
    assert isinstance(info.value.__cause__, ValidationError)


@pytest.mark.parametrize(
    ("name", "content"),
    [("broken.yaml", "steps: [\n  - text: 'unterminated\n"), ("broken.json", '["a",')],
)
def test_model_from_spec_unparsable_script_is_a_spec_error(
    tmp_path: Path, name: str, content: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ModelSpecError, match=f"{name}.* is not a valid script"):
        model_from_spec(f"scripted:{path}")


@pytest.mark.parametrize("spec", ["replies.yaml", "scripted:", ""])
def test_model_from_spec_without_provider_prefix(spec: str) -> None:
    with pytest.raises(ModelSpecError, match="has no provider prefix") as info:
        model_from_spec(spec)

    assert "PROVIDER:MODEL" in str(info.value)
    assert "scripted" in str(info.value)


def test_model_from_spec_unknown_provider() -> None:
    with pytest.raises(ModelSpecError, match=r"Unknown model provider 'gemini'") as info:
        model_from_spec("gemini:pro")

    assert "anthropic" in str(info.value)
    assert "scripted" in str(info.value)


async def test_a_script_file_may_list_bare_strings(tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text("- Hello there\n- text: Second\n")
    model = ScriptedModel.from_file(path)
    first = [i for i in await collect(model) if isinstance(i, TextChunk)]
    assert "".join(c.text for c in first) == "Hello there"
    second = [i for i in await collect(model) if isinstance(i, TextChunk)]
    assert "".join(c.text for c in second) == "Second"
    model.assert_complete()


async def test_matched_steps_answer_their_own_requests_in_any_order() -> None:
    from providers import SystemBlock

    model = ScriptedModel(
        [
            {"match": "planner", "text": "PLAN"},
            {"match": "goal: find Sam", "text": "SAM-1"},
            {"match": "goal: find Sam", "text": "SAM-2"},
            {"match": "goal: list programs", "text": "PROGRAMS"},
            {"text": "ANYTHING"},
        ]
    )

    def ask(system: str, text: str) -> ModelRequest:
        return ModelRequest(system=(SystemBlock(text=system),), messages=(Message.user(text),))

    async def reply(request: ModelRequest) -> str:
        return "".join(i.text for i in await collect(model, request) if isinstance(i, TextChunk))

    assert await reply(ask("executor", "goal: list programs")) == "PROGRAMS"
    assert await reply(ask("executor", "goal: find Sam")) == "SAM-1"
    assert await reply(ask("you are the planner", "hi")) == "PLAN"
    assert await reply(ask("executor", "goal: find Sam")) == "SAM-2"
    assert await reply(ask("merge", "results")) == "ANYTHING"
    model.assert_complete()
    with pytest.raises(ScriptExhaustedError, match="no step left"):
        await reply(ask("executor", "goal: find Sam"))


async def test_scripted_tool_input_takes_a_key_of_the_latest_tool_result() -> None:
    """``{{result.KEY}}`` passes on an id the server made (an artifact id) to the next call."""
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {
                        "name": "notify",
                        "input": {
                            "id": "{{result.artifact_id}}",
                            "n": ["{{result.missing}}", "kept"],
                        },
                    }
                ]
            }
        ]
    )
    result = ToolResult(tool_use_id="t1", content='{"artifact_id":"art_1"}\n<artifact …>')
    request = ModelRequest(messages=(Message.user("go"), Message(role="user", parts=(result,))))
    [call] = [i for i in await collect(model, request) if isinstance(i, ToolCall)]
    assert call.input == {"id": "art_1", "n": ["{{result.missing}}", "kept"]}
