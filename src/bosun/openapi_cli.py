"""``bosun openapi``: an org's OpenAPI toolsets from the command line, straight on the
database (no server needed), as ``bosun mcp`` does MCP toolsets (docs/openapi.md).

``add`` reads the document from a file, or fetches it from a URL through the egress
guard, checks that its operations can be tools, and stores the toolset; the signing
secret is printed once, alone on stdout (``SECRET=$(bosun openapi add …)``), when the
toolset is created; what was saved is said on stderr.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bosun.mcp_cli import Refused, printed, say
from bosun.migrate import upgrade
from bosun.settings import Settings
from bosun.wiring import configured_toolsets
from egress import EgressRefused, check_url
from store import (
    OpenApiToolsetRecord,
    OpenApiToolsetSpec,
    Store,
)
from tools import InvalidDocumentError


def run(args: argparse.Namespace, settings: Settings) -> int:
    return printed("openapi", _openapi(args, settings), settings, (InvalidDocumentError,))


async def _openapi(args: argparse.Namespace, settings: Settings) -> list[str]:
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    store = Store(settings.database_url, secrets_key=secrets_key)
    try:
        await upgrade(store, toolsets=configured_toolsets(settings))
        toolsets = store.openapi_toolsets
        if args.action == "list":
            return [_line(r) for r in await toolsets.list_for_org(args.org)]
        if args.action == "add":
            return await _add(store, args, settings)
        if args.action == "remove":
            if not await toolsets.delete(args.org, args.name):
                raise Refused(f"the org {args.org!r} has no OpenAPI toolset {args.name!r}")
            say(f"{args.name}: removed")
            return []
        record = await toolsets.get(args.org, args.name)
        if record is None:
            raise Refused(f"the org {args.org!r} has no OpenAPI toolset {args.name!r}")
        return [json.dumps(_shown(record), indent=2, default=str)]
    finally:
        await store.close()


def _line(record: OpenApiToolsetRecord) -> str:
    return f"{record.name}\tv{record.version}\t{record.identity_mode}\t{record.base_url}"


def _shown(record: OpenApiToolsetRecord) -> dict[str, Any]:
    from tools import map_record

    return {
        "name": record.name, "openapi_url": record.source_url, "base_url": record.base_url,
        "operations": {"include": record.include, "exclude": record.exclude},
        "identity": {"mode": record.identity_mode}, "categories": record.categories,
        "timeout_s": record.timeout_s, "version": record.version,
        "tools": [
            {"name": f"{record.name}.{op.action}", "method": op.method, "path": op.path,
             "category": op.category}
            for op, _ in map_record(record)
        ],
    }  # fmt: skip


async def _add(store: Store, args: argparse.Namespace, settings: Settings) -> list[str]:
    from tools import DocumentUnreachableError, fetch_document, preview

    if await store.mcp_toolsets.get(args.org, args.name) is not None:
        raise Refused(f"the org {args.org!r} has an MCP toolset {args.name!r}: choose another name")
    egress = settings.egress.policy()
    source = str(args.openapi)
    url = source if source.startswith(("http://", "https://")) else None
    try:
        await check_url(args.base_url, egress)
        if url is None:
            document = _read(Path(source))
        else:
            document = await fetch_document(url, egress)
    except EgressRefused as exc:
        raise Refused(f"{exc.message}: Bosun makes no requests to internal addresses") from None
    except DocumentUnreachableError as exc:
        raise Refused(str(exc)) from None
    except ValueError as exc:  # a malformed base URL
        raise Refused(f"--base-url: {exc}") from None
    spec = OpenApiToolsetSpec(
        document=document, base_url=args.base_url, source_url=url, include=args.include,
        exclude=args.exclude, identity_mode=args.identity, categories=dict(args.category),
        timeout_s=args.timeout,
    )  # fmt: skip
    tools = preview(args.org, args.name, spec)
    record, secret = await store.openapi_toolsets.put(args.org, args.name, spec)
    say(f"{record.name}: saved version {record.version} ({len(tools)} tools)")
    if secret is None:  # a replaced toolset keeps its secret: nothing to show
        return []
    say("its signing secret, on stdout, is shown once: give it to the API to verify calls")
    return [secret]


def _read(path: Path) -> dict[str, Any]:
    from tools import parse_document

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror}") from None
    document: dict[str, Any] = parse_document(text)
    return document
