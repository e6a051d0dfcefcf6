"""MCP toolsets per org: where an MCP server is (a command, or a URL) and how its tools are
governed (categories, timeout). Secret header and environment values are encrypted at rest
with the org keys' ``SecretBox``; only their names are ever listed.

``put`` creates or replaces a toolset in one upsert; a replace bumps ``version``, which the
worker's connection pool compares to reconnect with the new configuration.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, cast

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._models import Base, JSONData, utcnow
from store._org_keys import SecretBox, require_box
from store._toolsets import InvalidToolsetError, NamedRows, check_name, check_timeout

HEADER_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
ENV_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"
URL_PATTERN: Final = r"^https?://[^\s\x00@/?#]+(?:[/?#][^\s\x00]*)?$"
"""An http(s) URL with a host and no credentials (a token goes in a header)."""
MAX_URL_CHARS: Final = 2048
TOOL_NAME_PATTERN: Final = r"^[!-~]{1,128}$"
"""An MCP tool's own name, as a per-tool category override names it."""
CATEGORIES: Final = ("read", "write", "destructive")
RESERVED_HEADERS: Final = frozenset(
    {
        "host", "content-length", "content-type", "transfer-encoding", "connection",
        "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id",
    }
)  # fmt: skip
"""Headers the MCP client sets itself: a toolset may not override them."""
MAX_HEADERS: Final = 32
MAX_ENV: Final = 64
MAX_COMMAND_ARGS: Final = 64
MAX_TOOL_CATEGORIES: Final = 500

Transport = Literal["stdio", "http"]
Category = Literal["read", "write", "destructive"]
_HEADER = re.compile(HEADER_NAME_PATTERN)
_ENV = re.compile(ENV_NAME_PATTERN)
_TOOL = re.compile(TOOL_NAME_PATTERN)
_URL = re.compile(URL_PATTERN)


def stdio_refusal(command: list[str] | None, allowed: Iterable[str]) -> str | None:
    """Why this server will not run ``command`` as a stdio toolset, or ``None`` when its
    program is on the operator's list (``mcp.stdio_commands``): exactly, as written."""
    programs = set(allowed)
    if not programs:
        return "This server runs no stdio MCP servers (mcp.stdio_commands is empty): use http"
    program = command[0] if command else ""
    if program not in programs:
        return (
            f"The program {program!r} is not on this server's mcp.stdio_commands; "
            "ask the operator to allow it, or use http"
        )
    return None


class McpToolsetRow(Base):
    __tablename__ = "mcp_toolsets"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_mcp_toolsets_org_name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(40))
    transport: Mapped[str] = mapped_column(String(8))
    url: Mapped[str | None] = mapped_column(Text, default=None)
    command: Mapped[list[str] | None] = mapped_column(JSONData, default=None)
    header_names: Mapped[list[str]] = mapped_column(JSONData)
    headers_enc: Mapped[str | None] = mapped_column(Text, default=None)
    env_names: Mapped[list[str]] = mapped_column(JSONData)
    env_enc: Mapped[str | None] = mapped_column(Text, default=None)
    default_category: Mapped[str | None] = mapped_column(String(16), default=None)
    tool_categories: Mapped[dict[str, str]] = mapped_column(JSONData)
    timeout_s: Mapped[float] = mapped_column(Float)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True, kw_only=True)
class McpToolsetSpec:
    """What an owner configures for a toolset, as ``put`` takes it: the secrets (header
    and env values) in clear, since ``put`` seals them."""

    transport: str
    url: str | None = None
    command: list[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    default_category: str | None = None
    tool_categories: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    enabled: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class McpToolsetRecord:
    id: str
    org_id: str
    name: str
    transport: Transport
    url: str | None
    command: list[str] | None
    header_names: list[str]
    env_names: list[str]
    default_category: Category | None
    tool_categories: dict[str, str]
    timeout_s: float
    enabled: bool
    version: int
    created_at: datetime
    updated_at: datetime


_COLUMNS = (
    McpToolsetRow.id,
    McpToolsetRow.org_id,
    McpToolsetRow.name,
    McpToolsetRow.transport,
    McpToolsetRow.url,
    McpToolsetRow.command,
    McpToolsetRow.header_names,
    McpToolsetRow.env_names,
    McpToolsetRow.default_category,
    McpToolsetRow.tool_categories,
    McpToolsetRow.timeout_s,
    McpToolsetRow.enabled,
    McpToolsetRow.version,
    McpToolsetRow.created_at,
    McpToolsetRow.updated_at,
)


def _record(row: Any) -> McpToolsetRecord:
    return McpToolsetRecord(**row._asdict())


def _check(name: str, spec: McpToolsetSpec) -> None:
    """Refuse (``InvalidToolsetError``) a configuration no connection could use: every
    writer (the API, the CLI) goes through ``put``, so all are held to the same rules."""
    url, command, headers, env = spec.url, spec.command, spec.headers, spec.env
    check_name(name)
    if spec.transport == "http":
        _check_http(url, command, env)
        _check_headers(headers)
    elif spec.transport == "stdio":
        _check_stdio(url, command, headers)
        _check_env(env)
    else:
        raise InvalidToolsetError(f"transport {spec.transport!r:.20}: stdio or http")
    category = spec.default_category
    if category is not None and category not in CATEGORIES:
        raise InvalidToolsetError(f"category {category!r:.30}: read, write or destructive")
    if len(spec.tool_categories) > MAX_TOOL_CATEGORIES:
        raise InvalidToolsetError(f"at most {MAX_TOOL_CATEGORIES} per-tool categories")
    for tool, category in spec.tool_categories.items():
        if not _TOOL.fullmatch(tool) or category not in CATEGORIES:
            raise InvalidToolsetError(
                f"tool category {tool!r:.60}={category!r:.30}: an MCP tool name (1-128 "
                "printable characters) and read, write or destructive"
            )
    check_timeout(spec.timeout_s)


def _check_http(url: str | None, command: list[str] | None, env: dict[str, str]) -> None:
    if command or env:
        raise InvalidToolsetError("an http toolset has a url and headers, no command or env")
    if url is None or len(url) > MAX_URL_CHARS or not _URL.fullmatch(url):
        raise InvalidToolsetError(
            f"an http toolset needs an http:// or https:// url (at most {MAX_URL_CHARS} "
            "characters, no credentials or spaces: put a token in a header)"
        )


def _check_stdio(url: str | None, command: list[str] | None, headers: dict[str, str]) -> None:
    if url is not None or headers:
        raise InvalidToolsetError("a stdio toolset has a command and env, no url or headers")
    if not command or len(command) > MAX_COMMAND_ARGS or not command[0].strip():
        raise InvalidToolsetError(
            f"a stdio toolset needs a command: a program and at most {MAX_COMMAND_ARGS - 1} "
            "arguments"
        )
    if any("\x00" in part or len(part) > 4096 for part in command):
        raise InvalidToolsetError("a command's parts are at most 4096 characters, without NUL")


def _check_headers(headers: dict[str, str]) -> None:
    if len(headers) > MAX_HEADERS:
        raise InvalidToolsetError(f"at most {MAX_HEADERS} headers")
    for name, value in headers.items():
        if not _HEADER.fullmatch(name) or name.lower() in RESERVED_HEADERS:
            raise InvalidToolsetError(
                f"header {name!r:.60}: letters, digits, - and _ (at most 100), and not one "
                f"the client sets ({', '.join(sorted(RESERVED_HEADERS))})"
            )
        if len(value) > 8192 or any(c in value for c in "\r\n\x00"):
            raise InvalidToolsetError(
                f"header {name}: its value is at most 8192 characters, with no line breaks"
            )


def _check_env(env: dict[str, str]) -> None:
    if len(env) > MAX_ENV:
        raise InvalidToolsetError(f"at most {MAX_ENV} environment variables")
    for name, value in env.items():
        if not _ENV.fullmatch(name):
            raise InvalidToolsetError(
                f"environment variable {name!r:.60}: letters, digits and _ (at most 100), "
                "not starting with a digit"
            )
        if len(value) > 32768 or "\x00" in value:
            raise InvalidToolsetError(
                f"environment variable {name}: its value is at most 32768 characters, no NUL"
            )


class McpToolsets(NamedRows[McpToolsetRecord]):
    """Repository of the ``mcp_toolsets`` table; secrets need a ``SecretBox``."""

    def __init__(self, db: Database, box: SecretBox | None) -> None:
        super().__init__(db, McpToolsetRow, _COLUMNS, _record)
        self._box = box

    def _require_box(self) -> SecretBox:
        return require_box(
            self._box,
            "MCP toolset headers and environment values are stored encrypted",
        )

    def _seal(self, values: dict[str, str]) -> str | None:
        return self._require_box().encrypt(json.dumps(values)) if values else None

    async def put(self, org_id: str, name: str, spec: McpToolsetSpec) -> McpToolsetRecord:
        """Create the toolset, or replace it whole (its next ``version``): headers and env
        not given again are dropped. ``InvalidToolsetError`` for a bad configuration,
        ``SecretsKeyError`` for secrets without a server key."""
        _check(name, spec)
        headers, env = spec.headers, spec.env
        now = utcnow()
        values: dict[str, Any] = {
            "transport": spec.transport, "url": spec.url, "command": spec.command,
            "header_names": sorted(headers), "headers_enc": self._seal(headers),
            "env_names": sorted(env), "env_enc": self._seal(env),
            "default_category": spec.default_category,
            "tool_categories": dict(spec.tool_categories),
            "timeout_s": float(spec.timeout_s), "enabled": spec.enabled, "updated_at": now,
        }  # fmt: skip
        new = {"id": f"mcp_{secrets.token_hex(16)}", "org_id": org_id, "name": name}
        statement = (
            self._db.insert(McpToolsetRow)
            .values(**new, version=1, created_at=now, **values)
            .on_conflict_do_update(
                index_elements=["org_id", "name"],
                set_={**values, "version": McpToolsetRow.version + 1},
            )
            .returning(*_COLUMNS)
        )
        async with self._db.write() as conn:
            return _record((await conn.execute(statement)).one())

    async def secrets(self, record: McpToolsetRecord) -> tuple[dict[str, str], dict[str, str]]:
        """The toolset's ``(headers, env)``, decrypted (empty when it has none, or was
        deleted; ``SecretsKeyError`` when the server key cannot decrypt them)."""
        query = select(McpToolsetRow.headers_enc, McpToolsetRow.env_enc).where(
            McpToolsetRow.id == record.id
        )
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return {}, {}
        return self._open(row.headers_enc), self._open(row.env_enc)

    def _open(self, sealed: str | None) -> dict[str, str]:
        if sealed is None:
            return {}
        return cast(dict[str, str], json.loads(self._require_box().decrypt(sealed)))
