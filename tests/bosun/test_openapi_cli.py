"""``bosun openapi``: toolsets added from a file or a URL, replaced, listed, shown and
removed on the database; the signing secret printed once; a document no tool could come
from refused."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.fernet import Fernet
from test_mcp_cli import bosun

from openapi_testing import EXAMPLE, notes_host

KEY = {"BOSUN_SECRETS_KEY": Fernet.generate_key().decode()}
DOCUMENT = str(EXAMPLE / "openapi.json")


def test_add_list_show_replace_and_remove(tmp_path: Path) -> None:
    db = tmp_path / "openapi.db"
    added = bosun(
        "openapi", "add", "notes", "--org", "acme", "--openapi", DOCUMENT,
        "--base-url", "https://8.8.8.8", "--exclude", "deleteNote",
        "--category", "listNotes=write", "--timeout", "7", db=db, **KEY,
    )  # fmt: skip
    listed = bosun("openapi", "list", "--org", "acme", db=db, **KEY)
    shown = bosun("openapi", "show", "notes", "--org", "acme", db=db, **KEY)
    replaced = bosun(
        "openapi", "add", "notes", "--org", "acme", "--openapi", DOCUMENT,
        "--base-url", "https://8.8.8.8", "--identity", "forward", db=db, **KEY,
    )  # fmt: skip
    removed = bosun("openapi", "remove", "notes", "--org", "acme", db=db, **KEY)
    again = bosun("openapi", "remove", "notes", "--org", "acme", db=db, **KEY)

    assert added.returncode == 0, added.stderr
    # The secret alone on stdout (SECRET=$(bosun openapi add …)); the rest on stderr.
    secret = added.stdout.strip()
    assert added.stdout == f"{secret}\n" and len(secret) >= 32 and " " not in secret
    assert added.stderr.splitlines() == [
        "notes: saved version 1 (3 tools)",
        "its signing secret, on stdout, is shown once: give it to the API to verify calls",
    ]
    assert listed.stdout == "notes\tv1\tsigned\thttps://8.8.8.8\n"
    record = json.loads(shown.stdout)
    assert [(t["name"], t["category"]) for t in record["tools"]] == [
        ("notes.list_notes", "write"), ("notes.create_note", "write"), ("notes.get_note", "read"),
    ]  # fmt: skip
    assert record["timeout_s"] == 7 and "secret" not in shown.stdout
    assert replaced.stdout == "" and replaced.stderr == "notes: saved version 2 (4 tools)\n"
    assert removed.stdout == "" and removed.stderr == "notes: removed\n"
    assert again.returncode == 2 and "no OpenAPI toolset 'notes'" in again.stderr


def test_a_document_by_url_and_bad_documents(tmp_path: Path) -> None:
    db, bad = tmp_path / "openapi.db", tmp_path / "bad.yaml"
    bad.write_text("swagger: '2.0'\npaths: {}\n")
    with notes_host() as (_, url):
        base = ("--openapi", f"{url}/openapi.json", "--base-url", url)
        open_egress = {**KEY, "BOSUN_EGRESS__ALLOW_PRIVATE": "true"}
        fetched = bosun("openapi", "add", "notes", *base, db=db, **open_egress)
        refused = bosun("openapi", "add", "other", *base, db=db, **KEY)
    wrong = bosun(
        "openapi", "add", "old", "--openapi", str(bad), "--base-url", "https://8.8.8.8",
        db=db, **KEY,
    )  # fmt: skip
    no_key = bosun(
        "openapi", "add", "keyless", "--openapi", DOCUMENT, "--base-url", "https://8.8.8.8",
        db=db,
    )  # fmt: skip

    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stderr.startswith("notes: saved version 1 (4 tools)\n")
    assert refused.returncode == 2 and "loopback" in refused.stderr
    assert wrong.returncode == 2 and "OpenAPI 3.0 or 3.1" in wrong.stderr
    # This command encrypts the signing secret: its own environment needs the key.
    assert no_key.returncode == 2 and no_key.stdout == ""
    assert "set BOSUN_SECRETS_KEY in this command's environment" in no_key.stderr
    assert "on the server" not in no_key.stderr
