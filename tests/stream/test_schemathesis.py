"""Schemathesis against the served app: of the requests it generates, none gets a 5xx.

``st run`` (the CLI, as one would run it by hand) loads the OpenAPI served at
``/schema/openapi.json``, sends an owner's bearer token and generates requests for every
route but the three live stream tails (``GET /v1/sessions/{id}/stream`` follows a
session until the client leaves, ``GET /v1/runs/{id}/stream`` a run until it ends, ``GET
/v1/events/stream`` the org's notices until the client leaves): the coverage phase's
boundary values (on SQLite) and the fuzzing phase's random ones (on both databases),
valid and invalid, the same ones on every run. Half the session ids it sends name a real
session, so the session routes get past their 404s, and a dictionary mixes in values
that once broke the server (NUL characters, integers past 64 bits, date-times without an
offset or past year 9999). Every string's schema states that it holds no NUL, so those
are negative cases, answered 400; the random generator makes no NUL of its own
(``allow-x00 = false``), as it would put one in free-form values (``context``), whose
rule only the document's description can state.
The run must fail none of the checks below: no server error, no undocumented status,
content type or body, no invalid request accepted and no valid one refused (so the
OpenAPI states what the server checks).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from conftest import ServerFactory
from providers import ScriptedModel
from tools import McpPool, McpStatus, ToolDef
from turn import TurnModels

TAIL = "/v1/sessions/{session_id}/stream"
RUN_TAIL = "/v1/runs/{run_id}/stream"  # a live tail too: it follows a run until its end
ORG_TAIL = "/v1/events/stream"  # the org's notices: live until the client leaves
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
    "ignored_auth",
]
# TOML for `st --config-file`. 413: a body past max_body_bytes, which no JSON Schema can
# state; 409 and 422: answers that depend on state (idempotency_conflict, invalid_pick).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]

[checks.positive_data_acceptance]
expected-statuses = ["2XX", 401, 403, 404, 409, 413, 422, 429]

[dictionaries.sessions]  # positive cases take the valid entry, negative ones the others
values = ["{session_id}", "\\u0000", "{session_id}\\u0000"]

[dictionaries.strings]
values = [
  "\\u0000", "a\\u0000b", "   ", "\\u00a0\\u3000", "\\U0001F600",
  "2020-01-01T00:00:00", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59",
]

[dictionaries.integers]
values = [-1, 0, 9223372036854775807, 9223372036854775808, 1180591620717411303424]

[parameters]
"path.session_id" = {{ dictionary = "sessions", probability = 0.5 }}
"path.tool_use_id" = {{ dictionary = "strings", probability = 0.3 }}
"query.after" = {{ dictionary = "integers", probability = 0.3 }}
"query.limit" = {{ dictionary = "integers", probability = 0.3 }}
"query.before" = {{ dictionary = "strings", probability = 0.3 }}
"body.message" = {{ dictionary = "strings", probability = 0.3 }}
"body.id" = {{ dictionary = "strings", probability = 0.3 }}
"body.api_key" = {{ dictionary = "strings", probability = 0.3 }}

[generation]  # no NUL in free-form values (no schema can state that): see the module doc
allow-x00 = false

[generation.dictionaries]
string = {{ dictionary = "strings", probability = 0.2 }}
integer = {{ dictionary = "integers", probability = 0.3 }}
"""
# `st` with its oversized strings made cheaply: a string above a maxLength past 1,024 is
# "a"s ending in a count (distinct, so none is dropped as a repeat), not drawn character
# by character by Hypothesis (32,001 for `message`, eight times 8,001 elsewhere): three
# quarters of the coverage phase's CPU, for values Bosun answers 400 whatever their
# characters. Fails loudly if schemathesis renames what it patches.
LAUNCH = """
import itertools
import schemathesis.cli
from schemathesis.specs.openapi.coverage import _schema

drawn, count = _schema._generate_oversized_string, itertools.count()

def oversized(ctx, schema, length):
    return drawn(ctx, schema, length) if length <= 1025 else str(next(count)).rjust(length, "a")

_schema._generate_oversized_string = oversized
schemathesis.cli.schemathesis()
"""
EXAMPLES_PER_OPERATION = 5  # fuzzed per operation (twice as many on PostgreSQL, fuzzing only)
MIN_CASES = 300
TIMEOUT_S = 600  # a hang guard, not a timing: a busy 2-core machine takes minutes


def _models() -> TurnModels:
    """A planner that makes simple plans and an answerer, scripted, for any number of turns."""
    plan = '{"strategy": "simple", "reasoning": "Scripted: no tools needed."}'
    answer = ScriptedModel(["Ahoy from the script."], repeat=True)
    return TurnModels(
        planner=ScriptedModel([plan], repeat=True),
        executor=answer,
        selectable={"scripted:alt": answer},
    )


async def _status_only(pool: McpPool, org_id: str, name: str) -> McpStatus:
    [status] = await pool.status(org_id, [name])
    return status


async def _no_tools(_pool: McpPool, _org_id: str, _toolsets: Iterable[str]) -> list[ToolDef]:
    return []


async def _schemathesis(
    url: str, token: str, workdir: Path, phases: str, examples: int
) -> tuple[int, str, dict[str, Any]]:
    """Run ``st run`` against ``url``; its exit code, its output and its JSON report."""
    report = workdir / "report.json"
    command = [
        *(sys.executable, "-c", LAUNCH),
        *("--config-file", str(workdir / "schemathesis.toml"), "--no-color"),
        "run",
        f"{url}/schema/openapi.json",
        *("--header", f"Authorization: Bearer {token}"),
        *("--exclude-path", TAIL),
        *("--exclude-path", RUN_TAIL),
        *("--exclude-path", ORG_TAIL),
        *("--checks", ",".join(CHECKS)),
        *("--phases", phases),
        *("--max-examples", str(examples), "--generation-deterministic"),
        *("--workers", "1", "--request-timeout", "30"),
        *("--report", "json", "--report-json-path", str(report)),
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=workdir,  # whatever it caches stays in the test's directory
        env={**os.environ, "NO_PROXY": "*", "no_proxy": "*"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert report.exists(), text[-5000:]
    return process.returncode or 0, text, json.loads(report.read_text())


async def test_schemathesis_finds_no_server_error(
    make_server: ServerFactory, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The coverage phase's boundary values (most of the cases: about 4,500) on SQLite; on
    # PostgreSQL the fuzzing phase, whose dictionaries carry what differs between the two
    # databases (NUL characters, integers past 64 bits, date-times past year 9999).
    sqlite = db_url.startswith("sqlite")
    checked = ("coverage", "fuzzing") if sqlite else ("fuzzing",)
    examples = EXAMPLES_PER_OPERATION if sqlite else 2 * EXAMPLES_PER_OPERATION
    # The webhooks it adds name whatever hosts it makes up: none is ever sent to.
    monkeypatch.setenv("BOSUN_WEBHOOKS__DELIVER", "false")
    # Nor is any MCP server it configures connected to: no command run, no host reached.
    monkeypatch.setenv("BOSUN_MCP__ALLOW_STDIO", "false")
    monkeypatch.setattr(McpPool, "refresh", _status_only)
    monkeypatch.setattr(McpPool, "tools", _no_tools)
    async with make_server(_models(), secrets_key=Fernet.generate_key().decode()) as server:
        owner = server.auth(role="owner")
        first = await server.client.post("/v1/chat", json={"message": "Hello"}, headers=owner)
        assert first.status_code == 200, first.text
        config = CONFIG.format(session_id=first.json()["session_id"])
        (tmp_path / "schemathesis.toml").write_text(config, encoding="utf-8")
        schema = (await server.client.get("/schema/openapi.json")).json()
        token, phases = server.token(role="owner"), ",".join(("examples", *checked))
        code, output, report = await _schemathesis(server.url, token, tmp_path, phases, examples)

    tail = output[-20_000:]  # the summary, and the failures before it
    assert (code, report["failures"], report["errors"]) == (0, [], []), tail
    operations = sum(
        method in ("get", "put", "post", "delete")
        for item in schema["paths"].values()
        for method in item
    )
    assert report["operations"]["tested"] == operations - 3, tail  # all but the three tails
    assert report["test_cases"]["generated"] >= MIN_CASES, tail
    assert {phase: report["phases"][phase]["status"] for phase in checked} == {
        phase: "success" for phase in checked
    }, tail
    # The warning schemathesis gives when validation is stricter than the OpenAPI. Such
    # cases are by design: a profile (POST, PUT) may grant ``toolset.tool`` for any name the
    # pattern admits, and a toolset the org has not configured is 422 unknown_toolset, which
    # depends on the org's state, as 409 and 422 do above; an OpenAPI toolset's document
    # must be a valid OpenAPI document, which no JSON schema states.
    by_design = {"POST /v1/agents", "PUT /v1/agents/{handle}", "PUT /v1/openapi/toolsets/{toolset}"}
    assert set(report["warnings"]["validation_mismatch"]) <= by_design, tail
