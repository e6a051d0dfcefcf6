"""The writer thread's fixed SQL stores exactly what the ORM would, and reads it back the same.

If SQLAlchemy (or the schema) changed how a timestamp or a JSON value is stored on SQLite,
these fail before any query comparing stored text (retention cut-offs, ordering) does.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.dialects import sqlite

from conftest import migrate
from events import TextDelta, event_data
from store import DaySpend, Store, StoredEvent, UsageRecord
from store import _hot as hot
from store._appends import _built
from store._models import EventRow, ToolExecutionRow, UsageRow
from store._tool_executions import _COLUMNS
from store._usage_models import DailySpendRow, DailyUsageRow

DIALECT = sqlite.dialect()


def test_timestamps_and_json_are_stored_as_the_orm_stores_them() -> None:
    stamp = EventRow.__table__.c.created_at.type._cached_bind_processor(DIALECT)
    as_json = EventRow.__table__.c.data.type._cached_bind_processor(DIALECT)
    assert stamp is not None and as_json is not None
    for moment in (
        datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5))),  # converted to UTC
    ):
        assert hot.stamp(moment) == stamp(moment)
    value = {"b": [1, 2.5, None], "a": "é", "nested": {"ok": True}}
    assert hot.json_text(value) == as_json(value)


def test_the_finish_statement_returns_the_repository_columns() -> None:
    assert tuple(c.name for c in _COLUMNS) == hot.EXECUTION_COLUMNS
    assert hot._FINISH.endswith(", ".join(hot.EXECUTION_COLUMNS))
    assert set(hot.EXECUTION_COLUMNS) == {c.name for c in ToolExecutionRow.__table__.columns}


async def test_what_the_writer_writes_the_orm_reads_back(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hot.db'}"
    await migrate(url, demo=False)
    store = Store(url)
    try:
        await store.sessions.create(org_id="acme", user_id="ada", session_id="s1", title=None)
        stored = await store.log.append("s1", [TextDelta(delta="héllo")], turn_id="t1")
        assert (
            await store.tool_executions.start(
                tool_use_id="tu_1", session_id="s1", turn_id="t1", tool="x", input={"a": [1]}
            )
            is None
        )
        finished = await store.tool_executions.finish(
            "tu_1", turn_id="t1", status="succeeded", output={"v": "ok"}, inverse=None
        )
        read = await store.log.read("s1")
        row = await store.tool_executions.get("tu_1", turn_id="t1")
    finally:
        await store.close()
    assert [(e.seq, e.data, e.created_at) for e in read] == [
        (s.seq, s.data, s.created_at) for s in stored
    ]
    assert row == finished and row is not None
    assert (row.input, row.output, row.inverse, row.status) == ({"a": [1]}, {"v": "ok"}, None,
                                                                "succeeded")  # fmt: skip
    assert row.created_at.tzinfo is UTC and row.completed_at is not None


def test_days_are_stored_as_the_orm_stores_them() -> None:
    as_day = DailySpendRow.__table__.c.day.type._cached_bind_processor(DIALECT)
    day = date(2026, 11, 24)
    assert (as_day(day) if as_day is not None else day) == day.isoformat()


async def test_a_settle_on_the_writer_counts_everywhere(db_url: str) -> None:
    """Fixed SQL on both writers (store/_hot.py, store/_hot_pg.py): a call's usage row, the
    user's and the org's day; a dry run's (``per_call=False``) in the days only."""
    url = db_url
    await migrate(url, demo=False)
    store = Store(url)
    day = date(2026, 11, 24)

    def usage(cost: int) -> UsageRecord:
        return UsageRecord(
            session_id="s1", turn_id="t1", org_id="acme", user_id="ada", role="executor",
            model="m", input_tokens=10, output_tokens=2, cache_read_tokens=3,
            cache_write_tokens=4, cost_usd_micros=cost,
        )  # fmt: skip

    try:
        await store.sessions.create(org_id="acme", user_id="ada", session_id="s1", title=None)
        free = await store.spend.settle(usage(0), day=day)
        await store.spend.reserve("acme", day, 500, 10_000)
        priced = await store.spend.settle(usage(300), day=day, reserved=500)
        dry_free = await store.spend.settle(usage(0), day=day, per_call=False)
        dry = await store.spend.settle(usage(100), day=day, per_call=False)
        today = await store.spend.today("acme", day)
        async with store.db.read() as conn:
            rows = (await conn.execute(select(UsageRow.cost_usd_micros))).scalars().all()
            daily = (
                await conn.execute(
                    select(
                        DailyUsageRow.day, DailyUsageRow.calls, DailyUsageRow.input_tokens,
                        DailyUsageRow.cache_write_tokens, DailyUsageRow.cost_usd_micros,
                    )
                )
            ).one()  # fmt: skip
    finally:
        await store.close()
    assert free is None and priced == DaySpend(300, 0)
    assert dry_free is None and dry == today == DaySpend(400, 0)
    assert sorted(rows) == [0, 300]
    assert tuple(daily) == (day, 4, 40, 16, 400)


@given(
    st.one_of(
        st.dictionaries(st.text(), st.text(), max_size=4),
        st.dictionaries(st.text(), st.one_of(st.none(), st.integers(), st.text()), max_size=4),
    )
)
def test_compact_json_is_the_text_json_dumps_gives(data: dict[str, object]) -> None:
    """The writer's direct encoding of a dict of strings (every ``text_delta``) is byte for
    byte what ``json.dumps`` gives, so a frame built from either is the same."""
    assert hot.compact_json(data) == json.dumps(data, separators=(",", ":"), ensure_ascii=False)


@given(st.text(), st.one_of(st.none(), st.text(min_size=1)))
def test_an_answers_text_delta_row_is_the_generic_one(delta: str, step_id: str | None) -> None:
    """The writer builds a ``text_delta``'s data and JSON text directly; both are what the
    generic path (``event_data``, then ``json.dumps``) gives, with or without a step."""
    event = TextDelta(delta=delta, step_id=step_id)
    data, text = hot.event_row(event)
    assert data == event_data(event)
    assert list(data) == list(event_data(event))  # the same key order: the same text
    assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def test_the_writers_stored_events_are_the_dataclasss_own() -> None:
    """The writer thread builds its ``StoredEvent``s slot by slot; each is the one the
    dataclass's constructor makes, every field (the JSON text too) in its place."""
    row = ("s1", 7, "text_delta", {"delta": "hi", "type": "text_delta"}, "t1",
           datetime(2026, 1, 2, tzinfo=UTC), '{"delta":"hi","type":"text_delta"}')  # fmt: skip
    built = _built([row, row])
    expected = StoredEvent(*row)
    assert built == [expected, expected]
    assert [(e.text, repr(e)) for e in built] == [(expected.text, repr(expected))] * 2


async def test_a_batch_longer_than_one_insert_is_stored_whole_and_in_order(
    tmp_path: Path,
) -> None:
    """The writer inserts a batch's events ``ROWS_PER_INSERT`` rows to a statement; a batch
    of more keeps every event, numbered in order, with its data and JSON text."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'long.db'}"
    await migrate(url)
    store = Store(url)
    count = 2 * hot.ROWS_PER_INSERT + 1
    try:
        await store.sessions.create(org_id="acme", user_id="u1", session_id="s1", title=None)
        events = [TextDelta(delta=f"piece {i} é") for i in range(count)]
        stored = await store.log.append("s1", events)
        read = await store.log.read("s1")
    finally:
        await store.close()
    assert [e.seq for e in stored] == [e.seq for e in read] == list(range(1, count + 1))
    assert [e.data for e in read] == [
        {"delta": f"piece {i} é", "type": "text_delta"} for i in range(count)
    ]
    assert [e.text for e in stored] == [
        json.dumps(e.data, separators=(",", ":"), ensure_ascii=False) for e in read
    ]
