"""Fitting sections: abbreviate, then drop or truncate, record every cut; the report."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import asdict, replace

import pytest
from pydantic import ValidationError

from context import (
    EXECUTOR_BUDGET,
    BudgetReport,
    Cut,
    Item,
    SectionFill,
    TokenCounter,
    afit_section,
    fit_section,
    fit_text,
)

EXACT = TokenCounter()
CLAUDE = TokenCounter("anthropic:claude-haiku-4-5")


def _items(count: int, words: int = 200) -> list[Item]:
    return [
        Item(full=f"item {i}: " + "detail " * words, short=f"item {i}: summary", key=f"k{i}")
        for i in range(count)
    ]


def test_content_that_fits_is_left_alone() -> None:
    items = _items(3, words=5)
    fill = fit_section("data", 500, items, counter=EXACT, note="never shown")
    text = "\n\n".join(i.full for i in items)
    assert fill == SectionFill(
        name="data",
        allocated=500,
        used=EXACT.count(text),
        text=text,
        items=tuple(i.full for i in items),
        kept=(0, 1, 2),
        forms=("full", "full", "full"),
        cuts=(),
    )


def test_over_budget_items_are_abbreviated_from_the_least_important_end() -> None:
    items = _items(10)
    fill = fit_section("tools", 700, items, counter=EXACT, note="Call describe_tool(name).")
    assert fill.used <= 700
    assert fill.text.startswith("Call describe_tool(name).")
    assert fill.kept == tuple(range(10))
    short = [i for i, form in zip(fill.kept, fill.forms, strict=True) if form == "short"]
    assert short == list(range(10 - len(short), 10))  # the last ones went short first
    assert 0 < len(short) < 10
    assert [(c.action, c.section) for c in fill.cuts] == [("abbreviated", "tools")]
    cut = fill.cuts[0]
    assert cut.tokens_before == EXACT.count("\n\n".join(i.full for i in items))
    assert cut.tokens_after == fill.used
    assert cut.detail.startswith(f"{len(short)} of 10 shown short: k9, k8") or "k" in cut.detail


def test_items_are_dropped_when_abbreviation_is_not_enough() -> None:
    items = _items(30)
    fill = fit_section("tools", 60, items, counter=EXACT, note="Drill down with detail().")
    assert fill.used <= 60
    assert fill.text.endswith("more omitted]")
    assert fill.kept == tuple(range(len(fill.kept)))  # the first (most important) survive
    assert set(fill.forms) == {"short"}
    actions = [c.action for c in fill.cuts]
    assert actions == ["abbreviated", "dropped"]
    abbreviated, dropped = fill.cuts
    assert abbreviated.tokens_after == dropped.tokens_before  # one chain of numbers
    assert dropped.tokens_after == fill.used
    assert dropped.detail.startswith(f"{30 - len(fill.kept)} of 30 dropped: k29, k28")


def test_drop_from_start_and_verbatim_protect_the_newest() -> None:
    items = _items(12)
    fill = fit_section(
        "conversation",
        430,
        items,
        counter=EXACT,
        drop_from="start",
        verbatim=2,
        omitted="[{count}]",
    )
    assert fill.used <= 430
    assert 2 < len(fill.kept) < 12
    assert fill.kept[-2:] == (10, 11)
    assert fill.forms[-2:] == ("full", "full")
    assert fill.text.startswith(f"[{12 - len(fill.kept)}]")


def test_dropping_is_kept_to_the_minimum() -> None:
    # Shown short, 9 of the 10 items fit; a fitter that abbreviated and then dropped the
    # abbreviated ones would keep fewer.
    items = _items(10)
    allocation = EXACT.count("\n\n".join([*(i.short or "" for i in items[:9]), "[-1]"]))
    assert EXACT.count("\n\n".join(i.short or "" for i in items)) > allocation
    fill = fit_section("x", allocation, items, counter=EXACT, omitted="[-{count}]")
    assert fill.kept == tuple(range(9))
    assert set(fill.forms) == {"short"}


def test_one_oversize_text_is_cut_at_a_token_boundary_with_a_marker() -> None:
    text = "The system prompt says many things. " * 400
    fill = fit_text("system", 300, text, counter=CLAUDE)
    assert fill.used <= 300
    head, marker = fill.text.rsplit("\n", 1)
    assert text.startswith(head)
    removed = CLAUDE.count(text) - CLAUDE.count(head)
    assert marker == f"[… truncated {removed:,} tokens]"
    assert fill.forms == ("truncated",)
    (cut,) = fill.cuts
    assert cut == Cut(
        section="system",
        action="truncated",
        tokens_before=CLAUDE.count(text),
        tokens_after=fill.used,
        detail=f"system cut from {CLAUDE.count(text):,} to {fill.used:,} tokens",
    )


def test_a_section_too_small_for_anything_stays_empty() -> None:
    for allocation in (0, 1, 3):
        fill = fit_section("x", allocation, _items(4), counter=CLAUDE, note="A long note " * 5)
        assert fill.used == 0
        assert fill.text == ""
        assert fill.kept == ()
        assert fill.cuts


_WORDS = ["ahoy", "ship", " ", "\n", "1234", "日本語", "🚢", "é", ",", "bosun", "x" * 30]


def _random_text(rng: random.Random) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(0, 600)))


@pytest.mark.parametrize("counter", [EXACT, CLAUDE], ids=["exact", "claude"])
def test_used_never_exceeds_the_allocation_on_random_inputs(counter: TokenCounter) -> None:
    rng = random.Random(20_240_611)
    for _ in range(250):
        items = [
            Item(
                full=_random_text(rng),
                short=_random_text(rng)[:80] if rng.random() < 0.6 else None,
                key=f"i{n}",
            )
            for n in range(rng.randint(0, 25))
        ]
        allocation = rng.choice([0, 1, 5, 20, 100, 400, 1_000, 3_000])
        fill = fit_section(
            "s",
            allocation,
            items,
            counter=counter,
            note=rng.choice(["", "Call detail(name) for more."]),
            drop_from=rng.choice(["start", "end"]),
            verbatim=rng.randint(0, 3),
        )
        assert fill.used <= allocation
        assert fill.used == (counter.count(fill.text) if fill.text else 0)
        assert len(fill.kept) == len(fill.items) == len(fill.forms)
        assert list(fill.kept) == sorted(fill.kept)
        assert all(cut.section == "s" for cut in fill.cuts)
        if not fill.cuts:
            assert fill.items == tuple(i.full for i in items)
        for index, text, form in zip(fill.kept, fill.items, fill.forms, strict=True):
            if form == "full":
                assert text == items[index].full
            elif form == "short":
                assert text == items[index].short


async def test_afit_section_moves_large_inputs_to_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Callable[[], SectionFill]] = []
    real = asyncio.to_thread

    async def to_thread(fn: Callable[[], SectionFill], /) -> SectionFill:
        calls.append(fn)
        return await real(fn)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    small = await afit_section("x", 100, _items(2, words=3), counter=EXACT)
    assert calls == []
    big_items = _items(40, words=300)
    big = await afit_section("x", 500, big_items, counter=EXACT)
    assert len(calls) == 1
    assert big == fit_section("x", 500, big_items, counter=EXACT)
    assert small.cuts == ()


def test_budget_report_json_round_trip() -> None:
    system = fit_text("system", 300, "You are an executor. " * 100, counter=EXACT)
    tools = fit_section("tools", 400, _items(20, words=60), counter=EXACT, note="Drill down.")
    budget = EXECUTOR_BUDGET.with_tokens({"tools": 400})
    report = BudgetReport.build(budget, [system, tools], step_id="s1")
    assert report.within_budget
    data = json.loads(report.to_json())
    assert data == {
        "role": "executor",
        "step_id": "s1",
        "sections": [
            {"name": "system", "allocated": 300, "used": system.used},
            {"name": "task", "allocated": 200, "used": 0},
            {"name": "tools", "allocated": 400, "used": tools.used},
            {"name": "knowledge", "allocated": 4_000, "used": 0},
            {"name": "data", "allocated": 400, "used": 0},
            {"name": "buffer", "allocated": 200, "used": 0},
        ],
        "total_allocated": budget.total,
        "total_used": system.used + tools.used,
        "cuts": [
            {
                "section": c.section,
                "action": c.action,
                "tokens_before": c.tokens_before,
                "tokens_after": c.tokens_after,
                "detail": c.detail,
            }
            for c in (*system.cuts, *tools.cuts)
        ],
    }
    assert BudgetReport.from_dict(data) == report
    with pytest.raises(ValidationError):
        BudgetReport.from_dict({**data, "cuts": [{**data["cuts"][0], "action": "deleted"}]})


def test_budget_report_to_dict_is_asdicts_shape() -> None:
    """``to_dict`` is written out for speed; it gives what ``asdict`` gives, in the same key
    order (so the stored JSON is unchanged), cuts and step included."""
    system = fit_text("system", 300, "You are an executor. " * 100, counter=EXACT)
    tools = fit_section("tools", 400, _items(20, words=60), counter=EXACT, note="Drill down.")
    report = BudgetReport.build(EXECUTOR_BUDGET.with_tokens({"tools": 400}), [system, tools])
    assert report.cuts
    for one in (report, replace(report, step_id="s1")):
        assert one.to_dict() == asdict(one)
        assert json.dumps(one.to_dict()) == json.dumps(asdict(one))


def test_budget_report_refuses_fills_of_another_role() -> None:
    stray = fit_text("conversation", 100, "hello", counter=EXACT)
    with pytest.raises(ValueError, match=r"\['conversation'\] are not sections of the executor"):
        BudgetReport.build(EXECUTOR_BUDGET, [stray])
