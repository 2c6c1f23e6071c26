"""A tool's input schema and the validation of a call's arguments against it.

:class:`ToolSchema` is the read-only JSON schema a tool offers the model, bound to the
validator of its arguments: pydantic's ``TypeAdapter`` for a ``@tool`` function (see
``_schema.py``), ``jsonschema`` (Draft 2020-12) for a hand-written schema, which
:func:`checked_schema` checks when the tool is defined. :func:`validate` lists every
problem of a call, each naming the field path, for the tool result the model reads.

When a call fails, it is read once more as the model meant it (:func:`as_meant`): a
``null`` given for an optional property whose schema does not allow ``null`` counts as
leaving the property out (how OpenAI's strict mode, where every property is required, says
"not given"; see ``openai_strict_schema``), and ``2.0`` where an integer is wanted is ``2``.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, final

from innerloop._errors import ToolDefinitionError

if TYPE_CHECKING:
    import jsonschema
    import pydantic

__all__ = [
    "ToolSchema",
    "Validated",
    "checked",
    "checked_schema",
    "describe",
    "problems_from_pydantic",
    "strict_json",
    "tool_schema",
    "validate",
]

# Draft 2020-12 keywords whose value is one subschema, a list of them, or a name -> subschema map.
_ONE = frozenset(
    {
        "items",
        "contains",
        "additionalProperties",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_LIST = frozenset({"prefixItems", "allOf", "anyOf", "oneOf"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
_ASSERTIONS = frozenset(
    {
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "format",
    }
)
_ANNOTATIONS = frozenset(
    {"$schema", "$comment", "$ref", "title", "description", "default", "deprecated"}
    | {"readOnly", "writeOnly", "examples"}
)
KEYWORDS = _ONE | _LIST | _MAP | _ASSERTIONS | _ANNOTATIONS
"""The keywords a hand-written tool schema may use: Draft 2020-12's, less the ones
innerloop cannot honour."""

_UNSUPPORTED: Mapping[str, str] = {
    "definitions": "it is Draft 7's name; use '$defs'",
    "dependencies": "it is Draft 7's; use 'dependentRequired' or 'dependentSchemas'",
    "$id": "schemas are resolved locally; drop it and use '$defs' with '$ref': '#/$defs/...'",
    "$anchor": "use '$defs' with '$ref': '#/$defs/...'",
    "$dynamicRef": "use '$defs' with '$ref': '#/$defs/...'",
    "$dynamicAnchor": "use '$defs' with '$ref': '#/$defs/...'",
    "$vocabulary": "tool schemas use Draft 2020-12's vocabularies; drop it",
    "contentEncoding": "content keywords are not checked; drop it or use 'pattern'",
    "contentMediaType": "content keywords are not checked; drop it or use 'pattern'",
    "contentSchema": "content keywords are not checked; drop it",
}
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return False
    return "T" in value.upper() and parsed.tzinfo is not None


def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        parsed = datetime.time.fromisoformat(value)
    except ValueError:
        return False
    return parsed.tzinfo is not None


def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    scheme = urllib.parse.urlsplit(value).scheme
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme)) and not re.search(r"\s", value)


def _format_checker() -> jsonschema.FormatChecker:
    """jsonschema's Draft 2020-12 checkers plus RFC 3339 ``date-time`` and ``time`` and
    ``uri``, which it checks only with extra packages installed."""
    import jsonschema  # loaded with the first hand-written schema

    checker = jsonschema.FormatChecker(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    extra: Mapping[str, Callable[[object], bool]] = {
        "date-time": _is_datetime,
        "time": _is_time,
        "uri": _is_uri,
    }
    for name, check in extra.items():
        if name not in checker.checkers:
            checker.checks(name)(check)
    return checker


class _Validator(Protocol):
    converts: bool
    """``parse`` makes Python values of the arguments (more than a copy of them)."""

    def problems(self, args: Any) -> list[str]: ...

    def parse(self, args: Mapping[str, Any]) -> dict[str, Any]: ...


@final
class Validated(dict[str, Any]):
    """A call's arguments as they came (this dict) and as its schema made them
    (``parsed``): what :meth:`ToolSchema.checked` hands a ``@tool`` handler, so the
    arguments are validated once per call."""

    __slots__ = ("parsed", "schema")

    def __init__(self, args: Mapping[str, Any], schema: ToolSchema, parsed: dict[str, Any]):
        super().__init__(args)
        self.schema, self.parsed = schema, parsed


@final
class ToolSchema(Mapping[str, Any]):
    """A tool's JSON schema, read-only, bound to the validator of its arguments.

    It compares equal to a dict with the same content; ``dict(schema)`` is the plain
    JSON schema to send.
    """

    __slots__ = ("_schema", "_validator")

    def __init__(self, schema: Mapping[str, Any], validator: _Validator) -> None:
        self._schema = dict(schema)
        self._validator = validator

    def __getitem__(self, key: str) -> Any:
        return self._schema[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._schema)

    def __len__(self) -> int:
        return len(self._schema)

    def __repr__(self) -> str:
        return f"ToolSchema({self._schema!r})"

    def problems(self, args: Any) -> list[str]:
        """Every way ``args`` breaks the schema (empty when they are valid)."""
        problems = self._validator.problems(args)
        if problems:  # looked at only when something failed: the happy path stays fast
            cleaned = as_meant(self._schema, args)
            if cleaned is not args:
                return self._validator.problems(cleaned)
        return problems

    def checked(self, args: Any) -> tuple[Any, list[str]]:
        """``args`` as the tool's handler takes them, and every way they break the schema
        (empty when valid). A validator that converts (a ``@tool``'s) does it here, once:
        the handler is given a :class:`Validated` and does not validate again."""
        if self._validator.converts:
            try:
                return Validated(args, self, self._validator.parse(args)), []
            except ValueError:
                pass  # the slow road: the problems, or the arguments as the model meant them
        return args, self.problems(args)

    def parse(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The validated arguments as the tool's Python values; raises ``ValueError``
        (pydantic's ``ValidationError`` is one) on invalid ones."""
        try:
            return self._validator.parse(args)
        except ValueError:
            cleaned = as_meant(self._schema, args)
            if cleaned is args:
                raise
            return self._validator.parse(cleaned)


def validate(
    schema: ToolSchema | pydantic.TypeAdapter[Any] | Mapping[str, Any], args: Any
) -> list[str]:
    """Every way ``args`` breaks ``schema``, each naming the field path, what was expected
    and what was given; an empty list means valid.

    ``schema`` is a tool's :class:`ToolSchema`, a pydantic ``TypeAdapter``, or a plain
    JSON schema (checked first, as at definition, so a bad one raises
    :class:`ToolDefinitionError`).
    """
    if isinstance(schema, ToolSchema):
        return schema.problems(args)
    import pydantic  # loaded when first needed: import innerloop leaves it out

    if isinstance(schema, pydantic.TypeAdapter):
        try:
            strict_json(schema, args)
        except pydantic.ValidationError as exc:
            return problems_from_pydantic(exc, None)
        except ValueError as exc:
            return [f"the arguments: {exc}"]
        return []
    return checked_schema(schema, "the schema").problems(args)


def checked(schema: Mapping[str, Any], args: Any) -> tuple[Any, list[str]]:
    """:meth:`ToolSchema.checked` of a tool's schema (a plain JSON schema is checked first,
    as at definition)."""
    return checked_schema(schema, "the schema").checked(args)


def strict_json(adapter: pydantic.TypeAdapter[Any], args: Any) -> Any:
    """``args`` validated by ``adapter`` as the JSON they came as, in strict mode (no
    ``"3"`` for an int); raises ``ValueError`` (``ValidationError`` is one)."""
    import pydantic_core  # loaded with the first @tool function, not with innerloop

    try:
        text = pydantic_core.to_json(args)
    except pydantic_core.PydanticSerializationError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    return adapter.validate_json(text, strict=True)


# -- hand-written schemas: jsonschema ------------------------------------------------------


def tool_schema(schema: Mapping[str, Any], spec: Any) -> ToolSchema:
    """``ToolSpec.input_schema``'s converter: :func:`checked_schema` naming the tool."""
    return checked_schema(schema, f"tool {spec.name!r}")


def checked_schema(schema: Mapping[str, Any], where: str) -> ToolSchema:
    """``schema`` checked as a Draft 2020-12 JSON schema that innerloop can enforce, bound
    to a ``jsonschema`` validator; a :class:`ToolSchema` passes through unchanged.

    Raises :class:`ToolDefinitionError` naming ``where`` for an invalid schema, an unknown
    or unsupported keyword, a ``$ref`` that does not resolve inside the schema, or a
    ``format`` that cannot be checked.
    """
    if isinstance(schema, ToolSchema):
        return schema
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(
            f"{where}: input_schema must be a JSON schema object (a dict), got "
            f"{type(schema).__name__}"
        )
    try:
        plain = json.loads(json.dumps(dict(schema), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"{where}: input_schema is not JSON ({exc}); build it from dicts, lists, strings, "
            "numbers, booleans and None"
        ) from None
    declared = plain.get("$schema", _DRAFT)
    if declared.rstrip("#") != _DRAFT:
        raise ToolDefinitionError(
            f"{where}: input_schema declares $schema {declared!r}; tool schemas are Draft "
            f"2020-12: drop '$schema' or set it to {_DRAFT!r}"
        )
    import jsonschema  # loaded with the first hand-written schema

    try:
        jsonschema.Draft202012Validator.check_schema(plain)
    except jsonschema.SchemaError as exc:
        at = "/".join(str(p) for p in exc.path)
        raise ToolDefinitionError(
            f"{where}: input_schema is not a valid JSON schema: at '{at or '(root)'}': "
            f"{exc.message}"
        ) from None
    checker = _format_checker()
    for path, node in _subschemas(plain, ""):
        _check_node(node, path, plain, checker, where)
    return ToolSchema(plain, _JsonSchemaValidator(plain, checker))


def _subschemas(node: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema object in ``node`` (boolean schemas have no keywords), with its path."""
    if not isinstance(node, Mapping):
        return
    yield path, node
    for key, value in node.items():
        if key in _ONE:
            yield from _subschemas(value, f"{path}/{key}")
        elif key in _LIST and isinstance(value, list):
            for i, item in enumerate(value):
                yield from _subschemas(item, f"{path}/{key}/{i}")
        elif key in _MAP and isinstance(value, Mapping):
            for name, item in value.items():
                yield from _subschemas(item, f"{path}/{key}/{name}")


def _check_node(
    node: Mapping[str, Any],
    path: str,
    root: Mapping[str, Any],
    checker: jsonschema.FormatChecker,
    where: str,
) -> None:
    at = f"at '{path or '(root)'}'"
    for key in node:
        if key in KEYWORDS:
            continue
        if key in _UNSUPPORTED:
            fix = _UNSUPPORTED[key]
        else:
            close = difflib.get_close_matches(key, sorted(KEYWORDS), n=1)
            fix = (
                f"did you mean {close[0]!r}?"
                if close
                else "it would be ignored; drop it, or put notes in 'description'"
            )
        raise ToolDefinitionError(
            f"{where}: input_schema uses unsupported keyword {key!r} {at}; {fix}"
        )
    if "$schema" in node and path:
        raise ToolDefinitionError(
            f"{where}: input_schema has '$schema' {at}; only the root may declare it"
        )
    ref = node.get("$ref")
    if ref is not None and _resolve(root, ref) is None:
        raise ToolDefinitionError(
            f"{where}: input_schema has $ref {ref!r} {at} that does not resolve inside the "
            "schema; refer to '#/$defs/NAME' and define NAME under '$defs'"
        )
    fmt = node.get("format")
    if fmt is not None and fmt not in checker.checkers:
        known = ", ".join(sorted(checker.checkers))
        raise ToolDefinitionError(
            f"{where}: input_schema has format {fmt!r} {at}, which cannot be checked here; "
            f"use one of {known}, or 'pattern'"
        )


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """The subschema a local JSON-pointer ``$ref`` names, or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    pointer = urllib.parse.unquote(ref[1:])
    if not pointer:
        return node
    if not pointer.startswith("/"):
        return None
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


@final
class _JsonSchemaValidator:
    __slots__ = ("_any_object", "_validator")
    converts = False

    def __init__(self, schema: Mapping[str, Any], checker: jsonschema.FormatChecker) -> None:
        import jsonschema  # loaded with the first hand-written schema

        self._validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
        self._any_object = _any_object(schema)

    def problems(self, args: Any) -> list[str]:
        if self._any_object and isinstance(args, dict):
            return []  # what a tool without parameters takes: no validator needed
        if self._validator.is_valid(args):
            return []
        found: list[str] = []
        for error in sorted(self._validator.iter_errors(args), key=_error_order):
            for problem in _explain(error):
                if problem not in found:
                    found.append(problem)
        return found

    def parse(self, args: Mapping[str, Any]) -> dict[str, Any]:
        problems = self.problems(args)
        if problems:
            raise ValueError("; ".join(problems))
        return dict(args)


_NOTES = frozenset({"$schema", "$comment", "title", "description", "examples", "default"})
"""Keywords that constrain nothing."""


def _any_object(schema: Mapping[str, Any]) -> bool:
    """``schema`` takes every JSON object: ``{"type": "object"}``, maybe with no properties
    and notes (a tool without parameters)."""
    return (
        schema.get("type") == "object"
        and not schema.get("properties", {})
        and all(k in _NOTES or k in ("type", "properties") for k in schema)
    )


def _error_order(error: jsonschema.ValidationError) -> tuple[int, list[str]]:
    """Missing fields first, unexpected ones last, the rest by path."""
    rank = {"required": 0, "additionalProperties": 2, "unevaluatedProperties": 2}
    return rank.get(str(error.validator), 1), [str(p) for p in error.absolute_path]


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _at(path: str) -> str:
    return f"field {path!r}" if path else "the arguments"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def describe(value: Any) -> str:
    """``value`` for an error message: its JSON kind and a short repr."""
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


def _explain(error: jsonschema.ValidationError) -> list[str]:
    path = _path(error.absolute_path)
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "required":
        return [f"missing required field {_join(path, n)!r}" for n in expected if n not in value]
    if keyword in ("additionalProperties", "unevaluatedProperties") and expected is False:
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        extra = [n for n in value if n not in known and not any(re.search(p, n) for p in patterns)]
        allowed = ", ".join(known) or "none"
        return [f"unexpected field {_join(path, n)!r} (allowed: {allowed})" for n in extra]
    if keyword == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        return [f"{_at(path)}: expected {' or '.join(names)}, got {describe(value)}"]
    if keyword == "enum":
        allowed = ", ".join(repr(v) for v in expected)
        return [f"{_at(path)}: {value!r} is not one of {allowed}"]
    if keyword == "const":
        return [f"{_at(path)}: must be {expected!r}, got {value!r}"]
    if keyword in ("anyOf", "oneOf") and error.context:
        # X | None: say what X wanted rather than "matches none"
        options = [o for o in expected if o != {"type": "null"}]
        if len(options) == 1 and len(expected) == 2 and value is not None:
            inner = [e for e in error.context if e.schema is options[0] or e.schema == options[0]]
            found: list[str] = []
            for sub in inner:
                found += _explain(sub)
            if found:
                return found
        return [f"{_at(path)}: {describe(value)} matches none of the allowed forms"]
    return [f"{_at(path)}: {error.message}"]


# -- pydantic ------------------------------------------------------------------------------


_KINDS: Mapping[str, str] = {
    "int_type": "integer",
    "float_type": "number",
    "string_type": "string",
    "bool_type": "boolean",
    "list_type": "array",
    "tuple_type": "array",
    "set_type": "array",
    "frozen_set_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "dataclass_type": "object",
    "model_attributes_type": "object",
}


def problems_from_pydantic(
    exc: pydantic.ValidationError, schema: Mapping[str, Any] | None
) -> list[str]:
    """pydantic's errors as problem lines naming the field path, missing fields first and
    unexpected ones last; ``schema`` (the JSON schema validated against) tells union tags
    from field names and lists the allowed values and fields."""
    found: list[tuple[int, str]] = []
    for error in exc.errors(include_url=False):
        path, tags, node, parent = _pydantic_path(error["loc"], schema)
        at = _at(path) + "".join(f" (as {tag})" for tag in tags)
        kind, value = error["type"], error["input"]
        if kind == "missing":
            rank, problem = 0, f"missing required field {path!r}"
        elif kind == "extra_forbidden":
            allowed = ""
            if parent is not None:
                allowed = f" (allowed: {', '.join(parent.get('properties', {})) or 'none'})"
            rank, problem = 2, f"unexpected field {path!r}{allowed}"
        elif kind in _KINDS:
            rank, problem = 1, f"{at}: expected {_KINDS[kind]}, got {describe(value)}"
        elif kind in ("enum", "literal_error") and isinstance(node, dict) and "enum" in node:
            allowed = ", ".join(repr(v) for v in node["enum"])
            rank, problem = 1, f"{at}: {value!r} is not one of {allowed}"
        elif kind in ("value_error", "assertion_error") and "error" in error.get("ctx", {}):
            rank, problem = 1, f"{at}: {error['ctx']['error']}"
        else:
            message = error["msg"]
            message = message[:1].lower() + message[1:]
            rank, problem = 1, f"{at}: {message}, got {describe(value)}"
        if (rank, problem) not in found:
            found.append((rank, problem))
    return [problem for _, problem in sorted(found, key=lambda item: item[0])]


def _pydantic_path(
    loc: tuple[int | str, ...], root: Mapping[str, Any] | None
) -> tuple[str, list[str], Any, dict[str, Any] | None]:
    """The field path of a pydantic ``loc``, the union members it went through (pydantic
    puts their tags in ``loc``), the schema at its end and the object schema holding its
    last field, as far as the schema tells."""
    text = ""
    tags: list[str] = []
    node: Any = root
    parent: dict[str, Any] | None = None
    for part in loc:
        node = _look_through(root, node)
        if _union(node) is not None and isinstance(part, str):
            tags.append(part)
            node = None
            continue
        if isinstance(part, int):
            text += f"[{part}]"
            node = node.get("items") if isinstance(node, dict) else None
            continue
        text += f".{part}" if text else part
        parent = node if isinstance(node, dict) else None
        if parent is None:
            node = None
        elif part in parent.get("properties", {}):
            node = parent["properties"][part]
        else:
            extra = parent.get("additionalProperties")
            node = extra if isinstance(extra, dict) else None
    return text, tags, _look_through(root, node), parent


def _union(node: Any) -> list[Any] | None:
    if not isinstance(node, dict):
        return None
    options = node.get("anyOf", node.get("oneOf"))
    return options if isinstance(options, list) else None


# -- what a model meant ---------------------------------------------------------------------


def as_meant(schema: Mapping[str, Any], args: Any) -> Any:
    """``args`` without the ``null`` values given for optional properties whose schema does
    not accept ``null`` (OpenAI's strict mode sends those for "not given"), and with
    integral numbers such as ``2.0`` as integers where the schema wants an integer (JSON
    Schema counts them as integers); the same object when nothing changes."""
    return _meant(schema, schema, args)


def _meant(root: Mapping[str, Any], node: Any, value: Any) -> Any:
    node = _look_through(root, node)
    if not isinstance(node, dict):
        return value
    if isinstance(value, float) and value.is_integer() and node.get("type") == "integer":
        return int(value)
    if isinstance(value, dict):
        return _meant_object(root, node, value)
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        items = [_meant(root, node["items"], v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _meant_object(root: Mapping[str, Any], node: dict[str, Any], value: dict[str, Any]) -> Any:
    """``_meant`` for an object: its properties one by one."""
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return value
    required = node.get("required", ())
    out: dict[str, Any] | None = None
    for key, item in value.items():
        sub = properties.get(key)
        if sub is None:
            continue
        if item is None:
            if key not in required and not _accepts_null(root, sub):
                out = dict(value) if out is None else out
                del out[key]
            continue
        new = _meant(root, sub, item)
        if new is not item:
            out = dict(value) if out is None else out
            out[key] = new
    return value if out is None else out


def _look_through(root: Mapping[str, Any] | None, node: Any) -> Any:
    """``node`` with its ``$ref`` (and a nullable ``anyOf``) looked through."""
    for _ in range(32):
        if not isinstance(node, dict):
            return node
        if "$ref" in node and root is not None:
            node = _resolve(root, node["$ref"])
            continue
        options = node.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            node = next(o for o in options if o != {"type": "null"})
            continue
        return node
    return node


def _accepts_null(root: Mapping[str, Any], node: Any) -> bool:
    for _ in range(32):
        if not isinstance(node, dict):
            return node is True
            return False
        if "$ref" in node:
            node = _resolve(root, node["$ref"])
            continue
        break
    if not any(k in node for k in ("type", "enum", "const", "anyOf", "oneOf", "allOf", "not")):
        return True
    kinds = node.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    if None in node.get("enum", ()) or ("const" in node and node["const"] is None):
        return True
    options = node.get("anyOf", node.get("oneOf", ()))
    return any(_accepts_null(root, o) for o in options) if isinstance(options, list) else False
