"""Logging: the ``scrub`` processor and the JSON set-up keep private data out of the logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

import pytest
import structlog

from bosun.log import PRIVATE_KEYS, SCRUBBED, configure_logging, scrub

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJlLXZhbHVl"


def _scrub(**event: Any) -> dict[str, Any]:
    return dict(scrub(None, "info", event))


@pytest.mark.parametrize(
    "key",
    [
        "text",
        "prompt",
        "input",
        "output",
        "authorization",
        "api_key",
        "messages",
        "tool_input",
        "tool_output",
        "jwt_secret",
        "password",
    ],
)
def test_private_keys_are_replaced(key: str) -> None:
    assert key in PRIVATE_KEYS

    assert _scrub(event="turn", **{key: "private value"}) == {"event": "turn", key: SCRUBBED}


def test_private_values_of_any_type_are_replaced() -> None:
    event = _scrub(
        messages=[{"role": "user", "text": "hi"}],
        input={"query": "secret plans"},
        output=42,
        content=None,
    )

    assert event == {
        "messages": SCRUBBED,
        "input": SCRUBBED,
        "output": SCRUBBED,
        "content": SCRUBBED,
    }


def test_private_keys_match_case_insensitively() -> None:
    assert _scrub(Authorization="Basic dXNlcjpwYXNz", API_KEY="k") == {
        "Authorization": SCRUBBED,
        "API_KEY": SCRUBBED,
    }


def test_harmless_keys_are_kept() -> None:
    event = {
        "event": "turn finished",
        "trace_id": "t-123",
        "session_id": "s-456",
        "turn": 3,
        "duration_ms": 12.5,
        "ok": True,
        "model": "scripted:replies.yaml",
    }

    assert _scrub(**event) == event


def test_nested_mappings_and_lists_are_scrubbed() -> None:
    event = _scrub(
        request={
            "headers": {"Authorization": "Bearer abc.def", "accept": "text/event-stream"},
            "body": {"session_id": "s1", "prompt": "write me a poem"},
        },
        steps=[
            {"tool": "search", "tool_input": {"q": "x"}, "status": "ok"},
            ["nested", {"answer": "42"}],
            7,
        ],
        pair=("plain", {"secret": "hunter2"}),
    )

    assert event == {
        "request": {
            "headers": {"Authorization": SCRUBBED, "accept": "text/event-stream"},
            "body": {"session_id": "s1", "prompt": SCRUBBED},
        },
        "steps": [
            {"tool": "search", "tool_input": SCRUBBED, "status": "ok"},
            ["nested", {"answer": SCRUBBED}],
            7,
        ],
        "pair": ["plain", {"secret": SCRUBBED}],
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"token was {JWT} in the query", f"token was {SCRUBBED} in the query"),
        ("header Bearer s3cr3t-t0ken, retrying", f"header {SCRUBBED} retrying"),
        ("key sk-abcdefgh12345678 rejected", f"key {SCRUBBED} rejected"),
        ("key sk-ant-api03-abcdefghijk rejected", f"key {SCRUBBED} rejected"),
        ("key=sk-abcdefgh12345678", f"key={SCRUBBED}"),
        ("authorization: bearer s3cr3t", f"authorization: {SCRUBBED}"),
        ("sk-short stays", "sk-short stays"),
        ("task-runner-started for disk-partition-1", "task-runner-started for disk-partition-1"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_secrets_inside_other_strings_are_masked(value: str, expected: str) -> None:
    assert _scrub(event=value, error=value) == {"event": expected, "error": expected}


def test_secrets_in_nested_strings_are_masked() -> None:
    event = _scrub(details={"url": f"https://x.test/cb?jwt={JWT}"}, notes=[f"Bearer {JWT}"])

    assert event == {
        "details": {"url": f"https://x.test/cb?jwt={SCRUBBED}"},
        "notes": [SCRUBBED],
    }


def test_non_string_keys_in_nested_mappings_are_allowed() -> None:
    event = _scrub(counts={1: "one", None: "Bearer abc"}, by_role={("user", 2): {"text": "x"}})

    assert event == {
        "counts": {1: "one", None: SCRUBBED},
        "by_role": {("user", 2): {"text": SCRUBBED}},
    }


def test_scrub_does_not_modify_the_callers_data() -> None:
    headers = {"authorization": "Bearer abc"}
    event = {"event": "call", "headers": headers}

    assert _scrub(**event) == {"event": "call", "headers": {"authorization": SCRUBBED}}
    assert headers == {"authorization": "Bearer abc"}


@pytest.fixture
def configured_logging() -> Iterator[Callable[..., AbstractContextManager[None]]]:
    """``configure_logging`` for the length of a ``with`` block, then the previous set-up.

    The root logger is restored inside the test (pytest swaps its own capture handlers in
    and out around each phase); structlog is reset to its defaults afterwards.
    """

    @contextmanager
    def configured(fmt: Literal["auto", "json", "console"] = "json") -> Iterator[None]:
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        configure_logging(fmt=fmt, level="info")
        try:
            yield
        finally:
            root.handlers = handlers
            root.setLevel(level)
            structlog.reset_defaults()

    yield configured
    structlog.reset_defaults()


def _json_lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_json_logging_drops_private_text(
    configured_logging: Callable[..., AbstractContextManager[None]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with configured_logging("json"):
        structlog.get_logger().info("x", text="my secret words", trace_id="t1")
        structlog.get_logger().debug("below the level", trace_id="t2")

    out, err = capsys.readouterr()
    assert out == ""
    [line] = _json_lines(err)
    assert "my secret words" not in err
    assert line["event"] == "x"
    assert line["text"] == SCRUBBED
    assert line["trace_id"] == "t1"
    assert line["level"] == "info"
    assert line["timestamp"].endswith("Z")


def test_stdlib_logging_goes_through_the_same_scrubber(
    configured_logging: Callable[..., AbstractContextManager[None]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with configured_logging("json"):
        logging.getLogger("thirdparty").warning("sent header Bearer %s", JWT)
        logging.getLogger("thirdparty").info("kept")
        logging.getLogger("thirdparty").debug("dropped")

    lines = _json_lines(capsys.readouterr().err)
    assert JWT not in json.dumps(lines)
    assert [(line["event"], line["level"]) for line in lines] == [
        (f"sent header {SCRUBBED}", "warning"),
        ("kept", "info"),
    ]
    assert all("_record" not in line for line in lines)


def test_logging_set_up_is_restored_after_the_block(
    configured_logging: Callable[..., AbstractContextManager[None]],
) -> None:
    root = logging.getLogger()
    before = root.handlers[:]

    with configured_logging("json"):
        assert len(root.handlers) == 1
        assert structlog.is_configured()

    assert root.handlers == before
    assert not structlog.is_configured()
