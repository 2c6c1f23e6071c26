"""A tool's input schema in the form OpenAI's strict function calling accepts."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["openai_strict_schema"]

# What strict mode reads, per OpenAI's structured-outputs subset. "default" and
# "examples" are dropped (not enforced, and an optional field's default is what "null" means).
_KEEP = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$defs",
        "$ref",
        "description",
        "title",
        "pattern",
        "format",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "minItems",
        "maxItems",
    }
)
_DROP = frozenset({"default", "examples", "$comment", "$schema", "deprecated"})
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)


class _NotStrict(Exception):
    """The schema has a part strict mode cannot express."""


def openai_strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` in the strict form (every property required, the optional ones made
    nullable, ``additionalProperties: false`` on every object), or ``None`` when it cannot
    be strict: a free-form object (``dict[str, X]``, ``Any``), a keyword strict mode does not
    take (``oneOf``, ``allOf``, ``minLength``, ``uniqueItems``, ``prefixItems``...), or a
    root that is not an object.

    A call made under the strict form passes the tool's own validation: a ``null`` given
    for an optional property counts as leaving it out (see ``validate``).
    """
    root = dict(schema)
    if root.get("type") != "object":
        return None
    try:
        return typing.cast(dict[str, Any], _strict(root))
    except _NotStrict:
        return None


def _strict(node: Any) -> Any:
    if not isinstance(node, Mapping) or not node:
        raise _NotStrict  # boolean schemas and {} (any value)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key not in _KEEP:
            raise _NotStrict
        if key not in _OBJECT_KEYS:  # those are done below
            out[key] = _strict_keyword(key, value)
    if "$ref" in out and len(out) > 1 + ("description" in out) + ("title" in out):
        raise _NotStrict  # strict mode takes a $ref with no sibling constraints
    kinds = node.get("type")
    is_object = kinds == "object" or (isinstance(kinds, list) and "object" in kinds)
    if is_object or "properties" in node:
        out.update(_strict_object(node))
    elif node.get("additionalProperties") is not None:
        raise _NotStrict
    return out


_OBJECT_KEYS = frozenset({"properties", "required", "additionalProperties"})


def _strict_keyword(key: str, value: Any) -> Any:
    """The strict form of one kept keyword's value (not one of ``_OBJECT_KEYS``)."""
    if key == "format" and value not in _FORMATS:
        raise _NotStrict
    if key == "$defs":
        return {name: _strict(sub) for name, sub in value.items()}
    if key == "items":
        return _strict(value)
    if key == "anyOf":
        return [_strict(sub) for sub in value]
    return value


def _strict_object(node: Mapping[str, Any]) -> dict[str, Any]:
    """The strict ``properties``, ``required`` and ``additionalProperties`` of an object."""
    properties = node.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        raise _NotStrict  # a free-form object
    if node.get("additionalProperties", False) not in (False, True):
        raise _NotStrict  # properties and a schema for the other keys
    required = set(node.get("required", ()))
    return {
        "properties": {
            name: _strict(sub) if name in required else _nullable(_strict(sub))
            for name, sub in properties.items()
        },
        "required": list(properties),
        "additionalProperties": False,
    }


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` also accepting ``null``."""
    kinds = node.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return node
    if any(o.get("type") == "null" for o in node.get("anyOf", ())):
        return node
    if isinstance(kinds, str) and not ({"enum", "const", "$ref", "anyOf"} & node.keys()):
        return {**node, "type": [kinds, "null"]}
    notes: dict[str, Any] = {k: node[k] for k in ("description", "title") if k in node}
    inner = {k: v for k, v in node.items() if k not in notes}
    return {"anyOf": [inner, {"type": "null"}], **notes}
