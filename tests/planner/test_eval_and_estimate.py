"""The planner's evaluation metrics and the dry-run cost estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import Catalogue, Plan, PlannedStep, Planning, PlanOutcome, make_plan
from planner._estimate import estimate_execution
from planner._eval import EvalCase, load_cases, render_html, render_table, run_eval
from providers import FunctionModel, ModelRequest, Reply, TokenUsage

CATALOGUE = Catalogue(
    tools={"members.search": "members.search: find", "tasks.create": "tasks.create: add"},
    read_tools=["members.search"],
)
PLANNING = Planning(catalogue=CATALOGUE)


def keyword_planner(request: ModelRequest) -> Reply:
    """Plans by keyword, so the metrics have something known to measure."""
    text = request.messages[-1].text
    if "find" in text:
        plan = {
            "strategy": "tool",
            "reasoning": "r",
            "steps": [{"id": "s1", "goal": "g", "tools": ["members.search"]}],
        }
    else:
        plan = {"strategy": "simple", "reasoning": "r"}
    return Reply(text=json.dumps(plan), usage=TokenUsage(input_tokens=1_000, output_tokens=100))


async def test_eval_reports_accuracy_confusion_tools_cost_and_latency(tmp_path: Path) -> None:
    cases_file = tmp_path / "cases.jsonl"
    cases_file.write_text(
        "\n".join(
            json.dumps(case)
            for case in [
                {"message": "hello", "strategy": "simple"},
                {"message": "find Sam", "strategy": "tool", "tools": ["members.search"]},
                {
                    "message": "find Sam and add a task",
                    "strategy": "complex",
                    "tools": ["members.search", "tasks.create"],
                },
                {
                    "message": "thanks",
                    "strategy": "simple",
                    "history": [{"role": "user", "text": "hi"}],
                },
            ]
        )
        + "\n"
    )
    cases = load_cases(cases_file)
    model = FunctionModel(keyword_planner, name="anthropic:claude-haiku-4-5")
    seen: list[tuple[int, int]] = []

    async def plan(case: EvalCase) -> PlanOutcome:
        return await make_plan(model, case.message, PLANNING)

    report = await run_eval(cases, plan, concurrency=2, progress=lambda d, t: seen.append((d, t)))
    summary = report.summary()
    assert summary["strategy_accuracy"] == 0.75
    assert summary["confusion"]["complex"] == {"simple": 0, "tool": 1, "complex": 0}
    assert summary["confusion"]["simple"]["simple"] == 2
    assert (summary["tool_precision"], summary["tool_recall"]) == (1.0, 0.6667)
    assert summary["cost_usd_micros"] == 4 * (1_000 * 1 + 100 * 5)  # Haiku: $1 / $5 per MTok
    assert set(summary["latency_ms"]) == {"p50", "p90", "p99"}
    assert seen[-1] == (4, 4)
    assert "strategy accuracy  75.0%" in render_table(report)
    html = render_html(report)
    assert "<h1>Planner eval</h1>" in html and "find Sam and add a task" in html
    assert json.loads(json.dumps(report.to_json()))["results"][2]["predicted"] == "tool"


async def test_no_tool_planned_is_no_precision_and_unoffered_tools_are_reported() -> None:
    """A planner that chose no tool has no precision (not 100%); a labelled tool the
    catalogue lacks is named in every rendering."""
    cases = [
        EvalCase(message="hello", strategy="simple"),
        EvalCase(message="book", strategy="tool", tools=["sauna.book"]),
    ]
    model = FunctionModel(keyword_planner, name="anthropic:claude-haiku-4-5")

    async def plan(case: EvalCase) -> PlanOutcome:
        return await make_plan(model, case.message, PLANNING)

    report = await run_eval(cases, plan, offered=CATALOGUE.tools)
    summary = report.summary()
    assert (summary["tool_precision"], summary["tool_recall"]) == (None, 0.0)
    assert summary["unoffered_tools"] == ["sauna.book"]
    table = render_table(report)
    assert "tool precision     n/a (no tools planned)   recall 0.0%" in table
    assert "not offered        sauna.book" in table
    html = render_html(report)
    assert "tool precision n/a (no tools planned)" in html and "sauna.book</li>" in html
    unlabelled = await run_eval(cases[:1], plan)
    assert "recall n/a (no tools labelled)" in render_table(unlabelled)


def test_a_bad_case_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"message": "ok", "strategy": "simple"}\n{"message": "x", "strategy": "big"}\n'
    )
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_cases(path)


def test_estimate_counts_every_call_of_the_plan() -> None:
    plan = Plan(
        strategy="complex",
        reasoning="r",
        steps=[
            PlannedStep(id="s1", goal="a", tools=["members.search"], max_tool_calls=2),
            PlannedStep(id="s2", goal="b", tools=["tasks.create"], max_tool_calls=1),
        ],
    )
    estimate = estimate_execution(
        plan,
        executor_model="claude-haiku-4-5",
        merger_model="claude-haiku-4-5",
        executor_input_tokens=1_500,
        merger_input_tokens=1_000,
    )
    # s1: 3 calls of 1,500/1,700/1,900 input; s2: 2 calls of 1,500/1,700; merge: 1,000 + 2 x 150
    assert estimate.model_calls == 6
    assert estimate.input_tokens == 5_100 + 3_200 + 1_300
    assert estimate.output_tokens == 5 * 200 + 500
    # Haiku: $1 in / $5 out per million tokens; executors 8,300 in / 1,000 out, merge 1,300 / 500
    assert estimate.cost_usd_micros == (8_300 + 1_300) * 1 + (1_000 + 500) * 5
