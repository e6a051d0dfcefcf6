"""``bosun config``: the settings this environment gives, each with where it came from.

Secrets are masked (``SecretStr`` settings, a password in a URL), so the output may be
pasted into an issue. ``--markdown`` prints docs/settings.md's generated table instead.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from bosun.settings import Settings
from bosun.settings_doc import config_lines, effective, markdown


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.markdown:
        print(markdown(), end="")
        return 0
    values = effective(settings)
    if args.json:
        print(json.dumps([asdict(v) for v in values], indent=2))
        return 0
    print("\n".join(config_lines(values)))
    return 0
