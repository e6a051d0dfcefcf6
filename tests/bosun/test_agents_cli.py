"""``bosun agents`` and ``bosun run``: profiles applied idempotently from YAML, listed and
shown; a run queued for the workers, or run here with ``--wait``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from test_chat_cli import HELLO, bosun

from bosun.cli_args import build_parser
from store import Store

PROFILES = """
- handle: coach
  name: Coach
  identity_prompt: You are Coach. Be brief.
  tools: ["members.*"]
- handle: builder
  name: Builder
  tools: ["workouts.*"]
  approvals: ["workouts.create"]
"""


async def runs_of(db: Path, agent: str) -> list[tuple[str, str]]:
    store = Store(f"sqlite+aiosqlite:///{db}")
    try:
        return [(r.id, r.status) for r in await store.runs.history("dev-org", agent, limit=10)]
    finally:
        await store.close()


def test_apply_is_idempotent_and_list_and_show_read_back(tmp_path: Path) -> None:
    db, profiles = tmp_path / "agents.db", tmp_path / "agents.yaml"
    profiles.write_text(PROFILES)

    first = bosun("agents", "apply", str(profiles), db=db)
    again = bosun("agents", "apply", str(profiles), db=db)
    listed = bosun("agents", "list", db=db)
    shown = bosun("agents", "show", "coach", db=db)
    profiles.write_text(PROFILES.replace('tools: ["members.*"]', 'tools: ["nope.*"]'))
    refused = bosun("agents", "apply", str(profiles), db=db)
    missing = bosun("agents", "show", "nobody", db=db)

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["coach: saved version 1", "builder: saved version 1"]
    assert again.stdout.splitlines() == [
        "coach: unchanged (version 1)",
        "builder: unchanged (version 1)",
    ]
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        ["builder", "v1"], ["coach", "v1"], ["default", "v0"],
    ]  # fmt: skip
    assert json.loads(shown.stdout)["identity_prompt"] == "You are Coach. Be brief."
    assert refused.returncode == 2 and "unknown_tool" in refused.stderr
    assert missing.returncode == 2 and "No agent 'nobody'" in missing.stderr


def test_a_run_is_queued_for_the_workers_or_run_here_with_wait(tmp_path: Path) -> None:
    db, profiles = tmp_path / "runs.db", tmp_path / "agents.yaml"
    profiles.write_text(PROFILES)
    bosun("agents", "apply", str(profiles), db=db)
    model = f"scripted:{HELLO}"

    queued = bosun("run", "coach", "say hello", "--model", model, db=db)
    waited = bosun("run", "coach", "say hello", "--model", model, "--wait", db=db)
    unknown = bosun("run", "nobody", "x", db=db)

    assert queued.returncode == 0 and "queued" in queued.stderr, queued.stderr
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() and ": completed" in waited.stderr.splitlines()[-1]
    statuses = sorted(status for _, status in asyncio.run(runs_of(db, "coach")))
    assert statuses == ["completed", "queued"]
    assert unknown.returncode == 2 and "No agent 'nobody'" in unknown.stderr


def test_the_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "coach", "do it", "--context", "{}", "--wait"])
    assert (args.handle, args.task, args.wait, args.org) == ("coach", "do it", True, "dev-org")
    assert parser.parse_args(["agents", "show", "coach"]).handle == "coach"


def test_the_example_agents_apply(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "agents.yaml"
    applied = bosun("agents", "apply", str(example), db=tmp_path / "example.db")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == [
        "coach: saved version 1",
        "morning-report: saved version 1",
    ]


def test_apply_refuses_a_schedule_no_date_matches(tmp_path: Path) -> None:
    db, profiles = tmp_path / "cron.db", tmp_path / "agents.yaml"
    profiles.write_text(
        PROFILES + "- handle: leap\n  name: Leap\n"
        '  schedule: {cron: "0 0 30 2 *", task: "Report"}\n'
    )
    refused = bosun("agents", "apply", str(profiles), db=db)
    listed = bosun("agents", "list", db=db)

    assert refused.returncode == 2 and "invalid_schedule" in refused.stderr
    assert "never fires" in refused.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["default"]


def test_apply_reads_access_and_refuses_an_unknown_role(tmp_path: Path) -> None:
    db, profiles = tmp_path / "access.db", tmp_path / "agents.yaml"
    desk = "- handle: desk\n  name: Desk\n  access: {chat: [owner, staff], answer: [ROLE]}\n"
    profiles.write_text(desk.replace("ROLE", "owner"))
    applied = bosun("agents", "apply", str(profiles), db=db)
    shown = bosun("agents", "show", "desk", db=db)
    profiles.write_text(desk.replace("ROLE", "admin"))
    refused = bosun("agents", "apply", str(profiles), db=db)

    assert applied.returncode == 0, applied.stderr
    assert json.loads(shown.stdout)["access"] == {"chat": ["owner", "staff"], "answer": ["owner"]}
    assert refused.returncode == 2 and "unknown_role" in refused.stderr
    assert "'admin'" in refused.stderr
