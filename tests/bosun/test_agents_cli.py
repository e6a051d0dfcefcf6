"""``bosun agents`` and ``bosun run``: profiles applied idempotently from YAML, listed and
shown; a run queued for the workers, or run here with ``--wait``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from test_chat_cli import HELLO, bosun

from bosun.cli_args import build_parser
from conftest import DEMO
from mcp_testing import ALLOW_STDIO_ENV, calls, stdio_command
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
    # What was saved is said to the person (stderr); nothing on stdout to capture.
    assert first.stdout == again.stdout == ""
    assert first.stderr.splitlines() == ["coach: saved version 1", "builder: saved version 1"]
    assert again.stderr.splitlines() == [
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
    not_json = bosun("run", "coach", "x", "--context", "{nope", db=db)
    not_object = bosun("run", "coach", "x", "--context", "[1]", db=db)

    assert queued.returncode == 0 and "queued" in queued.stderr, queued.stderr
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() and ": completed" in waited.stderr.splitlines()[-1]
    runs = dict(asyncio.run(runs_of(db, "coach")))
    assert sorted(runs.values()) == ["completed", "queued"]
    # RUN=$(bosun run …) captures the id alone; with --wait it is stdout's first line.
    assert re.fullmatch(r"run_[0-9a-f]{32}\n", queued.stdout) and runs[queued.stdout.strip()]
    assert runs[waited.stdout.splitlines()[0]] == "completed"
    assert unknown.returncode == 2 and "No agent 'nobody'" in unknown.stderr
    for bad in (not_json, not_object):
        assert bad.returncode == 2 and "--context must be a JSON object" in bad.stderr, bad.stderr


HELPDESK = """
handle: helpdesk
name: Helpdesk
tools: ["tickets.*"]
"""

TICKET_SCRIPT = {
    "repeat": True,
    "steps": [
        {"match": "You are the planner", "text": json.dumps({
            "strategy": "tool", "reasoning": "One search.",
            "steps": [{"id": "s1", "goal": "Search the printer tickets",
                       "tools": ["tickets.search_tickets"], "max_tool_calls": 1}],
        })},
        {"match": "Search the printer tickets", "tool_calls": [
            {"id": "tu_find", "name": "tickets_search_tickets", "input": {"query": "printer"}}
        ]},
        {"match": "Search the printer tickets", "text": "No printer tickets."},
        {"text": "There are no printer tickets."},  # the answer, a title: any other call
    ],
}  # fmt: skip


def bosun_with(*args: str, db: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env |= {"BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "BOSUN_TOOLSETS": f'["{DEMO}"]'}
    return subprocess.run(
        [sys.executable, "-m", "bosun.cli", *args],
        env=env | settings, cwd=db.parent, capture_output=True, text=True, timeout=90,
        check=False,
    )  # fmt: skip


async def notices_of(db: Path) -> list[tuple[str, dict[str, object]]]:
    store = Store(f"sqlite+aiosqlite:///{db}")
    try:
        return [(n.type, n.data) for n in await store.notices.after("dev-org", 0)]
    finally:
        await store.close()


def test_run_wait_runs_as_a_servers_worker_would(tmp_path: Path) -> None:
    """``--wait`` runs the run with the server's configuration: the org's MCP toolsets
    are the agent's tools, and its end publishes ``run_finished`` as a worker's does."""
    db, state, script = tmp_path / "wait.db", tmp_path / "state.json", tmp_path / "s.yaml"
    script.write_text(json.dumps(TICKET_SCRIPT))
    (tmp_path / "helpdesk.yaml").write_text(HELPDESK)
    added = bosun_with(
        "mcp", "add", "tickets", "--command", *stdio_command(state), db=db, **ALLOW_STDIO_ENV
    )
    applied = bosun_with("agents", "apply", str(tmp_path / "helpdesk.yaml"), db=db)
    assert added.returncode == applied.returncode == 0, added.stderr + applied.stderr

    waited = bosun_with(
        "run", "helpdesk", "find the printer tickets", "--wait", "--json",
        "--model", f"scripted:{script}", db=db, **ALLOW_STDIO_ENV,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    first, *events = [json.loads(line) for line in waited.stdout.splitlines()]
    assert set(first) == {"run_id", "session_id"}  # the ids, then the events
    started = next(e for e in events if e["type"] == "tool_started")
    done = next(e for e in events if e["type"] == "tool_completed")
    assert started["tool"] == "tickets.search_tickets" and done["ok"], (started, done)
    assert [c["tool"] for c in calls(state)] == ["search_tickets"]
    assert events[-1] == {**events[-1], "type": "done", "status": "completed"}
    finished = [data for kind, data in asyncio.run(notices_of(db)) if kind == "run_finished"]
    assert finished == [{
        "run_id": first["run_id"], "agent": "helpdesk", "status": "completed",
        "session_id": first["session_id"], "turn_id": finished[0]["turn_id"],
    }]  # fmt: skip


def test_run_wait_without_a_model_says_which_command_needs_one(tmp_path: Path) -> None:
    db = tmp_path / "nomodel.db"
    refused = bosun_with("run", "default", "say hello", "--wait", db=db)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--wait runs the agent in this process, with this command's models" in refused.stderr
    assert "pass --model SPEC" in refused.stderr and "bosun serve" not in refused.stderr
    assert not db.exists() or asyncio.run(runs_of(db, "default")) == []  # nothing queued


def test_the_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "coach", "do it", "--context", "{}", "--wait"])
    assert (args.handle, args.task, args.wait, args.org) == ("coach", "do it", True, "dev-org")
    assert parser.parse_args(["agents", "show", "coach"]).handle == "coach"


def test_the_example_agents_apply(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "agents.yaml"
    applied = bosun("agents", "apply", str(example), db=tmp_path / "example.db")
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr.splitlines() == [
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
