"""The ``bosun`` command: serve, migrate, token, org-tier, chat, plan, budget, prune,
agents, run, mcp, toolsets, config.

Parsing needs the standard library only (``bosun.cli_args``), so ``--help`` and
``--version`` answer before anything heavy loads; ``bosun.commands`` runs what was asked.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bosun.cli_args import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, then run its command; returns the exit status."""
    args = build_parser().parse_args(argv)
    # The settings, providers, store and HTTP stack load only now (bench/cli_start.py).
    from bosun.commands import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
