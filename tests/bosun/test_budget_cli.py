"""``bosun budget SESSION``: the report of served turns, printed by a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bosun.budget_report import render_html, render_table
from bosun_demo import seed_demo
from conftest import ServerFactory
from context import (
    BudgetReport,
    Compression,
    Cut,
    SectionUsage,
    SessionBudgetReport,
    SourceUsage,
    TurnBudget,
    UsageFigures,
    UsageSummary,
)
from helpers import stream_turn
from providers import FunctionModel, Reply, ScriptedModel, TokenUsage
from turn import TurnModels

BOSUN = [sys.executable, "-m", "bosun.cli"]
PLAN = json.dumps(
    {"strategy": "simple", "reasoning": "r", "sources": [{"name": "schedule", "params": {}}]}
)


@dataclass(frozen=True)
class Served:
    session_id: str
    api_report: dict[str, Any]
    env: dict[str, str]
    cwd: Path


@pytest.fixture
async def served(make_server: ServerFactory, tmp_path: Path) -> Served:
    """Two turns served over HTTP; the database stays for the CLI to read."""
    usage = TokenUsage(input_tokens=400, output_tokens=30, cache_read_tokens=1_200)
    planner = ScriptedModel([Reply(text=PLAN, usage=usage)] * 2, name="claude-haiku-4-5")
    merger = FunctionModel(
        lambda _r: Reply(text="Yoga on Tuesday.", usage=usage), name="claude-haiku-4-5"
    )
    async with make_server(TurnModels(planner=planner, executor=merger)) as server:
        await seed_demo(server.store, "acme")
        headers = server.auth(role="owner")
        frames = await stream_turn(server.client, {"message": "what's on?"}, headers)
        session_id = frames[0].data["session_id"]
        await stream_turn(server.client, {"message": "and?", "session_id": session_id}, headers)
        report = await server.client.get(f"/v1/sessions/{session_id}/budget", headers=headers)
        url = server.settings.database_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = url
    return Served(session_id, report.json(), env, tmp_path)


def bosun(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOSUN, *args],
        env=served.env,
        cwd=served.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_is_the_api_report(served: Served) -> None:
    result = bosun(served, "budget", served.session_id, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == served.api_report
    assert [len(t["calls"]) for t in report["turns"]] == [2, 2]
    assert report["totals"]["cache_read_tokens"] == 4 * 1_200
    assert report["totals"]["cache_hit_ratio"] == 4_800 / (4_800 + 1_600)


def test_the_table_shows_sections_totals_and_usage(served: Served) -> None:
    result = bosun(served, "budget", served.session_id)
    assert result.returncode == 0, result.stderr
    table = result.stdout
    report = served.api_report
    for turn in report["turns"]:
        assert turn["turn_id"] in table
        for call in turn["calls"]:
            total_row = re.compile(
                rf"^\s+total\s+{call['total_allocated']:,}\s+{call['total_used']:,}\s", re.M
            )
            assert total_row.search(table), call
    for section in ("system", "conversation", "context", "profile", "buffer", "results"):
        assert re.search(rf"^\s+(planner|merger)?\s+{section}\s+[\d,]+\s+[\d,]+", table, re.M)
    assert "source  schedule" in table
    totals = report["totals"]
    assert table.splitlines()[-1].split() == [
        "total",
        f"{totals['input_tokens']:,}",
        f"{totals['output_tokens']:,}",
        f"{totals['cache_read_tokens']:,}",
        f"{totals['cache_write_tokens']:,}",
        f"{totals['cache_hit_ratio']:.1%}",
        f"${totals['cost_usd_micros'] / 1e6:.6f}",
    ]
    assert "what's on" not in table
    # every call's prompt (400 + 1,200 tokens) is below Haiku 4.5's minimum: said per call
    notes = re.findall(r"^  note  model call (\d) (\w+): its prompt of ([\d,]+) tokens is below "
                       r"claude-haiku-4-5's minimum cacheable length of 4,096 tokens: never "
                       r"cached$", table, re.M)  # fmt: skip
    assert notes == [("1", "planner", "1,600"), ("2", "merger", "1,600")] * 2


def test_html_draws_one_bar_chart_per_call(served: Served, tmp_path: Path) -> None:
    page = tmp_path / "budget.html"
    result = bosun(served, "budget", served.session_id, "--html", str(page))
    assert result.returncode == 0, result.stderr
    # The page instead of the table: nothing on stdout, one line on stderr says where.
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"wrote the budget report to {page}"]
    html = page.read_text(encoding="utf-8")
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html, re.S)
    calls = [c for t in served.api_report["turns"] for c in t["calls"]]
    assert len(charts) == len(calls) == 4
    for chart, call in zip(charts, calls, strict=True):
        assert call["role"] in chart
        bars = re.findall(r'<rect class="(alloc|used|over)"', chart)
        assert bars.count("alloc") == len(call["sections"])
        for s in call["sections"]:
            assert f"{s['used']:,} / {s['allocated']:,}" in chart
    lowered = html.lower()
    assert "<script" not in lowered and "http://" not in lowered and "https://" not in lowered


def test_unknown_sessions_and_missing_databases_are_reported(
    served: Served, tmp_path: Path
) -> None:
    result = bosun(served, "budget", "no-such-session")
    assert result.returncode == 1
    assert "no session 'no-such-session'" in result.stderr
    missing = tmp_path / "missing.db"
    result = bosun(
        served, "budget", served.session_id, "--database-url", f"sqlite+aiosqlite:///{missing}"
    )
    assert result.returncode == 2 and "no SQLite database" in result.stderr
    assert not missing.exists()  # a report never creates a database


def _hand_built() -> SessionBudgetReport:
    executor = BudgetReport(
        role="executor",
        step_id="s1",
        sections=(
            SectionUsage(name="system", allocated=300, used=280),
            SectionUsage(name="tools", allocated=400, used=400),
        ),
        total_allocated=700,
        total_used=680,
        cuts=(
            Cut(
                section="tools",
                action="abbreviated",
                tokens_before=2_034,
                tokens_after=400,
                detail="17 of 20 shown short: <search_notes> & more",
            ),
        ),
    )
    figures = UsageFigures(input_tokens=10, output_tokens=2, cost_usd_micros=12)
    return SessionBudgetReport(
        session_id="s",
        turns=(
            TurnBudget(
                turn_id="t1",
                started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
                status="completed",
                calls=(executor,),
                usage=UsageSummary(total=figures, by_role={"executor": figures}),
                compressed=(Compression(up_to_seq=40, summary_tokens=210),),
                sources=(SourceUsage(source="profile", tokens=0, truncated=False, error="boom"),),
            ),
        ),
    )


def test_renderers_show_steps_cuts_sources_and_compression_and_escape_text() -> None:
    report = _hand_built()
    table = render_table(report)
    assert "executor s1  system" in table
    assert "cut  executor s1: tools abbreviated 2,034 -> 400: 17 of 20 shown short" in table
    assert "source  profile: 0 tokens, failed: boom" in table
    assert "compressed  messages up to seq 40 (summary 210 tokens)" in table
    assert "cache hit 0.0%" in table
    html = render_html(report)
    assert "&lt;search_notes&gt; &amp; more" in html and "<search_notes>" not in html
    assert html.count('<svg class="chart"') == 1
    assert '<rect class="used"' in html and "400 / 400" in html
