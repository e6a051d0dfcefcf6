"""Every setting documented: docs/settings.md's table is generated from the settings
model, and this fails when it differs or when a setting has no description; ``bosun
config`` says what each setting is here and where that came from, secrets masked."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import structlog
from pydantic import Field

from bosun.cli import main
from bosun.settings import ExecutorSettings, Settings
from bosun.settings_doc import DOC_PATH, markdown, rows, undocumented, with_table

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / DOC_PATH
REGENERATE = "PYTHONPATH=src python -m bosun.settings_doc"


class _Knobbed(ExecutorSettings):
    new_knob: int = 3  # a setting added without a description


class _Extended(Settings):
    executor: _Knobbed = Field(default_factory=_Knobbed)


def test_every_setting_has_a_description() -> None:
    assert undocumented() == [], "give each setting's Field a description, then " + REGENERATE


def test_the_settings_table_in_the_docs_is_current() -> None:
    document = DOC.read_text(encoding="utf-8")
    assert with_table(document, markdown()) == document, f"{DOC_PATH} is stale: run {REGENERATE}"


def test_a_setting_added_without_a_description_fails_both_checks() -> None:
    document = DOC.read_text(encoding="utf-8")

    assert undocumented(_Extended) == ["executor.new_knob"]
    assert with_table(document, markdown(_Extended)) != document


def test_the_table_names_each_setting_with_its_env_variable_default_and_meaning() -> None:
    row = next(r for r in rows() if r.name == "executor.max_model_turns")
    assert (row.env, row.default) == ("BOSUN_EXECUTOR__MAX_MODEL_TURNS", "12")
    assert "MAX_TURNS" in row.description
    table = DOC.read_text(encoding="utf-8")
    assert (
        "| `executor.max_model_turns` | `BOSUN_EXECUTOR__MAX_MODEL_TURNS` | `int` | `12` |" in table
    )
    assert len(rows()) == table.count("| `BOSUN_")  # one line per setting, no more


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ``BOSUN_*`` variable from the outer environment, and no stray ./bosun.toml."""
    for name in list(os.environ):
        if name.upper().startswith("BOSUN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def config(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    """``bosun config`` in this process, with the logging set-up it makes undone after it
    (its loggers write to pytest's captured stream, closed once the test ends: later tests
    in this worker would log into a closed file)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        assert main(["config", *flags]) == 0
    finally:
        root.handlers = handlers
        root.setLevel(level)
        structlog.reset_defaults()
    return capsys.readouterr().out


def test_bosun_config_says_where_each_value_came_from_and_masks_secrets(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "site.toml"
    toml.write_text("[planner]\nmax_steps = 4\n[executor]\nmax_model_turns = 9\n")
    clean_env.setenv("BOSUN_CONFIG", str(toml))
    clean_env.setenv("BOSUN_EXECUTOR__MAX_MODEL_TURNS", "6")  # over the file's 9
    clean_env.setenv("BOSUN_DATABASE_URL", "postgresql+asyncpg://bosun:hunter2@db/bosun")
    clean_env.setenv("BOSUN_PROVIDERS__ANTHROPIC_API_KEY", "sk-ant-very-secret")
    clean_env.setenv("BOSUN_CAPS", '{"tiers": {"lite": 2}}')

    lines = {line.split(" = ")[0]: line for line in config(capsys).splitlines()}

    assert lines["executor.max_model_turns"].split() == [
        "executor.max_model_turns", "=", "6", "#", "env", "BOSUN_EXECUTOR__MAX_MODEL_TURNS",
    ]  # fmt: skip
    assert lines["planner.max_steps"].split()[2:] == ["4", "#", "file", str(toml)]
    assert lines["executor.wall_time_s"].split()[2:] == ["60.0", "#", "default"]
    assert lines["caps.tiers"].split()[-2:] == ["env", "BOSUN_CAPS"]
    assert "postgresql+asyncpg://bosun:********@db/bosun" in lines["database_url"]
    assert lines["providers.anthropic_api_key"].split()[2:] == [
        "********", "#", "env", "BOSUN_PROVIDERS__ANTHROPIC_API_KEY",
    ]  # fmt: skip
    out = "\n".join(lines.values())
    assert "hunter2" not in out and "sk-ant" not in out
    assert len(lines) == len(rows())


def test_bosun_config_json_and_markdown(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("BOSUN_JWT_SECRET", "s" * 40)

    values = {v["name"]: v for v in json.loads(config(capsys, "--json"))}
    table = config(capsys, "--markdown")

    assert values["jwt_secret"] == {
        "name": "jwt_secret", "env": "BOSUN_JWT_SECRET", "value": "********",
        "source": "env", "origin": "BOSUN_JWT_SECRET",
    }  # fmt: skip
    assert values["executor.max_model_turns"]["source"] == "default"
    assert table == markdown()
