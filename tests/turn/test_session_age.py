"""A turn's cost does not grow with its session's age: it reads the log from the latest
compaction anchor on (plus the knowledge before it), never the whole log."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from context import history
from events import ContextLoaded, Done, UserMessage
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import Store, StoredEvent
from store._models import TurnRow
from tools import ToolContext, ToolRegistry
from turn import Turn, TurnKit, run_turn

ORG = "acme"
PLAN = {
    "strategy": "tool",
    "reasoning": "read",
    "steps": [{"id": "s1", "goal": "Read the clock", "tools": ["clock.now"], "max_tool_calls": 2}],
}
CHAT = {"strategy": "simple", "reasoning": "chat"}  # even turns: answered from the history
TURNS = 32  # compaction starts at turn 13 and runs about every 9 turns after it


class Nothing(BaseModel):
    pass


class Clock(BaseModel):
    time: str


def registry() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(name="clock.now", summary="The studio's clock.", category="read")
    async def now(_args: Nothing, _ctx: ToolContext) -> Clock:
        return Clock(time="09:00")

    return tools


def model() -> FunctionModel:
    """Plans one clock read (odd turns) or a plain answer (even); the executor reads the
    clock, then answers."""

    async def reply(request: ModelRequest) -> Reply:
        if any("You are the planner" in b.text for b in request.system):
            turn = int(re.findall(r"\((\d+)\)", request.messages[-1].text)[-1])
            return Reply(text=json.dumps(CHAT if turn % 2 == 0 else PLAN))
        if request.messages[-1].role == "user" and not any(
            isinstance(p, ToolCall) for m in request.messages for p in m.parts
        ):
            return Reply(tool_calls=(ToolCall(id=uuid.uuid4().hex, name="clock_now", input={}),))
        return Reply(text="It is 09:00 at the studio, as every day this week.")

    return FunctionModel(reply, name="claude-haiku-4-5")


def summariser() -> FunctionModel:
    return FunctionModel(lambda _r: "The user keeps asking the time.", name="claude-haiku-4-5")


def count_reads(store: Store) -> list[list[StoredEvent]]:
    """Every batch of events the store's log hands out from now on (any read method)."""
    batches: list[list[StoredEvent]] = []
    for name in ("read", "read_context"):
        method = getattr(store.log, name, None)
        if method is None:
            continue

        def counted(
            *args: Any, _method: Callable[..., Awaitable[list[StoredEvent]]] = method, **kw: Any
        ) -> Awaitable[list[StoredEvent]]:
            async def run() -> list[StoredEvent]:
                events = await _method(*args, **kw)
                batches.append(events)
                return events

            return run()

        setattr(store.log, name, counted)
    return batches


async def play(store: Store, session_id: str, n: int, batches: list[list[StoredEvent]]) -> int:
    """Turn ``n`` of the session; the number of events it read."""
    turn_id = str(uuid.uuid4())
    text = f"What time is it now? ({n})"
    await store.log.open_turn(
        session_id, [UserMessage(message_id=f"m{n}", text=text)], turn_id=turn_id, trace_id="t"
    )
    turn = Turn(
        session_id=session_id, turn_id=turn_id, trace_id="t", org_id=ORG, user_id="ada",
        role="owner", message_id=f"m{n}", text=text, model=model(), planner=model(),
        summariser=summariser(),
    )  # fmt: skip
    batches.clear()
    assert await run_turn(store, turn, TurnKit(tools=registry())) == "completed"
    return sum(len(batch) for batch in batches)


async def test_a_turn_reads_from_the_compaction_anchor_not_the_whole_log(store: Store) -> None:
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    knowledge = ContextLoaded(source="faq", tokens=5, truncated=False, text="Opens at 06:00.")
    await store.log.append(session_id, [knowledge])
    batches = count_reads(store)

    read = [await play(store, session_id, n, batches) for n in range(1, TURNS + 1)]

    log = await store.log.read(session_id)
    summaries = [e for e in log if e.type == "history_summarised"]
    assert len(summaries) >= 2, "the session was never compacted twice"
    before = [r for r, n in zip(read, range(1, TURNS + 1), strict=True) if n <= 13]
    assert log[-1].seq > 2 * max(before)  # the log outgrew what any turn reads
    late = read[-9:]  # one compaction cycle, all of it after the first anchor
    assert max(late) <= max(before) + 12, read  # + the anchor and a turn of slack
    assert_compressed_cut_counts_everything(log)


def assert_compressed_cut_counts_everything(log: list[StoredEvent]) -> None:
    """The budget report's ``compressed`` cut still counts every message the summary
    stands for (read from the summary event, not from the messages before it)."""
    cuts = [
        cut
        for e in log
        if e.type == "context_budget"
        for cut in e.data["report"].get("cuts", [])
        if cut["action"] == "compressed"
    ]
    assert cuts, "no call reported the compressed history"
    found = re.fullmatch(r"(\d+) messages up to seq (\d+) summarised", cuts[-1]["detail"])
    assert found is not None, cuts[-1]
    count, up_to = int(found[1]), int(found[2])
    covered = [e for e in log if e.seq <= up_to and e.type != "history_summarised"]
    assert count == len(history(covered).entries)  # the native messages it stands for
    assert cuts[-1]["tokens_before"] > cuts[-1]["tokens_after"] > 0


@pytest.mark.parametrize("anchored", [False, True])
async def test_the_context_read_keeps_knowledge_and_the_tail(store: Store, anchored: bool) -> None:
    """``read_context``: the latest anchor, the events after its ``up_to_seq`` and every
    ``context_loaded`` before it, in seq order."""
    from events import HistorySummarised, TextDelta

    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    loaded = ContextLoaded(source="faq", tokens=5, truncated=False, text="Opens at 06:00.")
    await store.log.append(session_id, [loaded, *[TextDelta(delta="x")] * 10])  # seqs 1-11
    await store.log.append(session_id, [HistorySummarised(summary="old", up_to_seq=4)])  # 12
    await store.log.append(session_id, [TextDelta(delta="y")] * 3)  # 13-15
    if anchored:
        await store.log.append(session_id, [HistorySummarised(summary="new", up_to_seq=13)])

    events = await store.log.read_context(session_id)

    seqs = [e.seq for e in events]
    assert seqs == ([1, 14, 15, 16] if anchored else [1, *range(5, 16)])
    assert events[0].type == "context_loaded"


async def test_a_message_looks_up_only_the_latest_turn(store: Store) -> None:
    """Whether a message answers a suspended turn is asked of the session's latest turn by
    index, never by listing every turn of the session."""
    from stream._questions import waiting_turn

    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    assert await store.sessions.latest_turn(session_id) is None
    ids = [str(uuid.uuid4()) for _ in range(3)]
    for n, turn_id in enumerate(ids):
        message = UserMessage(message_id=f"m{n}", text="hi")
        await store.log.open_turn(session_id, [message], turn_id=turn_id, trace_id="t")
        if turn_id != ids[-1]:  # one running turn per session: the earlier ones ended
            done = Done(session_id=session_id, status="completed")
            await store.log.append(session_id, [done], turn_id=turn_id, finish="completed")

    def listed(_session_id: str) -> None:
        raise AssertionError("every turn of the session was listed")

    store.sessions.turns = listed  # type: ignore[method-assign,assignment]
    latest = await store.sessions.latest_turn(session_id)
    assert latest is not None and latest.id == ids[-1]
    assert await waiting_turn(store, session_id) is None  # running, not suspended


async def test_a_turn_s_events_are_read_from_its_first_event(store: Store) -> None:
    """``read(turn_id=...)`` starts at the turn's first seq (kept on its row), so reading
    one turn of an old session does not scan the session from its start."""
    from events import TextDelta

    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    await store.log.append(session_id, [TextDelta(delta="old")] * 50)
    turn_id = str(uuid.uuid4())
    opened, _ = await store.log.open_turn(
        session_id, [UserMessage(message_id="m", text="hi")], turn_id=turn_id, trace_id="t"
    )
    await store.log.append(session_id, [TextDelta(delta="new")], turn_id=turn_id)
    async with store.db.read() as conn:
        first = await conn.scalar(select(TurnRow.first_seq).where(TurnRow.id == turn_id))
    assert first == opened[0].seq == 51

    events = await store.log.read(session_id, turn_id=turn_id)

    assert [(e.seq, e.type) for e in events] == [(51, "user_message"), (52, "text_delta")]
    assert [e.seq for e in await store.log.read(session_id, turn_id=turn_id, after=51)] == [52]
