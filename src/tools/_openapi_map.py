"""An OpenAPI 3.0/3.1 document's operations as tool shapes: names, input schemas,
categories and declared inverses (docs/openapi.md).

``$ref``s are resolved with ``referencing`` (the registry ``jsonschema`` uses) and
inlined, so each tool's schema stands alone; a recursive schema is cut at its second
visit (any value). The input of an operation is one object: its path and query
parameters by name, and its JSON request body as ``body``. The category comes from the
toolset's ``categories``, else ``x-bosun-category``, else the method.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast, get_args

from tools._mcp_tools import MAX_SUMMARY_CHARS, bosun_action
from tools._registry import Category
from tools._schema import _strip_titles

_DOC_URI: Final = "urn:bosun:openapi"
METHODS: Final = ("get", "head", "post", "put", "patch", "delete")
_BY_METHOD: Final[dict[str, Category]] = {
    "get": "read", "head": "read", "post": "write", "put": "write", "patch": "write",
    "delete": "destructive",
}  # fmt: skip
MAX_OPERATIONS: Final = 500
_MAX_DEPTH: Final = 64
MAX_NODES: Final = 200_000
"""Values in a document once its references are inlined, at most."""


class InvalidDocumentError(ValueError):
    """Not an OpenAPI 3.0/3.1 document this mapping can use; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InverseSpec:
    """``x-bosun-inverse``: the operation that undoes this one, and its parameters as
    OpenAPI runtime expressions (``$response.body#/id``) or constants."""

    operation_id: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One operation as a tool's shape: ``action`` is its operationId in snake case;
    ``path_params`` and ``query_params`` name the input's top-level properties that go in
    the URL, ``body`` says whether ``body`` is sent as JSON."""

    operation_id: str
    action: str
    method: str
    path: str
    summary: str
    tags: tuple[str, ...]
    category: Category
    schema: dict[str, Any]
    path_params: tuple[str, ...]
    query_params: tuple[str, ...]
    body: bool
    inverse: InverseSpec | None


def resolved(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with every local ``$ref`` replaced by what it points at."""
    # Here, not at import: `referencing` is only needed when a document is mapped.
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(dict(document), default_specification=DRAFT202012)
    resolver = Registry().with_resource(_DOC_URI, resource).resolver(_DOC_URI)
    return cast(dict[str, Any], _Inliner(resolver).inline(document, (), 0))


class _Inliner:
    """Inlines ``$ref``s, counting what it builds: a document whose references multiply
    (each schema naming the next twice) is refused rather than expanded without end."""

    def __init__(self, resolver: Any) -> None:
        self._resolver = resolver
        self._built = 0

    def inline(self, node: Any, seen: tuple[str, ...], depth: int) -> Any:
        self._built += 1
        if depth > _MAX_DEPTH or self._built > MAX_NODES:
            raise InvalidDocumentError(
                f"the document, its references inlined, nests deeper than {_MAX_DEPTH} levels "
                f"or holds over {MAX_NODES} values"
            )
        if isinstance(node, list):
            return [self.inline(item, seen, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                return {}  # a recursive schema: any value below this point
            return self.inline(self._lookup(ref), (*seen, ref), depth + 1)
        return {key: self.inline(value, seen, depth + 1) for key, value in node.items()}

    def _lookup(self, ref: str) -> Any:
        from referencing.exceptions import Unresolvable

        if not ref.startswith("#"):
            raise InvalidDocumentError(f"$ref {ref!r:.80}: only local references (#/...)")
        try:
            return self._resolver.lookup(ref).contents
        except Unresolvable:
            raise InvalidDocumentError(f"$ref {ref!r:.80} points at nothing") from None


def operations(
    document: Mapping[str, Any],
    *,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    categories: Mapping[str, str] | None = None,
) -> list[Operation]:
    """The document's operations the selectors keep (``include``: these tags or
    operationIds only, when given; ``exclude``: never these), in document order."""
    version = str(document.get("openapi", ""))
    if not version.startswith(("3.0.", "3.1.")):
        raise InvalidDocumentError(
            f"openapi {version!r:.20}: an OpenAPI 3.0 or 3.1 document is needed"
        )
    paths = document.get("paths")
    if not isinstance(paths, dict):
        raise InvalidDocumentError("the document has no paths object")
    try:
        found = _selected(resolved(document), set(include), set(exclude), categories or {})
    except InvalidDocumentError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        # A value of the wrong type deep in the document: refused, never a crash.
        raise InvalidDocumentError(
            f"the document does not have OpenAPI's shape ({type(exc).__name__} while "
            "reading it): validate it against the OpenAPI schema"
        ) from None
    if len(found) > MAX_OPERATIONS:
        raise InvalidDocumentError(
            f"{len(found)} operations: at most {MAX_OPERATIONS} per toolset (use include)"
        )
    return found


def _selected(
    full: dict[str, Any], kept: set[str], dropped: set[str], categories: Mapping[str, str]
) -> list[Operation]:
    found: list[Operation] = []
    for path, item in full["paths"].items():
        for method, op in _methods(path, item):
            made = _operation(path, method, op, item, categories)
            labels = {made.operation_id, *made.tags}
            if (kept and not labels & kept) or labels & dropped:
                continue
            found.append(made)
    return found


def _methods(path: str, item: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(item, dict):
        raise InvalidDocumentError(f"path {path!r:.80}: a path item must be an object")
    return [(m, item[m]) for m in METHODS if isinstance(item.get(m), dict)]


def _operation(
    path: str, method: str, op: dict[str, Any], item: dict[str, Any], categories: Mapping[str, str]
) -> Operation:
    operation_id = op.get("operationId")
    where = f"{method.upper()} {path}"
    if not isinstance(operation_id, str) or not operation_id:
        raise InvalidDocumentError(f"{where:.100}: every operation needs an operationId")
    params = _parameters(where, [*item.get("parameters", []), *op.get("parameters", [])])
    schema, body = _input_schema(params, op.get("requestBody"))
    tags = tuple(str(tag) for tag in op.get("tags", []) if isinstance(tag, str))
    return Operation(
        operation_id=operation_id,
        action=bosun_action(operation_id),
        method=method.upper(),
        path=path,
        summary=_summary(op, where),
        tags=tags,
        category=_category(operation_id, method, op, categories),
        schema=schema,
        path_params=tuple(p["name"] for p in params if p["in"] == "path"),
        query_params=tuple(p["name"] for p in params if p["in"] == "query"),
        body=body,
        inverse=_inverse(where, op.get("x-bosun-inverse")),
    )


def _parameters(where: str, raw: list[Any]) -> list[dict[str, Any]]:
    """Path and query parameters, an operation's over its path item's of the same name
    (header and cookie parameters are the API's business, not the model's)."""
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for param in raw:
        if not isinstance(param, dict) or not isinstance(param.get("name"), str):
            raise InvalidDocumentError(f"{where:.100}: a parameter without a name")
        if param.get("in") in ("path", "query"):
            by_key[(param["name"], param["in"])] = param
    return list(by_key.values())


def _input_schema(params: list[dict[str, Any]], body: Any) -> tuple[dict[str, Any], bool]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in params:
        shown = dict(param.get("schema") or {})
        if param.get("description"):
            shown.setdefault("description", str(param["description"]))
        properties[param["name"]] = shown
        if param["in"] == "path" or param.get("required"):
            required.append(param["name"])
    content = body.get("content", {}) if isinstance(body, dict) else {}
    json_body = next((v for k, v in content.items() if k.split(";")[0].endswith("json")), None)
    if isinstance(json_body, dict):
        properties["body"] = dict(json_body.get("schema") or {})
        if body.get("required"):
            required.append("body")
    schema: dict[str, Any] = {"type": "object", "properties": _strip_titles(properties)}
    if required:
        schema["required"] = sorted(set(required), key=required.index)
    return schema, isinstance(json_body, dict)


def _summary(op: dict[str, Any], where: str) -> str:
    for text in (op.get("summary"), op.get("description"), where):
        line = next((ln.strip() for ln in str(text or "").splitlines() if ln.strip()), "")
        if line:
            return line if len(line) <= MAX_SUMMARY_CHARS else line[: MAX_SUMMARY_CHARS - 1] + "…"
    return where


def _category(
    operation_id: str, method: str, op: dict[str, Any], categories: Mapping[str, str]
) -> Category:
    for chosen in (categories.get(operation_id), op.get("x-bosun-category")):
        if chosen is None:
            continue
        if chosen not in get_args(Category):
            raise InvalidDocumentError(
                f"{operation_id!r:.80}: category {chosen!r:.20} is not read, write or destructive"
            )
        return cast(Category, chosen)
    return _BY_METHOD[method]


def _inverse(where: str, raw: Any) -> InverseSpec | None:
    if raw is None:
        return None
    target = raw.get("operationId") if isinstance(raw, dict) else None
    parameters = raw.get("parameters", {}) if isinstance(raw, dict) else None
    if not isinstance(target, str) or not isinstance(parameters, dict):
        raise InvalidDocumentError(
            f"{where:.100}: x-bosun-inverse is {{operationId, parameters: {{name: expression}}}}"
        )
    return InverseSpec(operation_id=target, parameters=dict(parameters))


def evaluate(expression: Any, *, request: Mapping[str, Any], response: Any) -> Any:
    """An OpenAPI runtime expression against a call's input and its response body:
    ``$response.body``, ``$response.body#/pointer``, ``$request.path.x``,
    ``$request.query.x``, ``$request.body``, ``$request.body#/pointer``; anything else
    is a constant. ``LookupError`` when it points at nothing."""
    if not isinstance(expression, str) or not expression.startswith("$"):
        return expression
    source, _, pointer = expression.partition("#")
    if source == "$response.body":
        return _pointer(response, pointer)
    if source == "$request.body":
        return _pointer(request["body"], pointer)
    for prefix in ("$request.path.", "$request.query."):
        if source.startswith(prefix) and not pointer:
            return request[source.removeprefix(prefix)]
    raise LookupError(f"unsupported runtime expression {expression!r:.80}")


def _pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: ``/a/0/b`` into ``document`` (``""``: the whole)."""
    if not pointer:
        return document
    node = document
    for raw in pointer.removeprefix("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node
