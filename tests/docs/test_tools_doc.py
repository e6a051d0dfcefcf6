"""docs/tools.md's "Testing a toolset" shows ``test_my_toolset.py`` (which CI runs) as it
is, so the page cannot drift from a test file that passes."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "tools.md"


def last_python_block(section: str) -> str:
    start = section.rindex("\n```python\n") + len("\n```python\n")
    return section[start : section.index("\n```", start - 1) + 1]


def test_the_doc_shows_the_test_file_as_it_is() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert "\n## Testing a toolset\n" in doc, "docs/tools.md lost its Testing a toolset section"
    section = doc.split("\n## Testing a toolset\n", 1)[1].split("\n## ", 1)[0]

    shown = last_python_block(section)

    assert shown == (HERE / "test_my_toolset.py").read_text(encoding="utf-8")
