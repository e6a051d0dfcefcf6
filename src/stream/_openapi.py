"""The served OpenAPI states what the server checks: bodies, path ids, errors, public routes.

Litestar writes the document from the route handlers, but drops what its own schema
generator cannot say: a pydantic field's ``pattern``, the bounds of an optional field,
``additionalProperties: false``, the error envelope. ``BodySchemaPlugin`` takes request
bodies' schemas from pydantic, which validates them; ``document`` adds the rest once the
app is built. A client (or a fuzzer) that keeps to the document is then never refused
for a constraint it could not read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from litestar import Litestar
from litestar.openapi.spec import (
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    Schema,
)
from litestar.plugins import OpenAPISchemaPlugin
from litestar.response import Stream
from litestar.routes import HTTPRoute
from pydantic import BaseModel

from stream._api import ProtocolBody
from stream._auth import PUBLIC_PATHS
from stream._bounds import PATH_IDS, TEXT_PATTERN

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.typing import FieldDefinition


def _keyword(attribute: str) -> str:
    """The JSON Schema keyword Litestar writes for the ``Schema`` attribute."""
    probe: dict[str, Any] = {attribute: True}
    return next(iter(Schema(**probe).to_schema()))


_KEYWORDS = {_keyword(f.name): f.name for f in fields(Schema)}
_SUBSCHEMA = {"items", "not", "if", "then", "else", "contains", "propertyNames", "contentSchema"}
_SUBSCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
_SUBSCHEMA_MAPS = {"properties", "patternProperties", "dependentSchemas"}
SSE_EVENT_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="One frame: `id` the log's seq, `event` the type, `data` the event as JSON.",
    required=["id", "event", "data"],
    properties={
        "id": Schema(type=OpenAPIType.STRING, pattern=r"^[0-9]+$"),
        "event": Schema(type=OpenAPIType.STRING),
        "data": Schema(
            type=OpenAPIType.STRING,
            content_media_type="application/json",
            content_schema=Schema(
                type=OpenAPIType.OBJECT,
                required=["type"],
                properties={"type": Schema(type=OpenAPIType.STRING)},
            ),
        ),
    },
)
ERROR_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    title="Error",
    description="Every error response: a stable code (see docs/api.md), a message, a trace id.",
    required=["error"],
    properties={
        "error": Schema(
            type=OpenAPIType.OBJECT,
            required=["code", "message", "trace_id"],
            properties={
                "code": Schema(type=OpenAPIType.STRING),
                "message": Schema(type=OpenAPIType.STRING),
                "trace_id": Schema(type=OpenAPIType.STRING),
            },
        )
    },
)


def schema_of(json_schema: Mapping[str, Any]) -> Schema:
    """A JSON Schema (a dict, as pydantic writes it) as Litestar's ``Schema``."""
    kwargs: dict[str, Any] = {}
    for keyword, value in json_schema.items():
        if keyword == "type" and isinstance(value, str):
            value = OpenAPIType(value)
        elif keyword in _SUBSCHEMA or (keyword == "additionalProperties" and value is not False):
            value = schema_of(value if isinstance(value, Mapping) else {})
        elif keyword in _SUBSCHEMA_LISTS:
            value = [schema_of(v) for v in value]
        elif keyword in _SUBSCHEMA_MAPS:
            value = {k: schema_of(v) for k, v in value.items()}
        kwargs[_KEYWORDS[keyword]] = value
    return Schema(**kwargs)


def keepable(json_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``json_schema`` with every string that has no pattern (nor enum) stating
    ``TEXT_PATTERN``, as ``_bounds.check_json_body`` checks. A value of any type is left
    open: the rule for its strings is in the document's description (JSON Schema could
    only state it recursively, which fuzzers cannot generate for)."""
    stated: dict[str, Any] = dict(json_schema)
    for keyword, value in json_schema.items():
        if keyword in _SUBSCHEMA or keyword == "additionalProperties":
            stated[keyword] = keepable(value) if isinstance(value, Mapping) else value
        elif keyword in _SUBSCHEMA_LISTS:
            stated[keyword] = [keepable(v) for v in value]
        elif keyword in _SUBSCHEMA_MAPS:
            stated[keyword] = {k: keepable(v) for k, v in value.items()}
    kinds = stated.get("type")
    if (kinds == "string" or (isinstance(kinds, list) and "string" in kinds)) and not (
        {"pattern", "enum", "const"} & stated.keys()
    ):
        stated["pattern"] = TEXT_PATTERN
    return stated


def _inlined(json_schema: dict[str, Any]) -> dict[str, Any]:
    """``json_schema`` with its nested models (``$defs``, referred to by ``$ref``) written
    in place: a body's schema stands alone. Bodies nest no model in itself."""
    defs = json_schema.pop("$defs", {})

    def inline(value: Any) -> Any:
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in value.items()}
        if isinstance(value, list):
            return [inline(v) for v in value]
        return value

    inlined: dict[str, Any] = inline(json_schema)
    return inlined


def _chosen(
    json_schema: dict[str, Any], choices: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``json_schema`` with every property named in ``choices`` (at any depth) stating the
    values this server accepts (its tools, its model specs), keeping its description."""
    properties = json_schema.get("properties")
    if isinstance(properties, dict):
        for name, schema in list(properties.items()):
            if name in choices:
                kept = {k: schema[k] for k in ("description", "default", "title") if k in schema}
                properties[name] = {**choices[name], **kept}
            elif isinstance(schema, dict):
                properties[name] = _chosen(schema, choices)
    return json_schema


class BodySchemaPlugin(OpenAPISchemaPlugin):
    """Request bodies (pydantic models that refuse unknown fields, and chat protocols'
    ``ProtocolBody``) get pydantic's own JSON schema. ``settings`` adds, by property name,
    the constraints that come from settings (``{"message": {"maxLength":
    max_message_chars}}``): the routes check those, not the models."""

    def __init__(
        self,
        *,
        settings: Mapping[str, Mapping[str, Any]],
        choices: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.settings = {name: dict(keywords) for name, keywords in settings.items()}
        self.choices = {name: dict(schema) for name, schema in (choices or {}).items()}

    @staticmethod
    def is_plugin_supported_type(value: Any) -> bool:
        return (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and (value.model_config.get("extra") == "forbid" or issubclass(value, ProtocolBody))
        )

    def to_openapi_schema(
        self, field_definition: FieldDefinition, schema_creator: SchemaCreator
    ) -> Schema:
        model: type[BaseModel] = field_definition.annotation
        json_schema = _chosen(_inlined(model.model_json_schema(mode="validation")), self.choices)
        json_schema = keepable(json_schema)
        for name, keywords in self.settings.items():
            if name in json_schema["properties"]:
                json_schema["properties"][name].update(keywords)
        # The registry's schema becomes the component; the body refers to it.
        schema = schema_creator.schema_registry.get_schema_for_field_definition(field_definition)
        stated = schema_of(json_schema)
        for name in (f.name for f in fields(Schema)):
            setattr(schema, name, getattr(stated, name))
        return schema


def document(app: Litestar) -> None:
    """Add to the app's OpenAPI what Litestar leaves out: the path ids' patterns, the error
    envelope of every error response (Litestar documents its own, which this server does
    not send), the event stream of routes that answer with one, and that the public
    routes need no token."""
    openapi = app.openapi_schema
    assert openapi.components is not None
    schemas = openapi.components.schemas = dict(openapi.components.schemas or {})
    schemas["Error"] = ERROR_SCHEMA
    error = OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Error"))
    public = [re.compile(p) for p in PUBLIC_PATHS]
    for route in app.routes:
        path = openapi.paths.get(route.path_format) if openapi.paths else None
        if path is None or not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            for method in handler.http_methods:
                operation = getattr(path, method.lower())
                if operation is None:
                    continue
                _ids(operation)
                _texts(operation)
                _errors(operation, error)
                if handler.parsed_fn_signature.return_type.annotation is Stream:
                    ok = operation.responses[str(handler.status_code)]
                    assert isinstance(ok, OpenAPIResponse)
                    ok.content = {"text/event-stream": OpenAPIMediaType(schema=SSE_EVENT_SCHEMA)}
                if any(p.match(route.path_format) for p in public):
                    operation.security = []


def _ids(operation: Operation) -> None:
    for parameter in operation.parameters or []:
        if isinstance(parameter, Parameter) and parameter.param_in == "path":
            pattern = PATH_IDS.get(parameter.name, (None, ""))[0]
            if pattern is not None and isinstance(parameter.schema, Schema):
                parameter.schema.pattern = pattern


def _texts(operation: Operation) -> None:
    """Path, query and header strings state ``TEXT_PATTERN``, as ``check_params`` checks."""
    for parameter in operation.parameters or []:
        if isinstance(parameter, Parameter) and isinstance(parameter.schema, Schema):
            for schema in [parameter.schema, *(parameter.schema.one_of or [])]:
                if (
                    isinstance(schema, Schema)
                    and schema.type == OpenAPIType.STRING
                    and schema.pattern is None
                    and schema.enum is None
                    and schema.const is None
                ):
                    schema.pattern = TEXT_PATTERN


def _errors(operation: Operation, error: OpenAPIMediaType) -> None:
    responses = operation.responses = dict(operation.responses or {})
    for status, response in responses.items():
        if isinstance(response, OpenAPIResponse) and status >= "400":
            response.content = {"application/json": error}
    responses["default"] = OpenAPIResponse(
        description="An error (any status not listed): the error envelope",
        content={"application/json": error},
    )
