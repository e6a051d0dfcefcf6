"""JSON schemas of tool inputs, trimmed for the model, and one-line signatures from them.

The model sees a tool's summary and its input schema on every call, so pydantic's
generated ``title`` keys (a prettified copy of each field name) and the input model's
docstring (developer prose) are dropped; ``Field(description=...)`` stays.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pydantic import BaseModel

# Keys whose value maps names to schemas: a "title" key there is a name, not a title.
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})

_SCALARS = {"integer": "int", "number": "float", "boolean": "bool", "null": "null"}
_STRING_FORMATS = {"date-time": "datetime", "date": "date", "time": "time"}


def _strip_titles(node: Any, *, names: bool = False) -> Any:
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _strip_titles(value, names=not names and key in _NAME_MAPS)
        for key, value in node.items()
        if names or key != "title" or not isinstance(value, str)
    }


@cache
def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model-facing JSON schema of ``model``; cached, so treat it as read-only."""
    schema: dict[str, Any] = _strip_titles(model.model_json_schema())
    schema.pop("description", None)
    return schema


def type_label(schema: dict[str, Any]) -> str:
    """A short Python-like label for a JSON schema: ``str``, ``list[Candidate]``, ..."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return "|".join(json.dumps(value) for value in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    for union in ("anyOf", "oneOf"):
        if union in schema:
            labels = [type_label(s) for s in schema[union] if s.get("type") != "null"]
            return "|".join(labels) or "null"
    kind = schema.get("type")
    if kind == "array":
        return f"list[{type_label(schema.get('items', {}))}]"
    if kind == "string":
        return _STRING_FORMATS.get(str(schema.get("format")), "str")
    if kind == "object":
        return "object"
    return _SCALARS.get(str(kind), "any")


def signature(schema: dict[str, Any]) -> str:
    """The arguments of an object schema, ``member_id: str, note?: str`` (``?``: optional)."""
    required = set(schema.get("required", ()))
    return ", ".join(
        f"{name}{'' if name in required else '?'}: {type_label(prop)}"
        for name, prop in schema.get("properties", {}).items()
    )
