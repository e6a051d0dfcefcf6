"""``bosun plan``: dry runs and evaluations from the terminal, with scripted planners."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bosun import plan_cli
from bosun.cli_args import build_parser
from bosun.settings import Settings
from conftest import DEMO

ROOT = Path(__file__).resolve().parents[2]
BOSUN = [sys.executable, "-m", "bosun.cli"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    clean["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'never-created.db'}"
    clean["BOSUN_TOOLSETS"] = f'["{DEMO}"]'  # plans against the demo studio's tools
    return clean


def bosun(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOSUN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_dry_run_prints_the_plan_as_json(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "planner.yaml"
    plan = {
        "strategy": "tool",
        "reasoning": "One lookup.",
        "sources": [{"name": "schedule", "params": {"days_ahead": 7}}],
        "steps": [
            {"id": "s1", "goal": "find Sam", "tools": ["members.search"], "max_tool_calls": 2}
        ],
    }
    script.write_text(json.dumps([{"text": json.dumps(plan), "usage": {"input_tokens": 900}}]))
    result = bosun(
        "plan", "find Sam", "--model", f"scripted:{script}", "--json", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["plan"]["steps"][0]["tools"] == ["members.search"]
    assert body["context"]["sources"][0]["action"] == "load"
    assert body["estimate"]["model_calls"] == 3
    assert body["usage"]["input_tokens"] == 900
    assert not (tmp_path / "never-created.db").exists()  # a dry run opens no database

    table = bosun("plan", "find Sam", "--model", f"scripted:{script}", env=env, cwd=tmp_path)
    assert "strategy   tool" in table.stdout
    assert "step s1" in table.stdout and "[members.search]" in table.stdout


def test_eval_on_the_shipped_set_prints_metrics_and_writes_html(
    env: dict[str, str], tmp_path: Path
) -> None:
    baseline = ROOT / "examples" / "plan-baseline.yaml"
    cases = ROOT / "examples" / "plan-eval.jsonl"
    out = tmp_path / "report.html"
    result = bosun(
        "plan",
        "--eval",
        str(cases),
        "--model",
        f"scripted:{baseline}",
        "--out",
        str(out),
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "strategy accuracy  20.8%" in result.stdout  # the always-simple floor: 5 of 24
    # It planned no tool at all: no precision to show (not 100%), recall 0.
    assert "tool precision     n/a (no tools planned)   recall 0.0%" in result.stdout
    # stderr is a pipe here, as in a log: one progress line at the end, no \r frames.
    assert "\r" not in result.stderr and "planned 24/24 cases" in result.stderr
    assert "<h1>Planner eval</h1>" in out.read_text()
    as_json = bosun(
        "plan",
        "--eval",
        str(cases),
        "--model",
        f"scripted:{baseline}",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    summary = json.loads(as_json.stdout)
    assert summary["cases"] == 24
    assert summary["confusion"]["complex"]["simple"] == 6
    assert (summary["tool_precision"], summary["tool_recall"]) == (None, 0.0)
    assert summary["unoffered_tools"] == []  # every labelled tool is the demo's


def test_eval_ignores_unknown_fields_and_names_tools_the_catalogue_lacks(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A set with its own bookkeeping fields loads; a labelled tool no toolset offers is
    named on stderr and in the report, so its recall of 0 is not read as the planner's."""
    cases = tmp_path / "cases.jsonl"
    lines = [
        {"id": 1, "message": "find Sam", "strategy": "tool", "tools": ["members.search"],
         "note": "from the support queue"},
        {"id": 2, "message": "book the sauna", "strategy": "tool", "tools": ["sauna.book"],
         "history": [{"role": "user", "text": "hi", "at": "09:00"}]},
    ]  # fmt: skip
    cases.write_text("".join(json.dumps(line) + "\n" for line in lines))
    plan = {
        "strategy": "tool", "reasoning": "r",
        "steps": [{"id": "s1", "goal": "g", "tools": ["members.search"]}],
    }  # fmt: skip
    script = tmp_path / "planner.yaml"
    script.write_text(json.dumps({"steps": [{"text": json.dumps(plan)}], "repeat": True}))
    args = ("plan", "--eval", str(cases), "--model", f"scripted:{script}", "--concurrency", "1")
    table = bosun(*args, env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert f"note: {cases}: ignoring unknown fields history.at, id, note" in table.stderr
    assert table.stderr.count("ignoring unknown fields") == 1
    assert "catalogue lacks (their recall is 0 whatever the planner does): sauna.book" in (
        table.stderr
    )
    assert "tool precision     50.0%   recall 50.0%" in table.stdout
    assert "not offered        sauna.book (labelled, but the served catalogue" in table.stdout
    as_json = json.loads(bosun(*args, "--json", env=env, cwd=tmp_path).stdout)
    assert as_json["unoffered_tools"] == ["sauna.book"]


def test_plan_needs_a_model_and_exactly_one_of_message_or_eval(
    env: dict[str, str], tmp_path: Path
) -> None:
    no_model = bosun("plan", "hello", env=env, cwd=tmp_path)
    assert no_model.returncode == 2 and "--model" in no_model.stderr
    neither = bosun("plan", "--model", "scripted:x.yaml", env=env, cwd=tmp_path)
    assert neither.returncode == 2 and "--eval" in neither.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_eval_progress_is_redrawn_in_place_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the bar is redrawn with ``\\r`` (the pipe case, one line, is above)."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"message": "hi", "strategy": "simple"}\n' * 3)
    script = tmp_path / "planner.yaml"
    script.write_text(json.dumps({"steps": [{"text": '{"strategy": "simple", "reasoning": "r"}'}],
                                  "repeat": True}))  # fmt: skip
    args = build_parser().parse_args(
        ["plan", "--eval", str(cases), "--model", f"scripted:{script}", "--concurrency", "1"]
    )
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert plan_cli.run(args, settings) == 0
    frames = terminal.getvalue()
    assert frames.count("\r[") == 3 and frames.endswith("] 3/3\n")
    assert "planned 3/3 cases" not in frames
