"""``bosun serve`` puts what start-up loaded out of the cyclic collector's reach before it
serves (``gc.freeze``): a full collection over it stalled every open stream for about
100 ms (bench/README.md, sse_throughput.py)."""

from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic import SecretStr

from bosun.commands import _serve
from bosun.settings import Settings


def test_serve_freezes_what_start_up_loaded_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen: list[int] = []

    def run(app: Any, **_: Any) -> None:  # instead of serving: how much is frozen now
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(uvicorn, "run", run)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'bosun.db'}",
        jwt_secret=SecretStr("s" * 40),
    )
    args = argparse.Namespace(dev=False, no_migrate=False, host="127.0.0.1", port=8000)
    before = gc.get_freeze_count()
    try:
        assert _serve(args, settings) == 0
    finally:
        gc.unfreeze()  # this test process goes on collecting as before
    assert len(frozen) == 1 and frozen[0] > before + 10_000, (before, frozen)
