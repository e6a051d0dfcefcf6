"""An OpenAPI document's operations as tools: $refs resolved, input schemas composed from
path, query and body parameters, categories from the method, the extension and the
owner, include/exclude by tag or operationId, inverses built from runtime expressions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from store import OpenApiToolsetRecord, utcnow
from tools import InvalidDocumentError, map_record
from tools._openapi_map import evaluate, operations, resolved

NOTES = json.loads(
    (Path(__file__).parents[2] / "examples" / "notes_api" / "openapi.json").read_text()
)


def record(document: dict[str, Any], **fields: Any) -> OpenApiToolsetRecord:
    values: dict[str, Any] = {
        "id": "oas_1", "org_id": "acme", "name": "notes", "document": document,
        "source_url": None, "base_url": "http://127.0.0.1:1", "include": [], "exclude": [],
        "identity_mode": "signed", "categories": {}, "timeout_s": 5.0, "version": 1,
        "created_at": utcnow(), "updated_at": utcnow(), **fields,
    }  # fmt: skip
    return OpenApiToolsetRecord(**values)


def test_refs_are_resolved_and_inputs_composed_from_path_query_and_body() -> None:
    by_id = {op.operation_id: op for op in operations(NOTES)}
    assert list(by_id) == ["listNotes", "createNote", "getNote", "deleteNote"]
    note_id = {"type": "string", "description": "The note's id, as listNotes gives it"}
    assert by_id["getNote"].schema == {
        "type": "object", "properties": {"note_id": note_id}, "required": ["note_id"],
    }  # fmt: skip
    assert by_id["getNote"].path_params == ("note_id",) and not by_id["getNote"].body
    assert by_id["listNotes"].query_params == ("q",)
    assert "required" not in by_id["listNotes"].schema  # an optional query parameter
    body = by_id["createNote"].schema["properties"]["body"]
    assert body["required"] == ["title"] and set(body["properties"]) == {"title", "text"}
    assert by_id["createNote"].schema["required"] == ["body"] and by_id["createNote"].body
    assert "$ref" not in json.dumps(resolved(NOTES))


def test_categories_come_from_the_method_the_extension_and_the_owner() -> None:
    document = json.loads(json.dumps(NOTES))
    document["paths"]["/notes"]["get"]["x-bosun-category"] = "write"
    found = operations(document, categories={"createNote": "destructive"})
    assert [(op.action, op.category) for op in found] == [
        ("list_notes", "write"), ("create_note", "destructive"),
        ("get_note", "read"), ("delete_note", "destructive"),
    ]  # fmt: skip
    with pytest.raises(InvalidDocumentError, match="not read, write or destructive"):
        operations(document, categories={"getNote": "sometimes"})


def test_include_and_exclude_pick_by_tag_or_operation_id() -> None:
    assert [op.operation_id for op in operations(NOTES, include=["getNote", "listNotes"])] == [
        "listNotes", "getNote",
    ]  # fmt: skip
    kept = operations(NOTES, include=["notes"], exclude=["deleteNote"])
    assert [op.operation_id for op in kept] == ["listNotes", "createNote", "getNote"]
    assert operations(NOTES, include=["nothing"]) == []


def test_tools_are_named_from_operation_ids_and_declare_their_undo() -> None:
    tools = {op.action: (op, model) for op, model in map_record(record(NOTES))}
    assert list(tools) == ["list_notes", "create_note", "get_note", "delete_note"]
    create, model = tools["create_note"]
    args = model.model_validate({"body": {"title": "Milk"}})
    assert create.inverse is not None
    assert {
        name: evaluate(expr, request=args.model_dump(), response={"id": "n1"})
        for name, expr in create.inverse.parameters.items()
    } == {"note_id": "n1"}
    with pytest.raises(ValueError, match="body"):
        model.model_validate({"body": {"text": "no title"}})


def test_runtime_expressions() -> None:
    request = {"note_id": "n1", "q": "x", "body": {"tags": ["a", "b/c"]}}
    response = {"id": "n2", "items": [{"id": "i0"}]}
    assert evaluate("$response.body#/items/0/id", request=request, response=response) == "i0"
    assert evaluate("$response.body", request=request, response=response) == response
    assert evaluate("$request.path.note_id", request=request, response=None) == "n1"
    assert evaluate("$request.query.q", request=request, response=None) == "x"
    assert evaluate("$request.body#/tags/1", request=request, response=None) == "b/c"
    assert evaluate(7, request=request, response=None) == 7
    with pytest.raises(LookupError):
        evaluate("$response.header.Location", request=request, response=None)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"swagger": "2.0", "paths": {}}, "OpenAPI 3.0 or 3.1"),
        ({"openapi": "3.1.0"}, "no paths"),
        ({"openapi": "3.0.3", "paths": {"/x": {"get": {"responses": {}}}}}, "operationId"),
        (
            {"openapi": "3.0.3", "paths": {"/x": {"get": {
                "operationId": "x", "parameters": [{"$ref": "#/components/parameters/Nope"}],
            }}}},
            "points at nothing",
        ),
        (
            {"openapi": "3.0.3", "paths": {"/x": {"get": {
                "operationId": "x", "parameters": [{"$ref": "other.yaml#/P"}],
            }}}},
            "only local references",
        ),
    ],
)  # fmt: skip
def test_unusable_documents_are_refused(document: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidDocumentError, match=message):
        operations(document)


def _doubling(levels: int) -> dict[str, Any]:
    """Each schema names the next twice: inlined, 2**levels copies of the last."""
    schemas: dict[str, Any] = {
        f"S{i}": {"type": "object", "properties": {
            "a": {"$ref": f"#/components/schemas/S{i + 1}"},
            "b": {"$ref": f"#/components/schemas/S{i + 1}"},
        }}
        for i in range(levels)
    }  # fmt: skip
    schemas[f"S{levels}"] = {"type": "string"}
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}}
    return {
        "openapi": "3.1.0", "components": {"schemas": schemas},
        "paths": {"/x": {"post": {"operationId": "x", "requestBody": body}}},
    }  # fmt: skip


@pytest.mark.parametrize(
    "document",
    [
        {"openapi": "3.0.3", "paths": {"/x": {"get": {"operationId": "x", "parameters": 5}}}},
        {"openapi": "3.0.3", "paths": {"/x": {"get": {"operationId": "x", "parameters": [
            {"name": "a", "in": "query", "schema": "str"}]}}}},
        {"openapi": "3.0.3", "paths": {"/x": "nothing"}},
    ],
)  # fmt: skip
def test_a_document_of_the_wrong_shape_is_refused_not_a_crash(document: dict[str, Any]) -> None:
    with pytest.raises(InvalidDocumentError):
        operations(document)


def test_references_that_multiply_are_refused() -> None:
    assert len(operations(_doubling(4))) == 1
    with pytest.raises(InvalidDocumentError, match="values"):
        operations(_doubling(20))


def test_a_recursive_schema_is_cut_not_looped() -> None:
    document = {
        "openapi": "3.0.3",
        "paths": {"/t": {"post": {"operationId": "makeTree", "requestBody": {"content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Tree"}}}}}}},
        "components": {"schemas": {"Tree": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}}}}}},
    }  # fmt: skip
    [op] = operations(document)
    children = op.schema["properties"]["body"]["properties"]["children"]
    assert children == {"type": "array", "items": {}}
