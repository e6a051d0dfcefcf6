"""Bounded input: what every request is checked against before any work is done.

Litestar validates each route's typed parameters and pydantic validates the bodies; this
module holds what neither can state per route: the ids in paths, which mean the same on
every route, the shape of a JSON body before it is decoded (``msgspec`` recurses once
per nesting level, so a body of a few thousand brackets would exhaust the stack), and
text no database keeps: a NUL character (PostgreSQL refuses it in text and JSON) or a lone
UTF-16 surrogate (no database encodes it, and no JSON encoder writes it back), in any
string of a path, a query, a header or a JSON body, at any depth, keys included. Every
refusal is a 400 ``invalid_request`` whose message says what to change. The OpenAPI
states the same bounds (``_openapi``).
"""

from __future__ import annotations

import json
import re
from collections import deque
from datetime import UTC, datetime
from itertools import accumulate
from typing import Annotated, Any

from litestar import Request
from litestar.params import ParameterKwarg, QueryParameter
from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from store import ARTIFACT_ID_PATTERN, TOOLSET_NAME_PATTERN
from stream._errors import ApiError

MAX_SEQ = 2**63 - 1
"""The largest sequence number, offset or count a request may name: a signed 64-bit
integer, the databases' ``BIGINT``."""
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(tzinfo=UTC)
"""The first and last instants a query may name: years 1 to 9999 in UTC."""
MAX_JSON_DEPTH = 32
"""How deep a JSON body may nest arrays and objects (the body itself is level 1)."""
MAX_CONTEXT_KEYS = 64
"""Keys of a run's ``context`` at its top level, whoever triggers the run."""
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
TOOL_USE_ID_PATTERN = r"^[!-~]{1,64}$"
"""Provider tool use ids: printable ASCII without spaces, at most the column's 64."""
RUN_ID_PATTERN = r"^run_[0-9a-f]{32}$"
THREAD_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
"""A chat protocol's thread id (the AI SDK's chat ``id``, AG-UI's ``threadId``): what their
id generators make, and UUIDs."""
PATH_IDS: dict[str, tuple[str, str]] = {
    "session_id": (UUID_PATTERN, "a session id (a UUID)"),
    "tool_use_id": (TOOL_USE_ID_PATTERN, "a tool use id (1-64 printable ASCII characters)"),
    "run_id": (RUN_ID_PATTERN, "a run id (run_ and 32 hex digits)"),
    "chat_id": (THREAD_ID_PATTERN, "a chat id (1-128 letters, digits or _.:-)"),
    "webhook_id": (r"^wh_[0-9a-f]{32}$", "a webhook id (wh_ and 32 hex digits)"),
    "subscription_id": (r"^sub_[0-9a-f]{32}$", "a subscription id (sub_ and 32 hex digits)"),
    "artifact_id": (ARTIFACT_ID_PATTERN, "an artifact id (art_ and 24 hex digits)"),
    "toolset": (TOOLSET_NAME_PATTERN, "an MCP toolset name (1-40 of a-z, 0-9 and _)"),
}
"""Path parameters by name: the pattern they must match on every route, and what they are."""

BLANKS = "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(
    map(chr, range(0x2000, 0x200B))
)
"""Whitespace in a message: JavaScript's ``\\s``, so that ``MESSAGE_PATTERN`` means the
same to this server and to JSON Schema validators (Python's ``\\s`` is wider)."""
_BLANK_CLASS = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
MESSAGE_PATTERN = rf"^[{_BLANK_CLASS}]*[^\x00{_BLANK_CLASS}][^\x00]*$"
"""Some text besides whitespace, and no NUL (no database keeps one in text)."""

TEXT_PATTERN = r"^[^\x00]*$"
"""What every string a request carries must match: no NUL (nor, which JSON Schema cannot
say, a lone surrogate)."""

_PATH_ID_RES = {name: re.compile(pattern) for name, (pattern, _) in PATH_IDS.items()}
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_UNKEEPABLE = re.compile("[\x00\ud800-\udfff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _message_text(text: str) -> str:
    if "\x00" in text:
        raise PydanticCustomError("nul_character", "contains a NUL character (\\u0000); drop it")
    if not text.strip(BLANKS):
        raise PydanticCustomError("blank_message", "is only whitespace; send some text")
    return text


MessageText = Annotated[
    str,
    Field(min_length=1, json_schema_extra={"pattern": MESSAGE_PATTERN}),
    AfterValidator(_message_text),
]
"""A user's message: some text besides whitespace, without NUL. Its length limit is a
setting (``max_message_chars``), checked by the routes that take one."""


def check_message_length(text: str, limit: int) -> None:
    """Refuse a message longer than the ``max_message_chars`` setting."""
    if len(text) > limit:
        message = f"message is {len(text)} characters; the limit is {limit}: shorten it"
        raise ApiError(400, "invalid_request", message)


def utc_instant(text: str, *, name: str) -> datetime:
    """The RFC 3339 date-time ``text`` in UTC (a 400 when it is not one, or has no UTC
    offset; see ``parse_utc``)."""
    try:
        return parse_utc(text)
    except ValueError as exc:
        raise ApiError(400, "invalid_request", f"{name} {exc}, not {text!r:.80}") from None


def parse_utc(text: str) -> datetime:
    """The RFC 3339 date-time ``text`` in UTC; ``ValueError`` when it is not one, or has
    no UTC offset. An instant past the years Python counts once in UTC, as
    ``9999-12-31T23:59:59-01:00`` is, becomes the first or last one it can count."""
    example = "as in 2026-01-31T09:00:00Z"
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"must be a date-time, {example}") from None
    if value.utcoffset() is None:
        raise ValueError(f"needs a UTC offset, {example}")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return LAST_INSTANT if value.year == LAST_INSTANT.year else FIRST_INSTANT


def event_cursor(last_event_id: str) -> int:
    """The sequence number a ``Last-Event-ID`` header names, or 400."""
    seq = last_event_id.strip()
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 19 and int(seq) <= MAX_SEQ):
        raise ApiError(
            400,
            "invalid_request",
            f"Last-Event-ID must be a sequence number (0-{MAX_SEQ}), not {last_event_id!r:.80}",
        )
    return int(seq)


def int_query(*, ge: int, le: int = MAX_SEQ, description: str) -> ParameterKwarg:
    """A query parameter bounded to ``ge``..``le``, stated as exact integers in the OpenAPI
    (Litestar would write float bounds, and 2**63 - 1 as 2**63, and drop a 0)."""
    return QueryParameter(
        ge=ge, le=le, description=description, schema_extra={"minimum": ge, "maximum": le}
    )


def nests_deeper_than(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` deep.

    Brackets inside strings do not count. A body with at most ``limit`` opening brackets
    in all is not scanned (most bodies: microseconds); scanning 64 KiB takes 1-2 ms.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def check_path_ids(path_params: dict[str, Any]) -> None:
    """Refuse a path whose ids could never exist (and would reach the database as typed)."""
    for name, value in path_params.items():
        regex = _PATH_ID_RES.get(name)
        if regex is not None and not (isinstance(value, str) and regex.fullmatch(value)):
            what = PATH_IDS[name][1]
            raise ApiError(400, "invalid_request", f"{name} must be {what}, not {value!r:.80}")


def text_flaw(text: str) -> str | None:
    """Why a database cannot keep ``text`` (a NUL, a lone surrogate), or None."""
    found = _UNKEEPABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000); drop it"
    escape = f"\\u{ord(found.group()):04x}"
    return f"contains a lone surrogate ({escape}); send whole characters (surrogate pairs)"


def _member(path: str, key: str | int) -> str:
    """The JSON path of ``path``'s member ``key``: ``context.notes[2]``, ``a["b c"]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _NAME.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def value_flaw(value: Any) -> tuple[str, str] | None:
    """The JSON path of the shallowest string (or key) in the decoded JSON ``value`` that a
    database cannot keep, and why; None when there is none. Iterative: any depth."""
    queue: deque[tuple[str, Any]] = deque([("", value)])
    while queue:
        path, item = queue.popleft()
        if isinstance(item, str):
            flaw = text_flaw(item)
            if flaw is not None:
                return path or "body", flaw
        elif isinstance(item, dict):
            for key, member in item.items():
                flaw = text_flaw(key)
                if flaw is not None:
                    return path or "body", f"has a key that {flaw}"
                queue.append((_member(path, key), member))
        elif isinstance(item, list):
            queue.extend((_member(path, i), member) for i, member in enumerate(item))
    return None


def check_json_text(value: Any) -> None:
    """Refuse a decoded JSON body (or webhook payload) with a string a database cannot keep,
    naming it by its JSON path as a validation error would."""
    found = value_flaw(value)
    if found is not None:
        path, flaw = found
        raise ApiError(400, "invalid_request", f"Invalid request: {path} (body): {flaw}")


def check_params(request: Request[Any, Any, Any]) -> None:
    """Refuse a path parameter, query parameter or header a database cannot keep (Litestar
    decodes ``%00`` in a path or query to a NUL; an HTTP parser may let one through in a
    header)."""
    for source, items in (
        ("path", request.path_params.items()),
        ("query", request.query_params.multi_items()),
        ("header", request.headers.multi_items()),
    ):
        for name, value in items:
            if (flaw := text_flaw(name)) is not None:
                message = f"Invalid request: a {source} parameter's name {flaw}"
            elif isinstance(value, str) and (flaw := text_flaw(value)) is not None:
                message = f"Invalid request: {name} ({source}): {flaw}"
            else:
                continue
            raise ApiError(400, "invalid_request", message)


def check_json_body(body: bytes) -> None:
    """Refuse a body that is not UTF-8, nests deeper than ``MAX_JSON_DEPTH`` or holds a
    string a database cannot keep, before Litestar decodes it (its decoder refuses a lone
    surrogate without saying where). JSON text carries a NUL or a surrogate only as a
    ``\\u`` escape, so a body without one is not decoded here."""
    try:
        body.decode()
    except UnicodeDecodeError as exc:
        message = f"Request body is not UTF-8 (byte {exc.start}); send JSON as UTF-8"
        raise ApiError(400, "invalid_request", message) from None
    if nests_deeper_than(body, MAX_JSON_DEPTH):
        message = (
            f"Request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep; "
            "flatten it"
        )
        raise ApiError(400, "invalid_request", message)
    if b"\\u" in body:
        try:
            value = json.loads(body)
        except ValueError:
            return  # not JSON: Litestar's decoder says so
        check_json_text(value)


def _not_json(constant: str) -> Any:
    """Python reads ``NaN`` and ``Infinity``; JSON (and PostgreSQL's jsonb) does not."""
    raise ValueError(f"{constant} is not JSON")


def run_context(body: bytes) -> dict[str, Any]:
    """The context of a run an inbound webhook's ``body`` starts (an object as it is,
    anything else as ``{"event": ...}``), held to the bounds of ``POST
    /v1/agents/{handle}/runs``: the same nesting and keys as a context there, or 400."""
    check_json_body(body)
    try:
        payload = json.loads(body, parse_constant=_not_json)
    except ValueError:
        raise ApiError(400, "invalid_request", "Request body is not JSON; send JSON") from None
    context = payload if isinstance(payload, dict) else {"event": payload}
    # In a run's body the context is level 2; a wrapped payload is one level down again.
    depth = MAX_JSON_DEPTH - (1 if context is payload else 2)
    if nests_deeper_than(body, depth):
        message = (
            f"A run's context nests arrays and objects at most {MAX_JSON_DEPTH - 1} levels "
            "deep (a payload that is not an object is one level of its own); flatten it"
        )
        raise ApiError(400, "invalid_request", message)
    if len(context) > MAX_CONTEXT_KEYS:
        message = f"A run's context has at most {MAX_CONTEXT_KEYS} keys, not {len(context)}"
        raise ApiError(400, "invalid_request", message)
    return context


async def check_bounds(request: Request[Any, Any, Any]) -> None:
    """The app's ``before_request`` hook: path ids, the text of the path, query and headers,
    then the raw JSON body of routes that take one. Runs after auth and routing, before any
    parameter is decoded."""
    check_path_ids(request.path_params)
    check_params(request)
    if "data" in request.route_handler.parsed_fn_signature.parameters:
        check_json_body(await request.body())
