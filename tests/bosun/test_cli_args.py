"""Parsing the ``bosun`` command line loads nothing but the standard library and the parser.

That is what keeps ``bosun --help``, ``--version`` and ``COMMAND --help`` fast; the time
itself is measured in ``bench/cli_start.py``, not here (a timed test would be flaky).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import get_args

from bosun import __version__
from bosun.cli_args import USER_ROLES, build_parser
from tools import UserRole

# In a fresh interpreter: which modules did parsing add, and what did each line print?
PROBE = """
import contextlib, io, json, sys
before = set(sys.modules)
from bosun.cli import main
printed = {}
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0, (argv, exit.code)
    printed[" ".join(argv)] = out.getvalue()
loaded = sorted(set(sys.modules) - before)
print(json.dumps({"loaded": loaded, "printed": printed}))
"""


def commands() -> list[str]:
    [action] = [a for a in build_parser()._actions if a.dest == "command"]
    assert isinstance(action.choices, dict)
    return list(action.choices)


def test_help_and_version_load_only_the_standard_library_and_the_parser() -> None:
    lines = [["--version"], ["--help"], *([command, "--help"] for command in commands())]
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(lines)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    probe = json.loads(result.stdout)

    bosun = {m for m in probe["loaded"] if m.partition(".")[0] == "bosun"}
    assert bosun == {"bosun", "bosun.cli", "bosun.cli_args"}
    others = {m.partition(".")[0] for m in probe["loaded"]} - {"bosun"}
    assert others - sys.stdlib_module_names == set(), "parsing imported a third-party package"
    printed = probe["printed"]
    assert printed["--version"] == f"bosun {__version__}\n"
    assert all(f"    {command} " in printed["--help"] for command in commands())
    assert "--older-than AGE" in printed["prune --help"]
    assert "{owner,staff,member}" in printed["chat --help"]


def test_the_command_line_knows_every_command_and_user_role() -> None:
    assert commands() == [
        "serve",
        "migrate",
        "token",
        "org-tier",
        "chat",
        "plan",
        "budget",
        "prune",
        "agents",
        "run",
        "mcp",
        "openapi",
        "toolsets",
        "config",
    ]
    assert get_args(UserRole) == USER_ROLES


def test_commands_load_a_provider_sdk_or_the_mcp_sdk_only_when_they_use_one() -> None:
    # ``bosun agents``, ``mcp list``, ``prune`` and the like call no model, connect to no
    # MCP server and serve nothing: the anthropic SDK (about 1 s to import), the mcp SDK
    # (about 0.5 s, ``mcp`` and ``mcp_types``) and the HTTP stack load on first use
    # (building a model, connecting a toolset: ``tools._mcp_link``; ``serve``, ``token``).
    probe = (
        "import json, sys; import bosun.commands; before = set(sys.modules);"
        " from providers import AnthropicModel; import tools._mcp_link;"
        " print(json.dumps({'commands': sorted(before), 'used': sorted(sys.modules)}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(result.stdout)
    commands = {m.partition(".")[0] for m in loaded["commands"]}
    assert {"anthropic", "openai", "mcp", "mcp_types", "litestar"} & commands == set()
    assert {"anthropic", "mcp", "mcp_types"} <= {m.partition(".")[0] for m in loaded["used"]}
