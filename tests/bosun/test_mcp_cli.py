"""``bosun mcp``: toolsets added, replaced, listed, shown and removed on the database, with
their secrets stored encrypted and never printed; ``show --check`` connects to a real MCP
server (``tests/tools/mcp_server.py``) over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

from bosun.cli_args import build_parser
from mcp_testing import ALLOW_STDIO_ENV

SECRETS_KEY = Fernet.generate_key().decode()
SECRET = "tok-5e9a-never-printed"
MCP_SERVER = Path(__file__).parents[1] / "tools" / "mcp_server.py"


def bosun(*args: str, db: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``bosun ARGS`` in a fresh process on ``db``, with ``BOSUN_*`` settings ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    clean |= {"BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{db}", **env}
    return subprocess.run(
        [sys.executable, "-m", "bosun.cli", *args],
        env=clean, cwd=db.parent, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_add_list_show_replace_and_remove_without_printing_secrets(tmp_path: Path) -> None:
    db, key = tmp_path / "mcp.db", {"BOSUN_SECRETS_KEY": SECRETS_KEY}
    added = bosun(
        "mcp", "add", "tickets", "--org", "acme", "--url", "http://127.0.0.1:9/mcp",
        "--header", f"Authorization: Bearer {SECRET}", "--tool-category", "searchTickets=read",
        "--category", "write", "--timeout", "12", db=db, **key,
    )  # fmt: skip
    listed = bosun("mcp", "list", "--org", "acme", db=db, **key)
    shown = bosun("mcp", "show", "tickets", "--org", "acme", db=db, **key)
    replaced = bosun(
        "mcp", "add", "tickets", "--org", "acme", "--disabled", "--url", "http://127.0.0.1:9/v2",
        db=db, **key,
    )  # fmt: skip
    relisted = bosun("mcp", "list", "--org", "acme", db=db, **key)
    removed = bosun("mcp", "remove", "tickets", "--org", "acme", db=db, **key)
    again = bosun("mcp", "remove", "tickets", "--org", "acme", db=db, **key)

    assert added.returncode == 0, added.stderr
    assert added.stdout == "" and added.stderr == "tickets: saved version 1\n"
    assert listed.stdout == "tickets\tv1\thttp\thttp://127.0.0.1:9/mcp\n"
    record = json.loads(shown.stdout)
    assert record["header_names"] == ["Authorization"] and record["default_category"] == "write"
    assert record["tool_categories"] == {"searchTickets": "read"} and record["timeout_s"] == 12
    assert "status" not in record  # no --check: nothing connected
    assert replaced.stdout == "" and replaced.stderr == "tickets: saved version 2\n"
    assert relisted.stdout == "tickets\tv2\thttp\thttp://127.0.0.1:9/v2 (disabled)\n"
    assert removed.stdout == "" and removed.stderr == "tickets: removed\n"
    assert again.returncode == 2 and "no MCP toolset 'tickets'" in again.stderr
    for done in (added, listed, shown, replaced, relisted, removed, again):
        assert SECRET not in done.stdout + done.stderr


def test_show_check_connects_to_a_stdio_server_and_lists_its_tools(tmp_path: Path) -> None:
    db, key = tmp_path / "mcp.db", {"BOSUN_SECRETS_KEY": SECRETS_KEY, **ALLOW_STDIO_ENV}
    command = [sys.executable, str(MCP_SERVER), "--state", str(tmp_path / "state.json")]
    added = bosun(
        "mcp", "add", "tickets", "--env", f"TICKETS_TOKEN={SECRET}", "--command", *command,
        db=db, **key,
    )  # fmt: skip
    checked = bosun("mcp", "show", "tickets", "--check", db=db, **key)

    assert added.returncode == 0, added.stderr
    shown = json.loads(checked.stdout)
    assert shown["command"] == command and shown["env_names"] == ["TICKETS_TOKEN"]
    status = shown["status"]
    assert status["state"] == "connected", status
    categories = {tool["name"]: tool["category"] for tool in status["tools"]}
    assert categories["tickets.search_tickets"] == "read"
    assert categories["tickets.delete_ticket"] == "destructive"
    assert categories["tickets.create_ticket"] == "write"
    assert status["skipped"] == ["9lives"]
    assert status["skipped_reasons"] == [{"mcp_name": "9lives", "reason": "invalid_name"}]
    assert status["skipped_count"] == 1
    assert SECRET not in checked.stdout + checked.stderr


def test_refusals_exit_2_and_say_why(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    header = ("--header", f"Authorization: {SECRET}")
    no_key = bosun("mcp", "add", "t", "--url", "http://127.0.0.1:9/", *header, db=db)
    stdio_off = bosun("mcp", "add", "db", "--command", "srv", db=db)  # the default: off
    not_listed = bosun(
        "mcp", "add", "db", "--command", "/bin/sh", "-c", "id", db=db, **ALLOW_STDIO_ENV
    )
    old_switch = bosun("mcp", "list", db=db, BOSUN_MCP__ALLOW_STDIO="true")
    bad_name = bosun("mcp", "add", "Bad-Name", "--url", "http://127.0.0.1:9/", db=db)
    mixed = bosun("mcp", "add", "t", "--env", "A=b", "--url", "http://127.0.0.1:9/", db=db)
    missing = bosun("mcp", "show", "nothing", db=db)
    listed = bosun("mcp", "list", db=db)

    assert no_key.returncode == 2 and "BOSUN_SECRETS_KEY" in no_key.stderr
    # It is this command that encrypts: its environment needs the key, not only the server's.
    assert "set BOSUN_SECRETS_KEY in this command's environment, to the server's key" in (
        no_key.stderr
    )
    assert "bosun mcp encrypts and reads them itself" in no_key.stderr
    assert "on the server" not in no_key.stderr
    assert stdio_off.returncode == 2 and "mcp.stdio_commands is empty" in stdio_off.stderr
    assert not_listed.returncode == 2 and "'/bin/sh' is not on" in not_listed.stderr
    assert old_switch.returncode == 2 and "replaced by mcp.stdio_commands" in old_switch.stderr
    assert bad_name.returncode == 2 and "toolset name" in bad_name.stderr
    assert mixed.returncode == 2 and "--env with --command" in mixed.stderr
    assert missing.returncode == 2 and "no MCP toolset 'nothing'" in missing.stderr
    assert listed.returncode == 0 and listed.stdout == ""
    assert SECRET not in no_key.stdout + no_key.stderr


def test_the_command_is_the_rest_of_the_line() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["mcp", "add", "db", "--env", "A=b=c", "--command", "python", "-m", "srv", "--port", "1"]
    )
    assert (args.command, args.action, args.name) == ("mcp", "add", "db")
    assert args.program == ["python", "-m", "srv", "--port", "1"] and args.env == [("A", "b=c")]
    header = parser.parse_args(["mcp", "add", "t", "--url", "u", "--header", "X-Key:  a:b "])
    assert header.header == [("X-Key", "a:b")] and header.program is None
