"""The ``bosun`` command as a user runs it: a real process, a real port, a real database."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import jwt
import pytest
from httpx_sse import connect_sse

from conftest import free_port
from providers import TokenUsage, ToolCall
from providers.fake import FakeProvider, FakeServer, anthropic_reply

BOSUN = [sys.executable, "-m", "bosun.cli"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    clean["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    return clean


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOSUN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_help_lists_the_commands(env: dict[str, str], tmp_path: Path) -> None:
    result = run(["--help"], env, tmp_path)
    assert result.returncode == 0
    for command in ("serve", "migrate", "token"):
        assert command in result.stdout


def test_serve_refuses_an_unsafe_secret_without_dev(env: dict[str, str], tmp_path: Path) -> None:
    for secret in (None, "short", "bosun-dev-secret-do-not-use-in-production"):
        if secret is not None:
            env["BOSUN_JWT_SECRET"] = secret
        result = run(["serve", "--port", str(free_port())], env, tmp_path)
        assert result.returncode == 2
        assert "BOSUN_JWT_SECRET" in result.stderr
        assert "--dev" in result.stderr
    assert not (tmp_path / "cli.db").exists()


def test_serve_rejects_a_bad_model_spec(env: dict[str, str], tmp_path: Path) -> None:
    result = run(["serve", "--dev", "--model", "scripted:missing.yaml"], env, tmp_path)
    assert result.returncode == 2
    assert "missing.yaml" in result.stderr
    # Said before the model is read: --dev opens loopback alone to webhooks and MCP.
    assert "--dev: webhooks and MCP servers may reach this machine's loopback" in result.stderr
    assert "other private addresses stay refused" in result.stderr
    opened = run(
        ["serve", "--dev", "--model", "scripted:missing.yaml"],
        env | {"BOSUN_EGRESS__ALLOW_PRIVATE": "true"},
        tmp_path,
    )
    assert "egress.allow_private is on" in opened.stderr and "--dev:" not in opened.stderr


def test_serve_warns_when_org_owners_may_run_programs(env: dict[str, str], tmp_path: Path) -> None:
    quiet = run(["serve", "--dev", "--model", "scripted:missing.yaml"], env, tmp_path)
    env["BOSUN_MCP__STDIO_COMMANDS"] = '["/opt/mcp/tickets-server"]'
    loud = run(["serve", "--dev", "--model", "scripted:missing.yaml"], env, tmp_path)

    assert "stdio" not in quiet.stderr
    assert "WARNING: org owners may run these programs" in loud.stderr
    assert "/opt/mcp/tickets-server" in loud.stderr


def test_token_signs_the_given_claims(env: dict[str, str], tmp_path: Path) -> None:
    env["BOSUN_JWT_SECRET"] = "s" * 40
    result = run(["token", "--user", "u1", "--org", "o1", "--role", "staff"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    claims = jwt.decode(result.stdout.strip(), "s" * 40, algorithms=["HS256"])
    assert (claims["sub"], claims["org"], claims["role"]) == ("u1", "o1", "staff")
    assert claims["exp"] > time.time()
    bad = run(["token", "--user", "u1", "--org", "o1", "--role", "admin"], env, tmp_path)
    assert bad.returncode == 2
    assert "owner, staff, member" in bad.stderr


def test_migrate_is_idempotent(env: dict[str, str], tmp_path: Path) -> None:
    for _ in range(2):
        result = run(["migrate"], env, tmp_path)
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "cli.db").exists()


def test_migrate_adds_the_demo_tables_when_the_demo_toolset_is_loaded(
    env: dict[str, str], tmp_path: Path
) -> None:
    def tables() -> set[str]:
        with closing(sqlite3.connect(tmp_path / "cli.db")) as db:
            return {name for (name,) in db.execute("SELECT name FROM sqlite_master")}

    off = run(["migrate"], env, tmp_path)  # no toolset is configured by default
    without = tables()
    on = run(["migrate"], env | {"BOSUN_TOOLSETS": '["demo"]'}, tmp_path)
    again = run(["migrate", "--toolset", "demo"], env, tmp_path)
    after = run(["migrate"], env, tmp_path)  # unloaded, its tables and revision stay

    assert off.returncode == on.returncode == again.returncode == after.returncode == 0, (
        off.stderr + on.stderr + again.stderr + after.stderr
    )
    assert "audit_log" in without and "workouts" not in without
    assert tables() - without >= {"members", "programs", "workouts", "class_sessions", "tasks"}
    # Said to the person (stderr): migrate has nothing for a script to capture.
    assert on.stderr.strip().endswith("to head, demo") and off.stderr.strip().endswith("to head")
    assert on.stdout == off.stdout == ""


@pytest.fixture
def served(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    script = tmp_path / "replies.yaml"
    script.write_text(
        "steps:\n"
        "  - text: Ahoy from the scripted model.\n"
        "    usage: {input_tokens: 7, output_tokens: 6}\n"
        "repeat: true\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [*BOSUN, "serve", "--dev", "--port", str(port), "--model", f"scripted:{script}"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url)
        yield url, env
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert process.returncode in (0, -15), output  # uvicorn re-raises the SIGTERM it handled
    assert "Application shutdown complete" in output
    for private in ("Ahoy", "xylophone", "quokka"):  # user and model text stay out of logs
        assert private not in output


def test_serve_dev_streams_a_turn_that_equals_the_log(
    served: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = served
    token = run(["token", "--user", "u1", "--org", "o1"], env, tmp_path).stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(base_url=url) as client,
        connect_sse(
            client, "POST", "/v1/chat/stream", json={"message": "xylophone quokka"}, headers=headers
        ) as source,
    ):
        frames = [(int(s.id), s.event, json.loads(s.data)) for s in source.iter_sse()]

    ids = [frame[0] for frame in frames]
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert frames[-1][1] == "done"
    assert "".join(d["delta"] for _, t, d in frames if t == "text_delta") == (
        "Ahoy from the scripted model."
    )
    session_id = frames[0][2]["session_id"]
    with httpx.Client(base_url=url, headers=headers) as client:
        logged = client.get(f"/v1/sessions/{session_id}/events").json()["events"]
    assert [(e["seq"], e["type"], e["data"]) for e in logged] == frames
    import sqlite3

    db = sqlite3.connect(tmp_path / "cli.db")
    rows = db.execute(
        "SELECT seq, type, data FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
    ).fetchall()
    assert [(seq, kind, json.loads(data)) for seq, kind, data in rows] == frames


def test_serve_with_anthropic_against_the_local_fake(env: dict[str, str], tmp_path: Path) -> None:
    """The real adapter and SDK, end to end, with ANTHROPIC_BASE_URL at a local fake."""
    plan = {"strategy": "simple", "reasoning": "A greeting."}
    provider = FakeProvider().enqueue(
        anthropic_reply(  # the planner's structured output arrives as a forced tool call
            tool_calls=(ToolCall(id="toolu_plan", name="plan", input=plan),),
            usage=TokenUsage(input_tokens=600, output_tokens=40),
        ),
        anthropic_reply(
            text="Ahoy from the fake Anthropic API.",
            usage=TokenUsage(input_tokens=1_000, output_tokens=500, cache_read_tokens=10_000),
            text_chunk_size=6,
        ),
        anthropic_reply(text="Greetings", usage=TokenUsage(input_tokens=60, output_tokens=3)),
    )
    port = free_port()
    with FakeServer(provider) as fake:
        env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-fake-key-1234")
        process = subprocess.Popen(
            [
                *BOSUN,
                "serve",
                "--dev",
                "--port",
                str(port),
                "--model",
                "anthropic:claude-haiku-4-5",
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url)
            token = run(["token", "--user", "u1", "--org", "o1"], env, tmp_path).stdout.strip()
            with (
                httpx.Client(base_url=url) as client,
                connect_sse(
                    client,
                    "POST",
                    "/v1/chat/stream",
                    json={"message": "hello"},
                    headers={"Authorization": f"Bearer {token}"},
                ) as source,
            ):
                frames = [(s.event, json.loads(s.data)) for s in source.iter_sse()]
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=30)

    kinds = [kind for kind, _ in frames if kind != "context_budget"]
    assert kinds[:3] == ["session_started", "user_message", "plan_created"]
    assert kinds[-3:] == ["message_done", "usage", "done"]
    assert frames[2][1]["strategy"] == "simple" and "fallback" not in frames[2][1]
    text = "".join(data["delta"] for kind, data in frames if kind == "text_delta")
    assert text == "Ahoy from the fake Anthropic API."
    usage = frames[-2][1]
    # Haiku 4.5 per million tokens: planner 600 x $1 + 40 x $5 = 800 micro-dollars;
    # answer 1,000 x $1 + 500 x $5 + 10,000 x $0.10 = 4,500 micro-dollars
    assert usage["by_role"]["planner"]["cost_usd_micros"] == 800
    assert usage["by_role"]["merger"]["cost_usd_micros"] == 4_500
    assert usage["by_role"]["summariser"]["cost_usd_micros"] == 60 + 15  # the session title
    assert (usage["input_tokens"], usage["cache_read_tokens"]) == (1_660, 10_000)
    assert usage["cost_usd_micros"] == 5_375
    assert frames[-1][1]["status"] == "completed"
    planned, answered, titled = provider.requests
    assert titled.json["system"][0]["text"].startswith("Write a short title")
    assert planned.json["tool_choice"] == {"type": "tool", "name": "plan"}
    assert answered.path == "/v1/messages"
    assert answered.json["model"] == "claude-haiku-4-5"
    assert answered.json["messages"][-1]["content"][-1]["text"] == "hello"
    assert "sk-ant-fake-key-1234" not in output


def _wait_healthy(url: str) -> None:
    for _ in range(200):
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("bosun serve did not start")


def test_org_tier_sets_and_shows_an_orgs_tier(env: dict[str, str], tmp_path: Path) -> None:
    assert run(["migrate"], env, tmp_path).returncode == 0
    shown = run(["org-tier", "--org", "acme"], env, tmp_path)
    changed = run(["org-tier", "--org", "acme", "--tier", "pro"], env, tmp_path)
    again = run(["org-tier", "--org", "acme"], env, tmp_path)
    unknown = run(["org-tier", "--org", "acme", "--tier", "platinum"], env, tmp_path)

    assert shown.stdout.strip() == "org acme: tier lite ($1.00 a day)"  # the default
    assert changed.stdout.strip() == again.stdout.strip() == "org acme: tier pro ($5.00 a day)"
    assert unknown.returncode == 2 and "no tier 'platinum'" in unknown.stderr
