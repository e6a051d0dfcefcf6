"""``bosun plan``: dry runs and evaluations from the terminal, with scripted planners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "24/24" in result.stderr
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


def test_plan_needs_a_model_and_exactly_one_of_message_or_eval(
    env: dict[str, str], tmp_path: Path
) -> None:
    no_model = bosun("plan", "hello", env=env, cwd=tmp_path)
    assert no_model.returncode == 2 and "--model" in no_model.stderr
    neither = bosun("plan", "--model", "scripted:x.yaml", env=env, cwd=tmp_path)
    assert neither.returncode == 2 and "--eval" in neither.stderr
