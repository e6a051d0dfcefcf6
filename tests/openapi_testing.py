"""The example notes API (examples/notes_api) on 127.0.0.1, for OpenAPI toolset tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLE = Path(__file__).parents[1] / "examples" / "notes_api"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("notes_api_server", EXAMPLE / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


notes_api = _load()


@contextmanager
def notes_host(**secrets: Any) -> Iterator[tuple[Any, str]]:
    """The notes API in a thread: its state (``Notes``: set ``secret`` once known) and URL."""
    notes = notes_api.Notes(**secrets)
    server = notes_api.serve(notes)
    try:
        yield notes, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
