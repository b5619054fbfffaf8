"""schemathesis hooks of the contract test (``SCHEMATHESIS_HOOKS=contract_hooks``): generated requests
that break a rule the OpenAPI document states but JSON Schema cannot check are not sent. The rules are
read from the document itself: ``x-maxUtf8Bytes`` on strings, ``x-maxJsonBytes`` and ``x-maxDepth``
(levels of objects and arrays, the value itself being level 1) on metadata,
``x-maxBytes`` on request bodies, and ``x-rules`` (bands * rows <= num_perm; exact needs format 2).
Everything JSON Schema
can say is generated and checked as usual, valid and invalid."""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis.core import NotSet


def _resolve(root: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _size(body: Any) -> int:
    """The body's bytes as sent (JSON, or as it is when it is not JSON: a negative case)."""
    if isinstance(body, bytes | str):
        return len(body)
    return len(json.dumps(body, default=repr, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _depth(value: Any) -> int:
    """Levels of objects and arrays: 1 for ``{}`` or ``[]``, 0 for a scalar."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def breaks_stated_limits(root: dict[str, Any], schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` exceeds a byte or depth limit or breaks an ``x-rules`` rule of ``schema``."""
    schema = _resolve(root, schema)
    limit = schema.get("x-maxUtf8Bytes")
    if isinstance(value, str) and limit is not None and len(value.encode("utf-8", "surrogatepass")) > limit:
        return True
    limit = schema.get("x-maxJsonBytes")
    if isinstance(value, dict) and limit is not None and _size(value) > limit:
        return True
    limit = schema.get("x-maxDepth")
    if isinstance(value, dict) and limit is not None and _depth(value) > limit:
        return True
    for rule in schema.get("x-rules", ()):
        if rule.get("rule") == "bands * rows <= num_perm" and isinstance(value, dict):
            # a left-out bands or rows is num_perm // the other: it counts as 1 here
            numbers = [
                1 if value.get("bands") is None else value["bands"],
                1 if value.get("rows") is None else value["rows"],
                value.get("num_perm") or rule["num_perm_default"],
            ]
            if all(_is_number(n) for n in numbers) and numbers[0] * numbers[1] > numbers[2]:
                return True
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return any(breaks_stated_limits(root, props[k], v) for k, v in value.items() if k in props)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return any(breaks_stated_limits(root, schema["items"], v) for v in value)
    return False


def _operation(context: schemathesis.HookContext) -> tuple[dict[str, Any], dict[str, Any]]:
    operation = context.operation
    assert operation is not None
    return operation.schema.raw_schema, operation.definition.raw


# Filters of the generated parts: the stateful phase builds its requests from these part strategies,
# and applies no case filter.
@schemathesis.hook
def filter_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any]) -> bool:
    root, raw = _operation(context)
    for parameter in raw.get("parameters", ()):
        value = (path_parameters or {}).get(parameter["name"]) if parameter.get("in") == "path" else None
        if value is not None and breaks_stated_limits(root, parameter["schema"], value):
            return False
    return True


@schemathesis.hook
def filter_body(context: schemathesis.HookContext, body: Any) -> bool:
    root, raw = _operation(context)
    declared = raw.get("requestBody")
    if declared is None or isinstance(body, NotSet):
        return True
    if _size(body) > declared.get("x-maxBytes", float("inf")):
        return False
    return not breaks_stated_limits(root, declared["content"]["application/json"]["schema"], body)


# The coverage phase builds whole cases without the part strategies: the same rules, on the case.
@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: Any) -> bool:
    return bool(
        filter_path_parameters(context, case.path_parameters or {}) and filter_body(context, case.body)
    )
