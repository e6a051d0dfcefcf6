"""Bosun's composition root: settings, logging, migrations, the app factory and the CLI.

Library users import from the front door (the README's "Public API"): ``bosun.tools`` to
declare tools, ``bosun.models`` for the ``Model`` protocol, ``bosun.testing`` for model
doubles, in-process turns and the fake provider server, ``bosun.events`` for what a turn
streams. Nothing is imported here, so ``import bosun`` (and ``bosun --version``) stays fast.
"""

__version__ = "0.1.0"
