"""JSON schemas from type hints, a validator for the schema subset innerloop generates, and
the conversion of validated JSON arguments back into the annotated Python types.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``list[X]`` (and bare ``list``),
``dict[str, X]`` (and bare ``dict``), ``Literal[...]``, ``X | None`` / ``Optional[X]``,
``enum.Enum`` subclasses, attrs classes, ``Any`` and ``Annotated[X, "description"]``.

The validator understands ``type`` (one name or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties`` (``false`` or a schema), ``items``, ``anyOf`` and
``oneOf``; other keywords of hand-written schemas are accepted and not checked.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

from innerloop._errors import ToolDefinitionError

__all__ = ["convert", "schema_for", "validate"]

_SCALARS: Mapping[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _enum_schema(cls: type[enum.Enum]) -> dict[str, Any]:
    values = [m.value for m in cls]
    schema: dict[str, Any] = {"enum": values}
    kinds = {_json_type(v) for v in values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    for py, name in _SCALARS.items():
        if isinstance(value, py):
            return name
    return None


def _attrs_schema(cls: type, where: str) -> dict[str, Any]:
    hints = resolve_hints(cls, where)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        name = field.alias or field.name
        if field.name not in hints:
            raise ToolDefinitionError(
                f"{where}: field {field.name!r} of {cls.__name__} has no type annotation; "
                "annotate it"
            )
        properties[name] = schema_for(hints[field.name], f"{where}.{name}")
        if field.default is attrs.NOTHING:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def resolve_hints(obj: Any, where: str) -> dict[str, Any]:
    """``obj``'s resolved type hints, or :class:`ToolDefinitionError` naming ``where``."""
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: cannot resolve the type hints of {getattr(obj, '__qualname__', obj)!r} "
            f"({type(exc).__name__}: {exc}); import every annotated type at module level"
        ) from exc


def _unsupported(annotation: Any, where: str) -> ToolDefinitionError:
    return ToolDefinitionError(
        f"{where}: unsupported annotation {_show(annotation)}; use str, int, float, bool, "
        "list[X], dict[str, X], Literal[...], X | None, an Enum or an attrs class"
    )


def _show(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def schema_for(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON schema of ``annotation``; ``where`` names it in errors (e.g. ``parameter 'x'``).

    Raises :class:`ToolDefinitionError` naming ``where`` and the annotation when it is not
    supported.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = schema_for(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if annotation is Any:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is list:
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    if origin is list:
        return {"type": "array", "items": schema_for(args[0], f"{where}[]")}
    if origin is dict:
        if args[0] is not str:
            raise ToolDefinitionError(
                f"{where}: unsupported annotation {_show(annotation)}; JSON object keys are "
                "strings, use dict[str, X]"
            )
        return {"type": "object", "additionalProperties": schema_for(args[1], f"{where}{{}}")}
    if origin is typing.Literal:
        schema = {"enum": list(args)}
        kinds = {_json_type(a) for a in args}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        if len(options) != len(args) - 1 or len(options) != 1:
            raise _unsupported(annotation, where)
        return {"anyOf": [schema_for(options[0], where), {"type": "null"}]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema(annotation)
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_schema(annotation, where)
    raise _unsupported(annotation, where)


# -- validation ---------------------------------------------------------------------------

_TYPE_CHECKS: Mapping[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}


def _describe(value: Any) -> str:
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        type(None): "null",
        list: "array",
        tuple: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"


def _at(path: str) -> str:
    return f"field {path!r}" if path else "the arguments"


def validate(schema: Mapping[str, Any], value: Any, path: str = "") -> list[str]:
    """Every way ``value`` breaks ``schema``, each naming the field path, what was expected
    and what was given. An empty list means valid."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = schema[key]
            if any(not validate(option, value, path) for option in options):
                break
            if len(options) == 2 and {"type": "null"} in options:
                inner = next(o for o in options if o != {"type": "null"})
                return validate(inner, value, path)
            return [f"{_at(path)}: {_describe(value)} matches none of the allowed forms"]
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_TYPE_CHECKS.get(n, lambda v: True)(value) for n in names):
            expected = " or ".join(names)
            return [f"{_at(path)}: expected {expected}, got {_describe(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return [f"{_at(path)}: {value!r} is not one of {allowed}"]
    if "const" in schema and value != schema["const"]:
        return [f"{_at(path)}: must be {schema['const']!r}, got {value!r}"]
    if isinstance(value, Mapping):
        return _validate_object(schema, value, path)
    if isinstance(value, list | tuple) and isinstance(schema.get("items"), Mapping):
        errors: list[str] = []
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, f"{path}[{i}]")
        return errors
    return []


def _validate_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    prefix = f"{path}." if path else ""
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"missing required field {prefix + name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors += validate(properties[name], item, prefix + name)
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            errors.append(f"unexpected field {prefix + name!r} (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            errors += validate(extra, item, prefix + name)
    return errors


# -- conversion ---------------------------------------------------------------------------


def convert(annotation: Any, value: Any) -> Any:
    """Turn a validated JSON value into ``annotation``'s Python type (enums, attrs classes,
    floats given as integers); everything else passes through."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return convert(args[0], value)
    if value is None:
        return None
    if origin is typing.Union or origin is types.UnionType:
        inner = next(a for a in args if a is not type(None))
        return convert(inner, value)
    if annotation is float:
        return float(value)
    if annotation is int and isinstance(value, float):
        return int(value)
    if origin is list:
        return [convert(args[0], v) for v in value]
    if origin is dict:
        return {k: convert(args[1], v) for k, v in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if isinstance(annotation, type) and attrs.has(annotation):
        hints = typing.get_type_hints(annotation, include_extras=True)
        kwargs = {}
        for field in attrs.fields(annotation):
            name = field.alias or field.name
            if field.init and name in value:
                kwargs[name] = convert(hints[field.name], value[name])
        return annotation(**kwargs)
    return value
