"""The docs match the product: every page is in the index, every route the app serves is
in docs/api.md (and nothing else is), every command and flag is in docs/cli.md, and every
relative link of the README and docs/ reaches a file (and a heading, when it names one)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bosun.app import build_app
from bosun.cli_args import build_parser
from bosun.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md")])
ROUTE = re.compile(r"\b(GET|POST|PUT|DELETE|PATCH) (/[^\s`?,)]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _shape(path: str) -> str:
    """``/v1/runs/{run_id:str}/stream`` and ``/v1/runs/{id}/stream`` are one shape."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_the_index_lists_every_page_and_the_readme_links_it() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[([\w-]+\.md)\]\(\1\) \| \S", index, re.MULTILINE))

    assert listed == {page.name for page in DOCS.glob("*.md")} - {"README.md"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/README.md)" in readme
    assert "](docs/protocols.md)" in readme


def _served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    settings = load_settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'routes.db'}")
    app = build_app(settings)
    return {
        (method, _shape(route.path))
        for route in app.routes
        for method in getattr(route, "methods", set()) - {"HEAD", "OPTIONS"}
        if not route.path.startswith("/schema")  # the OpenAPI document and its viewers
    }


def test_every_route_the_app_serves_is_in_the_api_doc_and_no_other(tmp_path: Path) -> None:
    doc = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = {(method, _shape(path)) for method, path in ROUTE.findall(doc)}

    served = _served_routes(tmp_path)

    assert sorted(served - documented) == [], "routes missing from docs/api.md"
    assert sorted(documented - served) == [], "docs/api.md names routes the app lacks"


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Each leaf command (``("mcp", "add")``) with its long options."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        yield words, [o for o in options if o != "--help"]
    for action in subparsers:
        for name, child in action.choices.items():
            yield from _commands(child, (*words, name))


def _cli_rows() -> list[str]:
    doc = (DOCS / "cli.md").read_text(encoding="utf-8")
    return [row.split(" | ")[0] for row in re.findall(r"^\| `bosun .*", doc, re.MULTILINE)]


@pytest.mark.parametrize(
    ("words", "options"),
    [pytest.param(*command, id=" ".join(command[0])) for command in _commands(build_parser())],
)
def test_every_command_and_flag_is_in_the_cli_doc(
    words: tuple[str, ...], options: list[str]
) -> None:
    command, *action = words
    rows = [
        row
        for row in _cli_rows()
        if row.startswith(f"| `bosun {command} ") and all(f" {a} " in row for a in action)
    ]

    assert rows, f"docs/cli.md has no row for bosun {' '.join(words)}"
    shown = " ".join(rows)
    assert [o for o in options if not re.search(rf"{o}\b(?!-)", shown)] == []


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        headed = not anchor or resolved.suffix != ".md" or anchor in _anchors(resolved)
        if not (resolved.exists() and headed):
            broken.append(target)
    assert broken == []
