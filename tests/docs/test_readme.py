"""The README's walkthroughs run as written, in one shell, against real servers.

The README marks the bash blocks a newcomer types with ``<!-- readme-test: run -->`` and
the blocks showing what they print with ``<!-- readme-test: output -->``. This test runs
every marked block, in order, in one ``bash`` (so ``$TOKEN``, ``$SESSION`` and the
background ``$SERVER`` carry over, as in the reader's shell), in a scratch directory
holding ``examples/`` and a ``.venv/bin`` whose ``bosun`` and ``python`` are this
checkout's. Only the port changes (a free one for 8000). It then checks that no command
failed, and that what the README shows is in what the block printed: each event or notice
it names (as an SSE ``event:`` line) and each literal ``"key": value`` pair of its JSON,
from the output block and the block's own ``#`` comments.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bosun.events import Event
from conftest import free_port
from store import NOTICE_TYPES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARK = re.compile(r"<!-- readme-test: (run|output) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)
EVENT_TYPES = frozenset(
    typing.get_args(typing.get_type_hints(member)["type"])[0]
    for member in typing.get_args(typing.get_args(Event)[0])
) | frozenset(NOTICE_TYPES)
QUOTED = re.compile(r'"[^"\n]*"')
PAIR = re.compile(r'"(\w+)":\s*("[^"\n…]*"|true|false|null|-?\d+(?:\.\d+)?)(?=\s*[,}\]])')
TIMEOUT_S = 120
MCP_HEADER_VALUE = "tickets-token"  # the README's `bosun mcp add --header`: never shown again


@dataclass
class Block:
    """A bash block to run and what the README shows it printing."""

    script: str
    shown: list[str] = field(default_factory=list)

    def documented(self) -> str:
        comments = [line.split("#", 1)[1] for line in self.script.splitlines() if "# " in line]
        return "\n".join([*comments, *self.shown])


def readme_blocks(text: str) -> list[Block]:
    """The marked blocks in order, each output block joined to the run block before it."""
    blocks: list[Block] = []
    for kind, language, body in MARK.findall(text):
        if kind == "run":
            assert language == "bash", f"a run block must be bash, not {language!r}"
            blocks.append(Block(body))
        else:
            assert blocks, "an output block before any run block"
            blocks[-1].shown.append(body)
    return blocks


def shown_events(documented: str) -> list[str]:
    """The event and notice names a block's documentation shows, in order, outside JSON
    strings."""
    words = re.findall(r"\b[a-z]+(?:_[a-z]+)*\b", QUOTED.sub("", documented))
    return [word for word in words if word in EVENT_TYPES]


def shown_answers(documented: str) -> list[str]:
    """The pieces of answer text shown after ``text_delta`` (``…`` marks what is left out)."""
    quoted = re.findall(r'text_delta (?:… )?"([^"\n]+)"', documented)
    return [piece.strip() for text in quoted for piece in text.split("…") if piece.strip()]


def shown_pairs(documented: str) -> set[str]:
    """Literal ``"key": value`` pairs (no ``…``), spelt compactly as the API sends them."""
    return {f'"{key}":{value}' for key, value in PAIR.findall(documented)}


def workspace(tmp_path: Path) -> Path:
    """A directory a reader's checkout looks like to the README's commands."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    path = f'PYTHONPATH="{ROOT / "src"}${{PYTHONPATH:+:$PYTHONPATH}}"'
    for name, command in (("bosun", "-m bosun.cli "), ("python", "")):
        shim = venv_bin / name
        shim.write_text(f'#!/bin/sh\n{path} exec "{sys.executable}" {command}"$@"\n')
        shim.chmod(0o755)
    return tmp_path


def driver(blocks: list[Block], port: int, work: Path) -> str:
    """One bash script sourcing each block in turn, its output in ``out/N``, each failing
    command (exit status and text) appended to ``failures``."""
    lines = [
        "set -o pipefail",
        "trap 'echo \"block $BLOCK: exit $? from: $BASH_COMMAND\" >> failures' ERR",
        "mkdir -p out",
    ]
    for number, block in enumerate(blocks):
        script = block.script.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        script = script.replace("--port 8000", f"--port {port}")
        (work / f"block{number}.sh").write_text(script + "\n")
        lines.append(f"BLOCK={number}; source block{number}.sh > out/{number} 2> out/{number}.err")
        lines.append(f"echo {number} $EPOCHREALTIME >> seconds")
    lines += ["trap - ERR", "kill $(jobs -p) 2>/dev/null", "echo ran all blocks > failures.done"]
    return "\n".join(lines) + "\n"


def run_readme(work: Path, port: int, blocks: list[Block]) -> float:
    (work / "driver.sh").write_text(driver(blocks, port, work))
    unset = ("BOSUN_", "PYTHONPATH", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")  # a fresh shell
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
    started = time.monotonic()
    process = subprocess.Popen(["bash", "driver.sh"], cwd=work, env=env, start_new_session=True)
    try:
        process.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # the caller finds no failures.done and says so, with the server log
    finally:
        with contextlib.suppress(ProcessLookupError):  # a server a failed block left running
            os.killpg(process.pid, signal.SIGKILL)
    return time.monotonic() - started


def sse_frames(output: str) -> list[tuple[str, str]]:
    """Each SSE frame's event type and data line in what the block printed."""
    return re.findall(r"^event: (\w+)\r?\ndata: (.*?)\r?$", output, re.MULTILINE)


def in_order(shown: list[str], events: list[str]) -> bool:
    """Whether ``shown`` is a subsequence of ``events`` (other events may come between).
    One line of the README at a time: parallel steps interleave differently each run."""
    remaining = iter(events)
    return all(event in remaining for event in shown)


def check_block(number: int, block: Block, output: str) -> None:
    """What the README shows for a block is in what it printed: the events (in the order
    each line shows them), the literal JSON pairs and the answer's text."""
    documented, frames = block.documented(), sse_frames(output)
    events = [event for event, _ in frames]
    shown = shown_events(documented)
    missing = Counter(shown) - Counter(events)
    assert not missing, f"block {number} showed events it did not print: {missing}\n{output}"
    for line in documented.splitlines():
        assert in_order(shown_events(line), events), f"block {number}: {line!r} not in {events}"
    compact = re.sub(r'":\s+', '":', output)
    unseen = sorted(pair for pair in shown_pairs(documented) if pair not in compact)
    assert not unseen, f"block {number} showed JSON it did not print: {unseen}\n{output}"
    answer = "".join(json.loads(data)["delta"] for event, data in frames if event == "text_delta")
    for piece in shown_answers(documented):
        assert piece in answer, f"block {number} showed {piece!r}, answered {answer!r}"


def test_the_readme_walkthroughs_run_in_one_shell_as_documented(tmp_path: Path) -> None:
    if shutil.which("curl") is None:  # .ci/curl.sh installs it
        assert not os.environ.get("CI"), "the README test needs curl"
        pytest.skip("the README's commands need curl")
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 12, "the README lost its marked walkthrough blocks"
    work = workspace(tmp_path)

    elapsed = run_readme(work, free_port(), blocks)

    log = (work / "bosun.log").read_text() if (work / "bosun.log").exists() else ""
    failures = (work / "failures").read_text() if (work / "failures").exists() else ""
    assert (work / "failures.done").exists(), f"timed out after {elapsed:.0f} s\n{log[-3000:]}"
    outputs = [(work / "out" / str(n)).read_text() for n in range(len(blocks))]
    assert failures == "", failures + "\n" + _context(failures, outputs, work)
    for number, (block, output) in enumerate(zip(blocks, outputs, strict=True)):
        check_block(number, block, output)
    assert "turn.crashed" not in log and "Traceback" not in log, log[-3000:]
    assert any(MCP_HEADER_VALUE in block.script for block in blocks)
    assert not any(MCP_HEADER_VALUE in output for output in outputs), "a secret was shown"
    print(f"README walkthroughs: {len(blocks)} blocks in {elapsed:.1f} s")
    print((work / "seconds").read_text())


def _context(failures: str, outputs: list[str], work: Path) -> str:
    numbers = {int(n) for n in re.findall(r"^block (\d+):", failures, re.MULTILINE)}
    return "\n".join(
        f"--- block {n} stdout:\n{outputs[n][-2000:]}\n--- stderr:\n"
        f"{(work / 'out' / f'{n}.err').read_text()[-2000:]}"
        for n in sorted(numbers)
    )


@pytest.mark.parametrize(
    ("documented", "events", "pairs"),
    [
        (
            'tool_resolved {"tool_use_id":"toolu_x","decision":"approved"}\n'
            'text_delta … "Deleted the done…" message_done usage done\n'
            'done {"status": "completed"}',
            {"tool_resolved": 1, "text_delta": 1, "message_done": 1, "usage": 1, "done": 2},
            {'"tool_use_id":"toolu_x"', '"decision":"approved"', '"status":"completed"'},
        ),
        ('{"id":"art_…","version":1,"ok":true,"output":{…}}', {}, {'"version":1', '"ok":true'}),
    ],
)
def test_what_a_block_shows_is_read_outside_json_strings(
    documented: str, events: dict[str, int], pairs: set[str]
) -> None:
    assert Counter(shown_events(documented)) == Counter(events)
    assert shown_pairs(documented) == pairs


def test_answer_text_is_read_after_text_delta_without_the_elisions() -> None:
    shown = 'text_delta … "Done: I found Sam, and created…"\ntext_delta "Deleted it."'

    assert shown_answers(shown) == ["Done: I found Sam, and created", "Deleted it."]


def test_a_line_of_events_is_a_subsequence_of_what_was_printed() -> None:
    printed = ["session_started", "step_started", "tool_started", "usage", "done"]

    assert in_order(["session_started", "tool_started", "done"], printed)
    assert not in_order(["tool_started", "step_started"], printed)
