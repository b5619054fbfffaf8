"""The OpenAPI document as the exact contract of this running service.

The request models are built once, at import time, so limits that come from the settings (id and text
sizes, batch length, query limit) are written into the generated document here, for the app that
enforces them. JSON Schema counts characters, not bytes: a byte limit appears as ``maxLength`` (a
string longer in characters is always longer in UTF-8 bytes) and as the extension keyword
``x-maxUtf8Bytes``; the metadata limits as ``x-maxJsonBytes`` and ``x-maxDepth`` (levels of
objects and arrays, the metadata object being level 1); the body size as ``x-maxBytes`` of each
request body. The one rule JSON Schema cannot state (bands * rows <= num_perm) is in ``x-rules`` of
the collection's schema. OpenAPI links let a client (and the
stateful tests) follow a created collection or document to the operations that use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from neardup.api.limits import ID_PATTERN, MAX_METADATA_DEPTH, Limits
from neardup.settings import Settings

#: The schemas that carry a document id, metadata or a text (pydantic names them after the models).
_ID_SCHEMAS = ("CheckRequest", "BatchDocument")
_METADATA_SCHEMAS = ("CheckRequest", "BatchDocument", "DocumentPut")
_TEXT_SCHEMAS = ("CheckRequest", "BatchDocument", "QueryRequest", "DocumentPut", "PassagesRequest")
_DOCUMENT_PATH = "/v1/collections/{name}/documents/{doc_id}"
_COLLECTION_PATH = "/v1/collections/{name}"


def install_contract(app: FastAPI, settings: Settings, limits: Limits) -> None:
    """Wrap ``app.openapi`` (FastAPI's, or the one ``install_auth`` set) so the document it serves states
    this app's limits and links."""
    generate: Callable[[], dict[str, Any]] = app.openapi
    done: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not done:
            schema = generate()
            _limits(schema, settings, limits)
            _links(schema)
            done.update(schema)
            app.openapi_schema = done
        return done

    app.openapi = openapi  # type: ignore[method-assign]


def _id_schema(schema: dict[str, Any], limits: Limits) -> None:
    schema.update(
        minLength=1,
        maxLength=limits.max_id_bytes,
        pattern=ID_PATTERN,
        **{"x-maxUtf8Bytes": limits.max_id_bytes},
    )
    schema["description"] = (
        f"the document's id: unique per collection, 1 to {limits.max_id_bytes} bytes of UTF-8, "
        "no control characters (C0, DEL, C1) and no line or paragraph separators"
    )


def _limits(schema: dict[str, Any], settings: Settings, limits: Limits) -> None:
    components = schema["components"]["schemas"]
    for name in _ID_SCHEMAS:
        _id_schema(components[name]["properties"]["id"], limits)
    for name in _METADATA_SCHEMAS:
        props = components[name]["properties"]
        props["metadata"]["x-maxJsonBytes"] = limits.max_metadata_bytes
        props["metadata"]["x-maxDepth"] = MAX_METADATA_DEPTH
        props["metadata"]["description"] = (
            f"any JSON object of at most {limits.max_metadata_bytes} bytes as JSON, with objects and "
            f"arrays nested at most {MAX_METADATA_DEPTH} levels deep (the object itself is level 1), "
            "returned with matches and fetches"
        )
    for name in _TEXT_SCHEMAS:
        text = components[name]["properties"]["text"]
        text.update(maxLength=limits.max_text_bytes, **{"x-maxUtf8Bytes": limits.max_text_bytes})
        text["description"] = f"the document's text, at most {limits.max_text_bytes} bytes of UTF-8"
    components["BatchCheckRequest"]["properties"]["documents"]["maxItems"] = limits.max_batch_documents
    components["QueryRequest"]["properties"]["limit"]["maximum"] = limits.max_query_limit
    components["PassagesRequest"]["properties"]["limit"]["maximum"] = limits.max_query_limit
    components["CollectionCreate"]["x-rules"] = [
        {
            "rule": "bands * rows <= num_perm",
            "description": f"num_perm defaults to {settings.default_num_perm}; when one of bands and rows "
            "is left out it is num_perm // the other (so the one given must be at most num_perm); when "
            "both are, they are chosen from the threshold",
            "num_perm_default": settings.default_num_perm,
        },
    ]
    body_rule = f"the request body is at most {settings.max_body_bytes} bytes (413 otherwise)"
    for operations in schema["paths"].values():
        for operation in operations.values():
            if "requestBody" in operation:
                operation["requestBody"]["x-maxBytes"] = settings.max_body_bytes
                operation["requestBody"].setdefault("description", body_rule)
    for operation in schema["paths"][_DOCUMENT_PATH].values():
        for parameter in operation.get("parameters", ()):
            if parameter["name"] == "doc_id":
                _id_schema(parameter["schema"], limits)
                parameter["schema"]["description"] += " (URL-encoded in the path)"


def _links(schema: dict[str, Any]) -> None:
    """Links from the operations that create or name a collection or a document to those that use it."""
    paths = schema["paths"]
    name_from_body = {"name": "$response.body#/name"}
    collection_ops = {
        "GetCollection": ("get", _COLLECTION_PATH),
        "DeleteCollection": ("delete", _COLLECTION_PATH),
        "CheckInCollection": ("post", "/v1/collections/{name}/check"),
        "CheckBatchInCollection": ("post", "/v1/collections/{name}/check/batch"),
        "QueryCollection": ("post", "/v1/collections/{name}/query"),
        "PassagesInCollection": ("post", "/v1/collections/{name}/passages"),
        "MirrorsOfCollection": ("get", "/v1/collections/{name}/mirrors"),
    }
    created = paths["/v1/collections"]["post"]["responses"]
    for status in ("200", "201"):
        created[status]["links"] = {
            link: {"operationId": paths[path][method]["operationId"], "parameters": name_from_body}
            for link, (method, path) in collection_ops.items()
        }
    document = {
        "name": "$request.path.name",
        "doc_id": "$response.body#/id",
    }
    document_ops = {
        "GetDocument": paths[_DOCUMENT_PATH]["get"]["operationId"],
        "DeleteDocument": paths[_DOCUMENT_PATH]["delete"]["operationId"],
    }
    for method, path in (("post", "/v1/collections/{name}/check"), ("put", _DOCUMENT_PATH)):
        paths[path][method]["responses"]["200"]["links"] = {
            link: {"operationId": op, "parameters": document} for link, op in document_ops.items()
        }
