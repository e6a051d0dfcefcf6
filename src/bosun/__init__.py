"""Bosun's composition root: settings, logging, migrations, the app factory and the CLI."""

__version__ = "0.1.0"
