"""A function's parameters as a tool's JSON schema and argument validator, by pydantic.

The parameters become one ``TypedDict`` (required without a default, extra fields
refused) that a pydantic ``TypeAdapter`` validates and converts; its JSON schema is what
the model sees. Any type pydantic validates from JSON works: ``str``, ``int``, ``float``,
``bool``, lists, dicts, tuples, sets, ``Literal``, ``Enum``, ``X | None``, unions,
dataclasses, ``TypedDict``, pydantic models, ``datetime``..., with constraints as
``Annotated[int, Field(ge=0)]``. attrs classes are translated to a ``TypedDict`` of their
``__init__`` arguments and built after validation (so their own validators run, and what
they raise is reported on the field). ``Annotated[X, "text"]`` describes ``X``.

Validation is pydantic's strict mode on the arguments as JSON, so what passes is what the
schema says: ``"3"`` is not an ``int`` and ``1`` not a ``bool``; an enum takes its value, a
dataclass or model an object, a ``datetime`` an ISO 8601 string.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, NotRequired, Required, final

import attrs
import pydantic
from pydantic.json_schema import GenerateJsonSchema
from typing_extensions import TypedDict

from innerloop._errors import ToolDefinitionError
from innerloop.tools._spec import ToolContext
from innerloop.tools._validate import (
    ToolSchema,
    Validated,
    problems_from_pydantic,
    strict_json,
    validate,
)

__all__ = [
    "Signature",
    "parse_docstring",
    "resolve_hints",
    "schema_for",
    "signature_of",
    "validate",
]

_FORBID = pydantic.ConfigDict(extra="forbid")
_SCALAR_DEFAULTS = (str, int, float, bool, type(None))


class _Generate(GenerateJsonSchema):
    """pydantic's generator without the titles it derives from field names."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def resolve_hints(obj: Any, where: str) -> dict[str, Any]:
    """``obj``'s resolved type hints, or :class:`ToolDefinitionError` naming ``where``."""
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: cannot resolve the type hints of {getattr(obj, '__qualname__', obj)!r} "
            f"({type(exc).__name__}: {exc}); import every annotated type at module level"
        ) from exc


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the text before the first section such as ``Args:``) and the
    parameter descriptions (Google ``Args:``, Sphinx ``:param x:``, NumPy or Epydoc)."""
    text = inspect.cleandoc(doc or "")
    import docstring_parser  # loaded with the first @tool

    try:
        parsed = docstring_parser.parse(text)
    except docstring_parser.ParseError:
        return text, {}
    params = {
        p.arg_name.lstrip("*"): " ".join(p.description.split())
        for p in parsed.params
        if p.description and p.args[0] in ("param", "attribute")
    }
    return (parsed.description or "").strip(), params


def _show(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "").replace("typing_extensions.", "")


def _described(annotation: Any, description: str) -> Any:
    """``annotation`` described by ``description``, unless it carries its own."""
    if typing.get_origin(annotation) is Annotated:
        base, *meta = typing.get_args(annotation)
        return Annotated[(base, pydantic.Field(description=description), *meta)]
    return Annotated[annotation, pydantic.Field(description=description)]


def _for_pydantic(annotation: Any, where: str, active: frozenset[type]) -> Any:
    """``annotation`` with attrs classes replaced by validating ``TypedDict`` s and
    ``Annotated`` strings by descriptions; anything else unchanged."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        base, *meta = args
        notes = [m if not isinstance(m, str) else pydantic.Field(description=m) for m in meta]
        return Annotated[(_for_pydantic(base, where, active), *notes)]
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_type(annotation, where, active)
    if origin is None or origin is typing.Literal or not args:
        return annotation
    new = tuple(_for_pydantic(a, where, active) for a in args)
    if all(a is b for a, b in zip(new, args, strict=True)):
        return annotation
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[new]  # noqa: UP007 - built from a tuple
    try:
        return origin[new]
    except TypeError:
        return annotation


def _attrs_type(cls: type, where: str, active: frozenset[type]) -> Any:
    if cls in active:
        raise ToolDefinitionError(
            f"{where}: attrs class {cls.__qualname__} refers to itself; use a dataclass or a "
            "pydantic model for recursive arguments"
        )
    hints = resolve_hints(cls, where)
    summary, notes = parse_docstring(cls.__doc__)
    fields: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        if field.name not in hints:
            raise ToolDefinitionError(
                f"{where}: field {field.name!r} of {cls.__name__} has no type annotation; "
                "annotate it"
            )
        name = field.alias or field.name
        annotation = _for_pydantic(hints[field.name], f"{where}.{name}", active | {cls})
        if field.name in notes:
            annotation = _described(annotation, notes[field.name])
        wrap = Required if field.default is attrs.NOTHING else NotRequired
        fields[name] = wrap[annotation]
    shape = _typed_dict(cls.__name__, fields)
    shape.__doc__ = summary or None

    def build(values: dict[str, Any]) -> Any:
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:  # attrs validators raise either
            raise ValueError(f"{cls.__name__}: {exc}") from exc

    return Annotated[shape, pydantic.AfterValidator(build)]


def _typed_dict(name: str, fields: dict[str, Any]) -> Any:
    """A ``TypedDict`` class built at run time, refusing extra keys."""
    shape = typing.cast(Any, TypedDict)(name, fields)
    shape.__pydantic_config__ = _FORBID
    return shape


def _adapter(annotation: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(annotation)


def _json_schema(adapter: pydantic.TypeAdapter[Any]) -> dict[str, Any]:
    return _inline(adapter.json_schema(schema_generator=_Generate))


def _unsupported(annotation: Any, where: str, exc: Exception) -> ToolDefinitionError:
    reason = str(exc).split("\n")[0].split(". ")[0]
    return ToolDefinitionError(
        f"{where}: unsupported annotation {_show(annotation)} ({reason}); use types that "
        "JSON can carry: str, int, float, bool, list[X], dict[str, X], Literal[...], "
        "X | None, an Enum, a dataclass, a TypedDict, a pydantic model or an attrs class"
    )


def schema_for(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON schema of ``annotation``; ``where`` names it in errors (e.g. ``parameter
    'x'``). Raises :class:`ToolDefinitionError` when pydantic cannot validate it from JSON.
    """
    converted = _for_pydantic(annotation, where, frozenset())
    try:
        return _json_schema(_adapter(converted))
    except pydantic.PydanticUserError as exc:
        raise _unsupported(annotation, where, exc) from exc


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``$ref`` into its ``$defs`` replaced by the definition (the
    form every provider reads best); unchanged when a definition refers to itself."""
    defs = schema.get("$defs")
    if not defs:
        return schema

    def expand(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [expand(n, stack) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in stack:
                raise RecursionError(name)
            target = expand(defs[name], (*stack, name))
            siblings = {k: expand(v, stack) for k, v in node.items() if k != "$ref"}
            return {**target, **siblings}
        return {k: expand(v, stack) for k, v in node.items()}

    try:
        body = expand({k: v for k, v in schema.items() if k != "$defs"}, ())
    except RecursionError:
        return schema
    return typing.cast(dict[str, Any], body)


@final
class _AdapterValidator:
    """Validates and converts with a pydantic ``TypeAdapter``; ``schema`` (its JSON
    schema) names the fields in the problems."""

    __slots__ = ("_adapter", "_schema")
    converts = True

    def __init__(self, adapter: pydantic.TypeAdapter[Any], schema: Mapping[str, Any]) -> None:
        self._adapter = adapter
        self._schema = schema

    def problems(self, args: Any) -> list[str]:
        try:
            self.parse(args)
        except pydantic.ValidationError as exc:
            return problems_from_pydantic(exc, self._schema)
        except ValueError as exc:
            return [f"the arguments: {exc}"]
        return []

    def parse(self, args: Any) -> dict[str, Any]:
        return typing.cast(dict[str, Any], strict_json(self._adapter, args))


@attrs.frozen
class Signature:
    """What ``@tool`` reads from a function: its input schema (bound to the pydantic
    validator), its description and the parameter that takes the ``ToolContext``."""

    schema: ToolSchema
    description: str
    context_param: str | None

    def kwargs(self, args: Mapping[str, Any], ctx: ToolContext | None) -> dict[str, Any]:
        """The keyword arguments to call the function with (``args`` validated already
        when the runner checked them against this schema)."""
        if isinstance(args, Validated) and args.schema is self.schema:
            kwargs = dict(args.parsed)
        else:
            kwargs = self.schema.parse(args)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return kwargs


def signature_of(fn: Callable[..., Any], where: str) -> Signature:
    """Read ``fn``'s parameters, hints and docstring (see the module docstring).

    Raises :class:`ToolDefinitionError` naming ``where`` and the parameter for a variadic,
    positional-only, unannotated or unsupported parameter.
    """
    hints = resolve_hints(fn, where)
    summary, descriptions = parse_docstring(fn.__doc__)
    fields: dict[str, Any] = {}
    originals: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    context_param: str | None = None
    for name, param in inspect.signature(fn).parameters.items():
        _check_kind(param, where)
        if name not in hints:
            raise ToolDefinitionError(
                f"{where}: parameter {name!r} has no type annotation; annotate it (e.g. "
                f"{name}: str)"
            )
        annotation = hints[name]
        if annotation is ToolContext:
            context_param = name
            continue
        converted = _for_pydantic(annotation, f"{where}: parameter {name!r}", frozenset())
        if name in descriptions:
            converted = _described(converted, descriptions[name])
        if param.default is param.empty:
            fields[name] = Required[converted]
        else:
            fields[name] = NotRequired[converted]
            if isinstance(param.default, _SCALAR_DEFAULTS):
                defaults[name] = param.default
        originals[name] = annotation
    shape = _typed_dict(_identifier(getattr(fn, "__name__", "tool")), fields)
    try:
        adapter = _adapter(shape)
        schema = _json_schema(adapter)
    except pydantic.PydanticUserError as exc:
        for name, annotation in originals.items():  # which parameter? (only on this path)
            schema_for(annotation, f"{where}: parameter {name!r}")
        raise _unsupported(shape, where, exc) from exc
    schema.pop("title", None)
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    for name, value in defaults.items():
        schema["properties"][name].setdefault("default", value)
    return Signature(ToolSchema(schema, _AdapterValidator(adapter, schema)), summary, context_param)


def _check_kind(param: inspect.Parameter, where: str) -> None:
    """Raise for a parameter a tool cannot be called with by keyword."""
    name = param.name
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
        raise ToolDefinitionError(
            f"{where}: parameter {name!r} is variadic ({stars}{name}); tools take named "
            "parameters only"
        )
    if param.kind is param.POSITIONAL_ONLY:
        raise ToolDefinitionError(
            f"{where}: parameter {name!r} is positional-only; tools are called with "
            "keyword arguments"
        )


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name) or "tool"
