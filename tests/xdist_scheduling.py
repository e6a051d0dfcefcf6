"""How ``make test`` hands the suite to its xdist workers (``--dist loadscope``).

A module's tests stay on one worker (some share a module-scoped server or browser and
build on each other's state), handed out in collection order, which conftest.py sorts
slowest module first; except the modules in ``SPLIT``, whose tests share nothing and
run long: each of their tests is a unit of its own, so two workers can run them at once.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling


class SplitScopeScheduling(LoadScopeScheduling):
    """``loadscope``, but a test of a module in ``split`` is a scope of its own."""

    def __init__(
        self, config: pytest.Config, log: Producer | None = None, *, split: Collection[str]
    ) -> None:
        super().__init__(config, log)
        self.split = tuple(split)

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        if module.endswith(self.split):
            return nodeid
        return super()._split_scope(nodeid)
