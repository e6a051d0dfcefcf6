"""An org's OpenAPI toolsets as Bosun tools, called over HTTP with the user's identity.

Each operation (``tools._openapi_map``) becomes a ``ToolDef`` named ``toolset.action``
that the runner governs like any tool: gates, confirmation of destructive calls, recorded
executions, undo through ``x-bosun-inverse``. Every request goes through the egress guard
and carries ``Authorization: Bearer`` with the caller's identity: a JWT Bosun signs per
call with the toolset's own secret (``signed``), or the caller's own token
(``forward``, interactive turns only). The server's keys never leave it.

Failures are typed ``ToolError``s the model can act on: ``api_not_found``,
``api_forbidden``, ``api_rejected`` (a 4xx, with the API's own message), and the
transient ``api_unavailable`` / ``api_timeout``. Idempotent requests (GET, HEAD, PUT,
DELETE) are tried once more after a 5xx or a failed connection; a POST or PATCH only when
its connection failed (nothing was sent).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx
import structlog
import yaml
from pydantic import BaseModel

from egress import PUBLIC_ONLY, EgressPolicy, EgressRefused
from store import OpenApiToolsetRecord, OpenApiToolsetSpec, SecretsKeyError, Store, utcnow
from store._openapi_toolsets import MAX_DOCUMENT_CHARS
from tools._mcp_tools import (
    CALL_GRACE_S,
    MAX_ERROR_CHARS,
    _refused,
    audit_change,
    input_model,
)
from tools._openapi_map import InvalidDocumentError, Operation, evaluate, operations
from tools._registry import Inverse, ToolDef
from tools._runtime import Signer, ToolContext, ToolError, caller_token

_log = structlog.get_logger("bosun.openapi")

TOKEN_TTL_S: Final = 60
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE"})
RETRY_DELAY_S: Final = 0.2
FETCH_TIMEOUT_S: Final = 10.0
_BACKGROUND: Final = ("schedule:", "webhook:")
"""User ids of runs no person triggered: their calls carry the agent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Bound:
    """Who a toolset's tools act for, fixed when an agent's kit is set up."""

    agent: str
    background: bool


@dataclass(frozen=True, slots=True)
class _Mapped:
    """A toolset version and its operations, with their input models built once."""

    record: OpenApiToolsetRecord
    operations: list[tuple[Operation, type[BaseModel]]]


class OpenApiProvider:
    """This worker's OpenAPI toolsets: maps each toolset version once, and calls its API
    through one egress-guarded HTTP client."""

    def __init__(self, store: Store, *, signer: Signer, egress: EgressPolicy = PUBLIC_ONLY) -> None:
        self._store = store
        self._signer = signer
        self._egress = egress
        self._mapped: dict[str, _Mapped] = {}
        self._http: httpx.AsyncClient | None = None

    async def tools(
        self, org_id: str, toolsets: Iterable[str], *, agent: str, background: bool = False
    ) -> list[ToolDef]:
        """The tools of the named toolsets (unknown names contribute none), acting for
        ``agent``'s caller; ``background``: a run nobody watches (no token to forward)."""
        wanted = set(toolsets)
        current = await self._store.openapi_toolsets.versions(org_id) if wanted else {}
        bound = _Bound(agent=agent, background=background)
        tools: list[ToolDef] = []
        for name in sorted(wanted & set(current)):
            mapped = await self._current(org_id, name, current[name])
            if mapped is not None:
                tools += self._tool_defs(mapped, bound)
        return tools

    async def _current(self, org_id: str, name: str, key: tuple[str, int]) -> _Mapped | None:
        """The toolset's mapping at ``key`` (its id and version): mapped once per version,
        its document read only then. ``None`` when it is gone or no longer maps."""
        cached = self._mapped.get(key[0])
        if cached is not None and cached.record.version == key[1]:
            return cached
        record = await self._store.openapi_toolsets.get(org_id, name)
        if record is None:
            return None
        try:
            cached = self._mapped[record.id] = _Mapped(record, map_record(record))
        except InvalidDocumentError:  # checked when saved: a document of an older Bosun
            _log.warning("openapi.unusable", org_id=org_id, toolset=name)
            return None
        return cached

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _tool_defs(self, mapped: _Mapped, bound: _Bound) -> list[ToolDef]:
        record = mapped.record
        by_id = {op.operation_id: op for op, _ in mapped.operations}
        return [
            ToolDef(
                name=f"{record.name}.{op.action}",
                summary=op.summary,
                input_model=model,
                category=op.category,
                audit=None if op.category == "read" else f"openapi.{record.name}.{op.action}",
                schema=op.schema,
                inverse=_inverse(record.name, op, by_id),
                handler=self._handler(record, op, bound),
                timeout_s=record.timeout_s * 2 + RETRY_DELAY_S + CALL_GRACE_S,
            )
            for op, model in mapped.operations
        ]

    def _handler(
        self, record: OpenApiToolsetRecord, op: Operation, bound: _Bound
    ) -> Callable[[BaseModel, ToolContext], Awaitable[Any]]:
        async def run(args: BaseModel, ctx: ToolContext) -> Any:
            token = await self._identity(record, bound, ctx)
            values = args.model_dump(mode="json")
            response = await self._send(record, op, values, token)
            result = _result(record.name, op, response)
            if op.category != "read":  # a change in the API: audited like a built-in write
                label = f"openapi.{record.name}.{op.action}"
                await audit_change(ctx, label, record.name, op.operation_id, kind="openapi")
            return result

        return run

    async def _identity(self, record: OpenApiToolsetRecord, bound: _Bound, ctx: ToolContext) -> str:
        """The bearer token this call sends: the caller's own, or a fresh signed one."""
        if record.identity_mode == "forward":
            token = None if bound.background else caller_token.get()
            if token is None:
                raise ToolError(
                    "identity_unavailable",
                    f"{record.name} acts as the signed-in user, and this run has no user's "
                    "token to forward (a background run, or a resumed one)",
                    hint="Tell the user to do this from a chat, or ask an owner for a "
                    "signed-identity toolset",
                )
            return token
        try:
            secret = await self._store.openapi_toolsets.secret(record)
        except SecretsKeyError:
            secret = None
        if secret is None:
            raise ToolError(
                "identity_unavailable", f"{record.name}: its signing secret cannot be read",
                hint="Tell the user the toolset is misconfigured; an owner must fix it",
            )  # fmt: skip
        return self._signer(_claims(record.name, bound, ctx), secret)

    async def _send(
        self, record: OpenApiToolsetRecord, op: Operation, values: dict[str, Any], token: str
    ) -> httpx.Response:
        """Send once, and once more after a 5xx or a lost connection when that is safe."""
        where = f"{record.name}.{op.action}"
        try:
            request = _request(record, op, values, token)
        except (httpx.InvalidURL, ValueError):  # a host that cannot be encoded (IDNA)
            raise ToolError(
                "api_unavailable", f"{where}: the toolset's base_url cannot be called",
                hint="Tell the user; an owner must fix the toolset's base_url",
            ) from None  # fmt: skip
        for attempt in (1, 2):
            try:
                response = await self._client().send(request)
            except EgressRefused:
                raise ToolError(
                    "egress_refused", f"{where}: the API's address is not one Bosun may reach",
                    hint="Tell the user; an owner must point base_url at a public address",
                ) from None  # fmt: skip
            except httpx.TimeoutException:
                raise _transient("api_timeout", f"{where} did not answer in time") from None
            except httpx.TransportError as exc:
                unsent = isinstance(exc, httpx.ConnectError)
                if attempt == 2 or not (unsent or op.method in IDEMPOTENT):
                    raise _transient(
                        "api_unavailable", f"{where}: the API is unreachable"
                    ) from None
            else:
                if response.status_code < 500 or attempt == 2 or op.method not in IDEMPOTENT:
                    return response
            await asyncio.sleep(RETRY_DELAY_S)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            from egress import httpx_client

            self._http = httpx_client(self._egress, follow_redirects=False)
        return self._http


def map_record(record: OpenApiToolsetRecord) -> list[tuple[Operation, type[BaseModel]]]:
    """A toolset's operations that can be tools, each with its input model. An operation
    whose name is not a valid (or is a repeated) tool name, or whose schema is broken,
    is left out; a document that is not usable raises ``InvalidDocumentError``."""
    found = operations(
        record.document, include=record.include, exclude=record.exclude,
        categories=record.categories,
    )  # fmt: skip
    kept: list[tuple[Operation, type[BaseModel]]] = []
    names: set[str] = set()
    for op in found:
        name = f"{record.name}.{op.action}"
        if _refused(name, names, len(kept), len(found)) is not None:
            _log.warning("openapi.operation_skipped", toolset=record.name, operation=op.action)
            continue
        try:
            model = input_model(op.schema)
        except Exception:
            _log.warning("openapi.schema_skipped", toolset=record.name, operation=op.action)
            continue
        names.add(name)
        kept.append((op, model))
    return kept


def preview(org_id: str, name: str, spec: OpenApiToolsetSpec) -> list[Operation]:
    """The operations ``spec`` would offer as tools, before it is saved
    (``InvalidDocumentError`` for a document no tool could come from)."""
    probe = OpenApiToolsetRecord(
        id="", org_id=org_id, name=name, document=spec.document, source_url=spec.source_url,
        base_url=spec.base_url, include=spec.include, exclude=spec.exclude,
        identity_mode="signed", categories=spec.categories, timeout_s=spec.timeout_s,
        version=0, created_at=utcnow(), updated_at=utcnow(),
    )  # fmt: skip
    return [op for op, _ in map_record(probe)]


class DocumentUnreachableError(Exception):
    """The OpenAPI document's URL could not be read; the message says how it failed."""


async def fetch_document(url: str, egress: EgressPolicy) -> dict[str, Any]:
    """The OpenAPI document at ``url`` (JSON or YAML), through the egress guard:
    ``EgressRefused``, ``DocumentUnreachableError``, or ``InvalidDocumentError``."""
    from egress import httpx_client

    try:
        async with (
            httpx_client(egress, timeout=FETCH_TIMEOUT_S) as http,
            http.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise DocumentUnreachableError(f"GET {url} answered {response.status_code}")
            text = await _read_bounded(response)
    except InvalidDocumentError:
        raise
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # ValueError: a bad IDN
        raise DocumentUnreachableError(
            f"GET {url} failed ({type(exc).__name__}): check the URL and that it is up"
        ) from None
    return parse_document(text)


async def _read_bounded(response: httpx.Response) -> str:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_DOCUMENT_CHARS:
            raise InvalidDocumentError(f"the document is over {MAX_DOCUMENT_CHARS} bytes")
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def parse_document(text: str) -> dict[str, Any]:
    """A document's JSON or YAML text as a JSON object (``InvalidDocumentError``)."""
    try:
        document = json.loads(text)
    except ValueError:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            document = None
    if not isinstance(document, dict):
        raise InvalidDocumentError("the document is neither a JSON nor a YAML object")
    parsed: dict[str, Any] = json.loads(json.dumps(document, default=str))  # YAML's dates
    return parsed


def _inverse(toolset: str, op: Operation, by_id: dict[str, Operation]) -> Inverse | None:
    spec = op.inverse
    target = by_id.get(spec.operation_id) if spec else None
    if spec is None or target is None or op.category == "read" or target.category == "read":
        return None
    parameters = spec.parameters

    def build(args: BaseModel, output: Any) -> dict[str, Any]:
        request = args.model_dump(mode="json")
        return {k: evaluate(v, request=request, response=output) for k, v in parameters.items()}

    return Inverse(tool=f"{toolset}.{target.action}", build=build)


def _claims(toolset: str, bound: _Bound, ctx: ToolContext) -> dict[str, Any]:
    """Who acts: the user (for a run, the user who triggered it), or the agent when a
    schedule or a webhook did; for this toolset only (``aud``), for a minute."""
    now = int(time.time())
    person = not ctx.user_id.startswith(_BACKGROUND)
    return {
        "sub": ctx.user_id if person else f"agent:{bound.agent}",
        "org": ctx.org_id,
        "role": ctx.role,
        "agent": bound.agent,
        "turn": ctx.turn_id,
        "aud": toolset,
        "iat": now,
        "exp": now + TOKEN_TTL_S,
    }


def _request(
    record: OpenApiToolsetRecord, op: Operation, values: dict[str, Any], token: str
) -> httpx.Request:
    path = op.path
    for name in op.path_params:
        path = path.replace("{" + name + "}", quote(str(values[name]), safe=""))
    query = {n: _query_value(values[n]) for n in op.query_params if values.get(n) is not None}
    return httpx.Request(
        op.method,
        record.base_url.rstrip("/") + path,
        params=query,
        json=values.get("body") if op.body and "body" in values else None,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        extensions={"timeout": httpx.Timeout(record.timeout_s).as_dict()},
    )


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return value


def _result(toolset: str, op: Operation, response: httpx.Response) -> Any:
    """The response body for the model (JSON when it is JSON), or the typed error."""
    status = response.status_code
    if status >= 500:
        raise _transient("api_unavailable", f"{toolset}.{op.action}: the API failed ({status})")
    if status >= 400:
        raise _client_error(toolset, op, response)
    if not response.content:
        return {"status": status}
    try:
        return response.json()
    except ValueError:
        return {"status": status, "text": response.text[:MAX_ERROR_CHARS]}


_CLIENT_CODES: Final = {401: "api_forbidden", 403: "api_forbidden", 404: "api_not_found"}


def _client_error(toolset: str, op: Operation, response: httpx.Response) -> ToolError:
    status = response.status_code
    message = _api_message(response)
    return ToolError(
        _CLIENT_CODES.get(status, "api_rejected"),
        f"{toolset}.{op.action} was refused ({status}): {message}",
        hint="The API said why: fix the input and call it again, or tell the user",
    )


def _api_message(response: httpx.Response) -> str:
    """The API's own words: a JSON error's ``detail``/``message``/``error``/``title``,
    else the text, bounded."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:MAX_ERROR_CHARS] or response.reason_phrase
    if isinstance(body, dict):
        for key in ("detail", "message", "error", "title"):
            if isinstance(body.get(key), str):
                return str(body[key])[:MAX_ERROR_CHARS]
    return json.dumps(body)[:MAX_ERROR_CHARS]


def _transient(code: str, message: str) -> ToolError:
    return ToolError(
        code, message, hint="A passing failure: go on without it, or try once more later"
    )


__all__ = [
    "DocumentUnreachableError",
    "InvalidDocumentError",
    "OpenApiProvider",
    "fetch_document",
    "map_record",
    "parse_document",
    "preview",
]
