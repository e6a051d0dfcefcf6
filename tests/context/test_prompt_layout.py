"""Prompt layout: stable sections first, at most four cache marks, and byte-identical
prefixes across an executor's loop."""

from __future__ import annotations

import itertools

from context import PromptParts, caller_block, executor_request, layout_request, prefix_ratio
from context._layout import MAX_CACHE_MARKS, cache_marks, canonical_prompt
from providers import (
    Message,
    ModelRequest,
    SystemBlock,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)

SEARCH = ToolSpec(
    name="search_notes",
    description="Full-text search over the user's notes.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
)
GET = ToolSpec(
    name="get_note",
    description="Fetch one note by id.",
    input_schema={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)


def _parts(**overrides: object) -> PromptParts:
    fields: dict[str, object] = {
        "system": "You are Bosun's planner.",
        "tools": (SEARCH, GET),
        "tool_listing": "- archive_note: Archive a note.",
        "user_data": "<profile>Ada, UTC+1</profile>",
        "knowledge": ('<source name="schedule">Mon: dentist</source>',),
        "history": (Message.user("Hi"), Message.assistant("Hello! How can I help?")),
        "task": "Find my note about the boat.",
    }
    fields.update(overrides)
    return PromptParts(**fields)  # type: ignore[arg-type]


def test_stable_sections_come_first_with_four_marks() -> None:
    request = layout_request(_parts(), max_tokens=512)
    assert request.tools == (SEARCH, GET)
    assert request.cache_tools
    assert request.system == (
        SystemBlock(text="You are Bosun's planner.", cache=False),
        SystemBlock(text="- archive_note: Archive a note.", cache=True),
        SystemBlock(text="<profile>Ada, UTC+1</profile>", cache=True),
        SystemBlock(text='<source name="schedule">Mon: dentist</source>', cache=False),
    )
    # the fourth mark is the conversation tail: the task, which the next turn's history
    # ends with (with tools there is no room for a spare mark on the earlier turns)
    assert request.messages == (
        Message.user("Hi"),
        Message.assistant("Hello! How can I help?"),
        Message(role="user", parts=(TextPart(text="Find my note about the boat."),), cache=True),
    )
    assert request.max_tokens == 512
    assert cache_marks(request) == MAX_CACHE_MARKS == 4


def test_the_caller_opens_the_org_user_block_and_shares_its_mark() -> None:
    caller = caller_block(org_id="acme", user_id='u"1', role="member")
    assert caller == '<caller org="acme" user="u&quot;1" role="member"/>'
    with_data = layout_request(_parts(caller=caller))
    assert [(b.text, b.cache) for b in with_data.system[2:4]] == [
        (caller, False),
        ("<profile>Ada, UTC+1</profile>", True),
    ]
    plain = layout_request(_parts(caller=caller, user_data=""))
    assert (plain.system[2].text, plain.system[2].cache) == (caller, True)
    assert cache_marks(with_data) == cache_marks(plain) == 4


def test_a_call_without_tools_marks_the_earlier_turns_too() -> None:
    """The direct answer and the merge have no tools: their spare mark goes on the last
    message of the earlier turns, the tail mark on the new message."""
    caller = caller_block(org_id="acme", user_id="u1", role="member")
    request = layout_request(_parts(tools=(), tool_listing="", caller=caller, user_data=""))
    assert not request.cache_tools
    assert [m.cache for m in request.messages] == [False, True, True]
    assert cache_marks(request) == 4
    first_turn = layout_request(_parts(tools=(), caller=caller, user_data="", history=()))
    assert [m.cache for m in first_turn.messages] == [True]
    assert cache_marks(first_turn) == 3  # static, org/user, tail: no fourth tier to mark


def test_missing_sections_take_no_marks() -> None:
    request = layout_request(
        _parts(tools=(), tool_listing="", user_data="", knowledge=(), history=())
    )
    assert not request.cache_tools
    assert request.system == (SystemBlock(text="You are Bosun's planner.", cache=True),)
    tail = Message(role="user", parts=(TextPart(text="Find my note about the boat."),), cache=True)
    assert request.messages == (tail,)
    assert cache_marks(request) == 2


def test_incoming_marks_are_replaced_by_the_layout() -> None:
    marked = (Message(role="user", parts=(TextPart(text="Hi"),), cache=True), Message.user("x"))
    request = layout_request(_parts(history=marked))
    assert [m.cache for m in request.messages] == [False, False, True]
    assert cache_marks(request) == 4


def _loop_step(n: int) -> list[Message]:
    call = ToolCall(id=f"toolu_{n}", name="search_notes", input={"query": f"boat {n}"})
    result = ToolResult(tool_use_id=f"toolu_{n}", content=f"note_{n}: 'Boat trip' (2025-0{n}-01)")
    return [
        Message(role="assistant", parts=(TextPart(text="Searching."), call)),
        Message(role="user", parts=(result,)),
    ]


def test_executor_requests_share_their_prefix() -> None:
    parts = _parts(history=(), knowledge=(), system="You are an executor. " * 20)
    loop: list[Message] = []
    requests: list[ModelRequest] = []
    for n in range(5):
        requests.append(executor_request(parts, loop))
        loop += _loop_step(n + 1)
    for previous, current in itertools.pairwise(requests):
        old, new = canonical_prompt(previous), canonical_prompt(current)
        # All of the previous request but the "]]" closing its message list and itself.
        assert new.startswith(old[:-2]), "a loop request rewrote its prefix"
        assert prefix_ratio(previous, current) == (len(old) - 2) / len(new)
        assert cache_marks(current) <= MAX_CACHE_MARKS
        assert current.messages[-1].cache
        assert sum(m.cache for m in current.messages) == 1
    first = Message(role="user", parts=(TextPart(text="Find my note about the boat."),), cache=True)
    assert requests[0].messages == (first,)
    assert requests[4].messages[0] == Message.user("Find my note about the boat.")


def test_prefix_ratio() -> None:
    request = layout_request(_parts())
    assert prefix_ratio(request, request) == 1.0
    other = layout_request(_parts(tools=(GET, SEARCH)))  # the very first bytes differ
    assert prefix_ratio(request, other) < 0.05  # just '[[{"description":"' in common
    grown = layout_request(_parts(task="Find my note about the boat, and the sails."))
    ratio = prefix_ratio(request, grown)
    assert 0.9 < ratio < 1.0
    old = canonical_prompt(request)
    common = old.index(b"Find my note about the boat.") + len(b"Find my note about the boat")
    assert ratio == common / len(canonical_prompt(grown))
