"""OpenAPI toolsets per org: an API's OpenAPI document, where to call it, which operations
to offer, and how each call proves who the user is (docs/openapi.md).

Every toolset has a signing secret, made when it is created, returned once by ``put`` and
kept encrypted with the org keys' ``SecretBox`` (a replace keeps it). ``put`` creates or
replaces a toolset in one upsert; a replace bumps ``version``, which the worker's mapping
cache compares.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from sqlalchemy import Float, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column

from store._db import Database
from store._mcp_toolsets import _URL, CATEGORIES, MAX_URL_CHARS
from store._models import Base, JSONData, utcnow
from store._org_keys import SecretBox, require_box
from store._toolsets import InvalidToolsetError, NamedRows, check_name, check_timeout

IdentityMode = Literal["signed", "forward"]
IDENTITY_MODES: Final = ("signed", "forward")
OPERATION_PATTERN: Final = r"^[A-Za-z0-9_.\-]{1,128}$"
"""An operationId or a tag, as ``operations`` and ``categories`` name them."""
MAX_SELECTORS: Final = 500
MAX_DOCUMENT_CHARS: Final = 2_000_000
"""An OpenAPI document's JSON, at most (a larger API is better split into toolsets)."""


class OpenApiToolsetRow(Base):
    __tablename__ = "openapi_toolsets"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_openapi_toolsets_org_name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(40))
    document: Mapped[dict[str, Any]] = mapped_column(JSONData)
    source_url: Mapped[str | None] = mapped_column(Text, default=None)
    base_url: Mapped[str] = mapped_column(Text)
    include: Mapped[list[str]] = mapped_column(JSONData)
    exclude: Mapped[list[str]] = mapped_column(JSONData)
    identity_mode: Mapped[str] = mapped_column(String(16))
    categories: Mapped[dict[str, str]] = mapped_column(JSONData)
    timeout_s: Mapped[float] = mapped_column(Float)
    secret_enc: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenApiToolsetSpec:
    """What an owner configures: the document (fetched already when given by URL, which
    ``source_url`` records), the API's base URL, the operations, the identity mode."""

    document: dict[str, Any]
    base_url: str
    source_url: str | None = None
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    identity_mode: str = "signed"
    categories: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenApiToolsetRecord:
    id: str
    org_id: str
    name: str
    document: dict[str, Any]
    source_url: str | None
    base_url: str
    include: list[str]
    exclude: list[str]
    identity_mode: IdentityMode
    categories: dict[str, str]
    timeout_s: float
    version: int
    created_at: datetime
    updated_at: datetime


_COLUMNS = (
    OpenApiToolsetRow.id,
    OpenApiToolsetRow.org_id,
    OpenApiToolsetRow.name,
    OpenApiToolsetRow.document,
    OpenApiToolsetRow.source_url,
    OpenApiToolsetRow.base_url,
    OpenApiToolsetRow.include,
    OpenApiToolsetRow.exclude,
    OpenApiToolsetRow.identity_mode,
    OpenApiToolsetRow.categories,
    OpenApiToolsetRow.timeout_s,
    OpenApiToolsetRow.version,
    OpenApiToolsetRow.created_at,
    OpenApiToolsetRow.updated_at,
)


def _record(row: Any) -> OpenApiToolsetRecord:
    return OpenApiToolsetRecord(**row._asdict())


def _check(name: str, spec: OpenApiToolsetSpec) -> None:
    """Refuse (``InvalidToolsetError``) what no call could use; the document's own shape
    is the mapping's to judge (``tools.map_openapi``)."""
    check_name(name)
    for what, url in (("base_url", spec.base_url), ("openapi_url", spec.source_url)):
        if url is not None and (len(url) > MAX_URL_CHARS or not _URL.fullmatch(url)):
            raise InvalidToolsetError(
                f"{what}: an http:// or https:// URL of at most {MAX_URL_CHARS} characters, "
                "without credentials"
            )
    if spec.identity_mode not in IDENTITY_MODES:
        raise InvalidToolsetError(f"identity mode {spec.identity_mode!r:.20}: signed or forward")
    if len(spec.include) + len(spec.exclude) + len(spec.categories) > MAX_SELECTORS:
        raise InvalidToolsetError(f"at most {MAX_SELECTORS} operations named in all")
    for operation, category in spec.categories.items():
        if category not in CATEGORIES:
            raise InvalidToolsetError(
                f"category of {operation!r:.60}: read, write or destructive, not {category!r:.20}"
            )
    check_timeout(spec.timeout_s)


class OpenApiToolsets(NamedRows[OpenApiToolsetRecord]):
    """Repository of the ``openapi_toolsets`` table; the signing secrets need a box."""

    def __init__(self, db: Database, box: SecretBox | None) -> None:
        super().__init__(db, OpenApiToolsetRow, _COLUMNS, _record)
        self._box = box

    def _require_box(self) -> SecretBox:
        return require_box(
            self._box,
            "An OpenAPI toolset's signing secret is stored encrypted",
        )

    async def put(
        self, org_id: str, name: str, spec: OpenApiToolsetSpec
    ) -> tuple[OpenApiToolsetRecord, str | None]:
        """Create the toolset, or replace it whole (its next ``version``, the same secret).
        Returns the record and, only when this call created it, its new signing secret."""
        _check(name, spec)
        secret = secrets.token_urlsafe(32)
        sealed = self._require_box().encrypt(secret)
        now = utcnow()
        values: dict[str, Any] = {
            "document": spec.document, "source_url": spec.source_url,
            "base_url": spec.base_url, "include": list(spec.include),
            "exclude": list(spec.exclude), "identity_mode": spec.identity_mode,
            "categories": dict(spec.categories), "timeout_s": float(spec.timeout_s),
            "updated_at": now,
        }  # fmt: skip
        new = {"id": f"oas_{secrets.token_hex(16)}", "org_id": org_id, "name": name}
        statement = (
            self._db.insert(OpenApiToolsetRow)
            .values(**new, version=1, created_at=now, secret_enc=sealed, **values)
            .on_conflict_do_update(
                index_elements=["org_id", "name"],
                set_={**values, "version": OpenApiToolsetRow.version + 1},
            )
            .returning(*_COLUMNS, OpenApiToolsetRow.secret_enc)
        )
        async with self._db.write() as conn:
            row = (await conn.execute(statement)).one()
        fields = row._asdict()
        created = fields.pop("secret_enc") == sealed
        return OpenApiToolsetRecord(**fields), secret if created else None

    async def versions(self, org_id: str) -> dict[str, tuple[str, int]]:
        """Each toolset's ``(id, version)`` by name, without reading its document: how a
        worker tells whether what it mapped is still current."""
        query = select(
            OpenApiToolsetRow.name, OpenApiToolsetRow.id, OpenApiToolsetRow.version
        ).where(OpenApiToolsetRow.org_id == org_id)
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return {row.name: (row.id, row.version) for row in rows}

    async def names(self, org_id: str) -> list[str]:
        """The org's toolset names, without reading their documents."""
        query = select(OpenApiToolsetRow.name).where(OpenApiToolsetRow.org_id == org_id)
        async with self._db.read() as conn:
            return list((await conn.execute(query.order_by(OpenApiToolsetRow.name))).scalars())

    async def secret(self, record: OpenApiToolsetRecord) -> str | None:
        """The toolset's signing secret, decrypted (``None`` once it was deleted;
        ``SecretsKeyError`` when the server key cannot decrypt it)."""
        query = select(OpenApiToolsetRow.secret_enc).where(OpenApiToolsetRow.id == record.id)
        async with self._db.read() as conn:
            sealed = (await conn.execute(query)).scalar()
        return None if sealed is None else self._require_box().decrypt(sealed)
