"""One JSON form for innerloop's data: messages, events, errors, params and state.

A single cattrs converter turns the package's data into JSON data (dicts, lists, str, int,
float, bool, None) and back; ``json.dumps`` of the result is the wire and log form. The
rules are generic, so this bottom module never imports the layers above it:

- an attrs class: its fields by name (a field with ``init=False`` is not written);
  tuples and sets become lists, read-only mappings dicts, enums their values, datetimes
  ISO 8601 text. Reading fills missing fields with their defaults and ignores unknown keys.
- a content block (an attrs class whose ``type`` field is a fixed tag):
  ``{"type": tag, ...fields}``; a union of blocks is read back by ``type``.
- an event (a subclass of a class marked with :func:`tagged_base`, as
  :class:`~innerloop.Event` is): ``{"type": tag, ...fields}`` (the shapes of
  ``docs/event-log.md``); read back by ``type`` among every imported subclass, so the
  events of custom states load too.
- :class:`~innerloop.ProviderError`: ``category``, ``message``, ``provider``, ``status``,
  ``retry_after``, ``retry_after_header``, ``raw``.
- an attrs class that holds code (a field typed as a callable, like ``ToolSpec``): its
  ``name``. Reading looks the name up among the objects passed as ``named=``.
- reading checks each value's JSON type against its field's: an object where an attrs
  class (or a mapping) is expected, an array where a list or tuple is, a string where a
  ``str`` is, a number where an ``int`` or ``float`` is (an ``int`` takes no fraction, and
  neither takes a boolean), a boolean where a ``bool`` is. Anything else is refused with
  the path of the field (``usage: "lots"`` is ``expected an object (Usage), got a string
  @ $.usage``), never read as an empty object or coerced.
- a field typed as a ``typing.Protocol`` (``HarnessParams.tool_sources``, ``prepare_tools``):
  never read back (an empty tuple or None is).
- a value of a field typed ``Any`` (``HarnessState.notes``, a diagnostic, a tool's value),
  or a union with a class among its members (``HarnessParams.output_type``):
  JSON data as it is, tuples and sets as lists, attrs instances as dicts; anything else is
  refused with :class:`~innerloop._errors.ConversionError` rather than written half-way.
"""

from __future__ import annotations

import collections.abc
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import attrs

from innerloop._errors import ConversionError, ProviderError

if TYPE_CHECKING:  # cattrs itself is loaded with the first conversion (make_converter)
    import cattrs

__all__ = [
    "holds_code",
    "make_converter",
    "member_by_value",
    "structure",
    "tagged_base",
    "unstructure",
]

_TAGGED = "__json_tagged_base__"
"""Class attribute marking a class hierarchy whose members cross JSON as
``{"type": cls.type, ...fields}`` and are read back by ``type`` (see :func:`tagged_base`)."""


def tagged_base(cls: type[T]) -> type[T]:
    """Mark ``cls`` as the base of a tagged family (the events): every subclass is written
    with its ``type`` class attribute and read back by it, among the subclasses imported
    so far. The mark is a class attribute; this module keeps no registry."""
    setattr(cls, _TAGGED, cls)
    return cls


T = TypeVar("T")

_PLAIN = (int, float, bool, type(None))
_is_attrs: Callable[[Any], bool] = attrs.has  # without narrowing the class to AttrsInstance


def member_by_value(base: type[enum.Enum], value: Any) -> enum.Enum:
    """The member whose value is ``value`` among ``base`` and its subclasses, breadth
    first in the order they were defined. A base enum without members (such as the
    machine's ``OutcomeEnum``) is read back this way, so a custom state's members load."""
    pending: list[type[enum.Enum]] = [base]
    seen: set[type[enum.Enum]] = set()
    while pending:
        cls = pending.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        member = cls._value2member_map_.get(value)
        if member is not None:
            return member
        pending.extend(cls.__subclasses__())
    raise ValueError(
        f"{value!r} is no member of {base.__name__} or of a subclass defined so far; "
        "import the module that declares it first"
    )


def make_converter() -> cattrs.Converter:
    """A new converter with every rule above. :func:`unstructure` and :func:`structure`
    share one (made at first use, never changed); make your own only to add the hooks of
    a higher layer."""
    from cattrs.preconf.json import make_converter as _json_converter

    c = _json_converter(
        unstruct_collection_overrides={Sequence: list},
        unstructure_fallback_factory=_refuse_unknown,
    )
    # JSON types checked first, so the rules registered after them take precedence
    c.register_structure_hook_factory(_is_object, _object_structure)
    c.register_structure_hook_factory(_is_array, _array_structure)
    for scalar, check in _SCALARS.items():
        c.register_structure_hook(scalar, check)
    c.register_unstructure_hook_factory(holds_code, _code_unstructure)
    c.register_structure_hook_factory(holds_code, _code_structure_refused)
    c.register_structure_hook_factory(_is_protocol, _protocol_refused)
    c.register_unstructure_hook_factory(_is_block, _tagged)
    c.register_unstructure_hook_factory(
        _is_block_tuple, lambda t, conv: _blocks_unstructure(_blocks_of(t.__args__[0]), conv)
    )
    c.register_structure_hook_factory(
        _is_block_union, lambda t, conv: _block_structure(_blocks_of(t), conv)
    )
    c.register_structure_hook_factory(_holds_a_class, lambda _: _as_is)
    c.register_unstructure_hook_factory(_is_event, _event_unstructure)
    c.register_structure_hook_factory(_is_event, _event_structure)
    c.register_unstructure_hook_factory(_is_provider_error, lambda _: ProviderError.fields)
    c.register_structure_hook(ProviderError, lambda data, _: ProviderError.from_fields(data))
    for base in (enum.Enum, enum.StrEnum, enum.IntEnum):  # str and int would win otherwise
        c.register_structure_hook(base, lambda value, cls: member_by_value(cls, value))
    return c


def unstructure(obj: Any, as_type: Any = None, *, converter: cattrs.Converter | None = None) -> Any:
    """``obj`` as JSON data (``as_type`` picks the declared type, e.g. a union)."""
    return (converter or _shared()).unstructure(obj, unstructure_as=as_type)


@overload
def structure(
    data: Any,
    cls: type[T],
    *,
    named: Iterable[Any] = (),
    converter: cattrs.Converter | None = None,
) -> T: ...
@overload
def structure(
    data: Any,
    cls: Any,
    *,
    named: Iterable[Any] = (),
    converter: cattrs.Converter | None = None,
) -> Any: ...
def structure(
    data: Any,
    cls: Any,
    *,
    named: Iterable[Any] = (),
    converter: cattrs.Converter | None = None,
) -> Any:
    """``data`` (JSON data) read as a ``cls``.

    ``named`` gives the objects that hold code (``ToolSpec``...): each is looked up by its
    class and ``name``. Raises :class:`ConversionError` naming every bad path.
    """
    from cattrs.errors import BaseValidationError
    from cattrs.v import transform_error

    conv = converter or _shared()
    registry = {(type(o), o.name): o for o in named}
    if registry:
        conv = conv.copy()
        conv.register_structure_hook_factory(holds_code, _code_lookup(registry))
    try:
        return conv.structure(data, cls)
    except BaseValidationError as exc:
        problems = "; ".join(transform_error(exc, path="$", format_exception=_describe))
    except ConversionError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        problems = _describe(exc, None)
    raise ConversionError(_name(cls), f"cannot read a {_name(cls)} from this data: {problems}")


def _name(cls: Any) -> str:
    return getattr(cls, "__name__", None) or str(cls)


def _describe(exc: BaseException, tp: Any) -> str:
    import cattrs
    from cattrs.errors import CattrsError

    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, ConversionError):
        return exc.reason
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown keys {sorted(exc.extra_fields)}"
    if isinstance(exc, CattrsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


# -- JSON types -----------------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    """What JSON calls ``value``'s type, for an error."""
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return f"a {type(value).__name__}"


def _wrong(expected: str, value: Any) -> ConversionError:
    return ConversionError(expected, f"expected {expected}, got {_json_kind(value)}", value)


def _is_object(cls: Any) -> bool:
    """An attrs class read from a JSON object by the generic rule (not an event, not one
    that holds code: those have rules of their own)."""
    return isinstance(cls, type) and attrs.has(cls) and not _is_event(cls) and not holds_code(cls)


def _object_structure(cls: type[Any], conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    fields = conv.gen_structure_attrs_fromdict(cls)
    expected = f"an object ({cls.__name__})"

    def read(data: Any, _: Any) -> Any:
        if not isinstance(data, Mapping):
            raise _wrong(expected, data)
        return fields(data, cls)

    return read


def _is_array(tp: Any) -> bool:
    """``list[X]`` or ``tuple[X, ...]``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    return origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis)


def _array_structure(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory

    if typing.get_origin(tp) is list:
        items = list_structure_factory(tp, conv)
    else:
        items = homogenous_tuple_structure_factory(tp, conv)

    def read(data: Any, _: Any) -> Any:
        if not isinstance(data, list | tuple):
            raise _wrong("an array", data)
        return items(data, tp)

    return read


def _read_int(value: Any, _: Any) -> int:
    if type(value) is not int:
        raise _wrong("an integer", value)
    return value


def _read_float(value: Any, _: Any) -> float:
    if type(value) is not float and type(value) is not int:
        raise _wrong("a number", value)
    return float(value)


def _read_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise _wrong("a string", value)
    return value


def _read_bool(value: Any, _: Any) -> bool:
    if type(value) is not bool:
        raise _wrong("a boolean", value)
    return value


_SCALARS: Mapping[type[Any], Callable[[Any, Any], Any]] = types.MappingProxyType(
    {int: _read_int, float: _read_float, str: _read_str, bool: _read_bool}
)


# -- values of unknown classes --------------------------------------------------------------


def _refuse_unknown(cls: Any) -> Callable[[Any], Any]:
    if not isinstance(cls, type) or issubclass(cls, _PLAIN):
        return _identity  # a typing construct (a Literal of str...) or plain JSON data
    name = getattr(cls, "__qualname__", str(cls))

    def refuse(value: Any) -> Any:
        raise ConversionError(
            name,
            f"a value of type {name} is not JSON data and has no JSON form; keep JSON data "
            "(str, int, float, bool, None, lists, dicts with str keys, attrs instances) in "
            "fields typed Any (state notes, diagnostics, tool values), or convert it first",
            value,
        )

    return refuse


def _identity(value: Any) -> Any:
    return value


def _holds_a_class(tp: Any) -> bool:
    """A union with a class among its members (``type[...]``), as
    ``HarnessParams.output_type``: its value is read back as one typed ``Any`` is (as it
    is), and written by its own class (a class itself has no JSON form)."""
    return any(typing.get_origin(a) is type for a in _union_args(tp))


def _as_is(data: Any, _: Any) -> Any:
    return data


# -- objects that hold code ------------------------------------------------------------------


def holds_code(cls: Any) -> bool:
    """True for an attrs class with a field typed as a callable: it crosses JSON by name."""
    if not (isinstance(cls, type) and attrs.has(cls)):
        return False
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that names a type-checking-only import
        return False
    return any(_is_callable_type(hints.get(f.name)) for f in attrs.fields(cls))


def _is_callable_type(tp: Any) -> bool:
    if tp is collections.abc.Callable or typing.get_origin(tp) is collections.abc.Callable:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_is_callable_type(a) for a in typing.get_args(tp))
    return False


def _is_protocol(cls: Any) -> bool:
    """A ``typing.Protocol`` (a live object of the host, such as a tool source): no data."""
    return isinstance(cls, type) and bool(getattr(cls, "_is_protocol", False))


def _protocol_refused(cls: type[Any]) -> Callable[[Any, Any], Any]:
    def refuse(data: Any, _: Any) -> Any:
        raise ConversionError(
            cls.__qualname__,
            f"{cls.__qualname__} {data!r} stands for a live object of the host, which JSON "
            "does not carry; keep it out of data that crosses JSON",
            data,
        )

    return refuse


def _check_named(cls: type[Any]) -> None:
    if "name" not in attrs.fields_dict(cls):
        raise ConversionError(
            cls.__qualname__,
            f"{cls.__qualname__} holds code and has no 'name' field, so JSON cannot refer "
            "to it; give it a name field or keep it out of data that crosses JSON",
        )


def _code_unstructure(cls: type[Any], conv: cattrs.Converter) -> Callable[[Any], Any]:
    _check_named(cls)
    return lambda obj: obj.name


def _code_structure_refused(cls: type[Any]) -> Callable[[Any, Any], Any]:
    def refuse(data: Any, _: Any) -> Any:
        raise ConversionError(
            cls.__qualname__,
            f"{cls.__qualname__} {data!r} holds code, which JSON does not carry; pass the "
            f"{cls.__qualname__} objects to look names up in: structure(..., named=[...])",
            data,
        )

    return refuse


def _code_lookup(
    registry: Mapping[tuple[type[Any], str], Any],
) -> Callable[[Any], Callable[[Any, Any], Any]]:
    def factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
        known = sorted(name for kind, name in registry if issubclass(kind, cls))

        def look_up(data: Any, _: Any) -> Any:
            for (kind, name), obj in registry.items():
                if name == data and issubclass(kind, cls):
                    return obj
            raise ConversionError(
                cls.__qualname__,
                f"no {cls.__qualname__} named {data!r} among those passed in named= "
                f"(known: {', '.join(known) or 'none'}); pass the one this data names",
                data,
            )

        return look_up

    return factory


# -- content blocks ---------------------------------------------------------------------------


def _is_block(cls: Any) -> bool:
    """A content block: an attrs class whose ``type`` field is a fixed tag (a str default
    it is not built with)."""
    if not (isinstance(cls, type) and attrs.has(cls)):
        return False
    field = attrs.fields_dict(cls).get("type")
    return field is not None and not field.init and isinstance(field.default, str)


def _union_args(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return ()


def _is_block_union(tp: Any) -> bool:
    """A union of content blocks (``Block``)."""
    args = _union_args(tp)
    return bool(args) and all(_is_block(a) for a in args)


def _is_block_tuple(tp: Any) -> bool:
    """``tuple[Block, ...]``: a message's content."""
    args = typing.get_args(tp)
    return (
        typing.get_origin(tp) is tuple
        and len(args) == 2
        and args[1] is Ellipsis
        and _is_block_union(args[0])
    )


def _blocks_of(union: Any) -> dict[str, type[Any]]:
    return {attrs.fields(cls).type.default: cls for cls in _union_args(union)}


def _tagged(cls: type[Any], conv: cattrs.Converter) -> Callable[[Any], dict[str, Any]]:
    from cattrs.gen import make_dict_unstructure_fn, override

    tag = attrs.fields(cls).type.default
    fields = make_dict_unstructure_fn(cls, conv, type=override(omit=True))
    return lambda obj: {"type": tag, **fields(obj)}


def _blocks_unstructure(
    blocks: Mapping[str, type[Any]], conv: cattrs.Converter
) -> Callable[[Any], list[Any]]:
    """A message's content: each block through its own hook, found once (a hot path)."""
    hooks = {cls: conv.get_unstructure_hook(cls) for cls in blocks.values()}
    return lambda content: [hooks.get(type(b), conv.unstructure)(b) for b in content]


def _block_structure(
    blocks: Mapping[str, type[Any]], conv: cattrs.Converter
) -> Callable[[Any, Any], Any]:
    hooks = {tag: (cls, conv.get_structure_hook(cls)) for tag, cls in blocks.items()}

    def block(data: Any, _: Any) -> Any:
        kind = data.get("type") if isinstance(data, Mapping) else None
        found = hooks.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise ConversionError(
                "Block",
                f"unknown content block type {kind!r}; expected one of {', '.join(blocks)}",
                data,
            )
        cls, hook = found
        return hook(data, cls)

    return block


# -- events -------------------------------------------------------------------------------------


def _is_event(cls: Any) -> bool:
    return isinstance(cls, type) and getattr(cls, _TAGGED, None) is not None


def _event_unstructure(cls: type[Any], conv: cattrs.Converter) -> Callable[[Any], Any]:
    if not _is_attrs(cls):
        return lambda obj: conv.unstructure(obj, unstructure_as=type(obj))
    from cattrs.gen import make_dict_unstructure_fn

    tag = cls.type
    fields = make_dict_unstructure_fn(cls, conv)
    return lambda obj: {"type": tag, **fields(obj)}


def _event_classes(base: type[Any]) -> dict[str, type[Any]]:
    found: dict[str, type[Any]] = {}
    stack = [base]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if _is_attrs(cls):
            other = found.setdefault(cls.type, cls)
            if other is not cls:
                raise ConversionError(
                    base.__qualname__,
                    f"event classes {other.__qualname__} and {cls.__qualname__} share the "
                    f"type {cls.type!r}; give each event class its own type",
                )
    return found


def _event_structure(cls: type[Any], conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    if _is_attrs(cls):
        from cattrs.gen import make_dict_structure_fn

        fields = make_dict_structure_fn(cls, conv)

        def one(data: Any, _: Any) -> Any:
            if not isinstance(data, Mapping):
                raise _wrong(f"an object ({cls.__name__})", data)
            tag = data.get("type", cls.type)
            if tag != cls.type:
                raise ConversionError(
                    cls.__qualname__, f"a {tag!r} event is not a {cls.type!r} event", data
                )
            return fields(data, cls)

        return one

    def any_of(data: Any, _: Any) -> Any:
        tag = data.get("type") if isinstance(data, Mapping) else None
        # looked up at each call: events of custom states may be defined after first use
        found = _event_classes(cls).get(tag) if isinstance(tag, str) else None
        if found is None:
            raise ConversionError(
                cls.__qualname__,
                f"unknown event type {tag!r}; import the module that defines it "
                f"(known: {', '.join(sorted(_event_classes(cls)))})",
                data,
            )
        return conv.structure(data, found)

    return any_of


# -- provider errors ----------------------------------------------------------------------------


def _is_provider_error(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, ProviderError)


@functools.cache
def _shared() -> cattrs.Converter:
    """The converter :func:`unstructure` and :func:`structure` use: made once, never
    changed (a layer that needs more hooks makes its own with :func:`make_converter`)."""
    return make_converter()
