"""The development secrets key: ``serve --dev`` keeps one in its working directory.

Webhook, MCP and OpenAPI secrets are stored encrypted with ``BOSUN_SECRETS_KEY``, so a
first ``make serve`` without one could not add a webhook. ``serve --dev`` with the key
unset makes one in ``./.bosun-dev-secrets-key`` (mode 0600) and reuses it at every start:
what was encrypted under it stays readable. Without ``--dev`` the server never reads it.

The ``bosun`` commands that store or read secrets themselves (``mcp``, ``openapi``,
``agents``, ``run``, ``chat``) use the file only when run in that directory with neither
``BOSUN_SECRETS_KEY`` nor a JWT secret of their own: a development setup, where ``serve``
itself would need ``--dev``. A deployment (a real JWT secret) never picks it up.

``serve --dev --model SPEC`` also leaves SPEC in ``./.bosun-dev-model``, so ``bosun run
--wait`` run beside it in such a setup, with no model of its own, runs with the server's
model (a command cannot read another process's flags); a start without ``--model`` removes
the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet

from store import SecretsKeyError

DEV_KEY_FILE = ".bosun-dev-secrets-key"
DEV_MODEL_FILE = ".bosun-dev-model"
DEV_KEY_COMMANDS = frozenset({"mcp", "openapi", "agents", "run", "chat"})
"""The commands that store or read secrets (or run turns that do) with their own key."""


class DevKeyError(ValueError):
    """The key file is there but holds no Fernet key: never overwritten (what was
    encrypted under it would be lost)."""


def serve_key(directory: Path) -> tuple[Path, str, bool]:
    """``serve --dev``'s key: the file in ``directory``, made if missing; its path, the
    key, and whether this call made it."""
    path = directory.resolve() / DEV_KEY_FILE
    key = Fernet.generate_key().decode()
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made by an earlier start: reuse it
        return path, _read(path), False
    except OSError as exc:  # a read-only directory
        raise DevKeyError(
            f"cannot keep the development secrets key in {path} ({exc.strerror}): "
            "set BOSUN_SECRETS_KEY, or start in a writable directory"
        ) from None
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write(key + "\n")
    return path, key, True


def cli_key(directory: Path) -> tuple[Path, str] | None:
    """The key ``serve --dev`` keeps in ``directory``, if it made one there."""
    path = directory.resolve() / DEV_KEY_FILE
    return (path, _read(path)) if path.is_file() else None


def _read(path: Path) -> str:
    key = path.read_text(encoding="ascii", errors="replace").strip()
    try:
        Fernet(key)
    except ValueError:
        raise DevKeyError(
            f"{path} holds no Fernet key: delete it (what was encrypted under it is lost) "
            "or set BOSUN_SECRETS_KEY"
        ) from None
    return key


def serve_note(path: Path, *, created: bool) -> str:
    """What ``serve --dev`` prints about its key, beside the development token."""
    made = "made" if created else "reused"
    return (
        f"Development secrets key (BOSUN_SECRETS_KEY is unset): {made} {path}\n"
        "bosun commands run in this directory use it too while BOSUN_SECRETS_KEY and "
        "BOSUN_JWT_SECRET are unset; elsewhere: "
        f'export BOSUN_SECRETS_KEY="$(cat {path})"'
    )


def missing_key_help(exc: SecretsKeyError, command: str) -> str:
    """A ``SecretsKeyError`` said by a command, not the server: with no key at all, it is
    this command's environment that needs one (it encrypts and decrypts itself)."""
    if exc.needs is None:  # a key is set but does not fit: the store's message says so
        return str(exc)
    return (
        f"{exc.needs}, and bosun {command} encrypts and reads them itself: set "
        "BOSUN_SECRETS_KEY in this command's environment, to the server's key (beside "
        f"`bosun serve --dev`, run it in the server's directory: it uses {DEV_KEY_FILE})"
    )


def remember_model(directory: Path, spec: str | None) -> None:
    """``serve --dev``'s ``--model`` for the commands beside it; none: forget the last."""
    path = directory.resolve() / DEV_MODEL_FILE
    if spec is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(spec + "\n", encoding="utf-8")


def cli_model(directory: Path) -> tuple[Path, str] | None:
    """The model ``serve --dev --model SPEC`` last ran with in ``directory``, if any."""
    path = directory.resolve() / DEV_MODEL_FILE
    spec = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return (path, spec) if spec else None
