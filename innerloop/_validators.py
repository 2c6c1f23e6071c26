"""attrs validators for params: each raises :class:`ParamsError` naming the field.

A :class:`Check` is a predicate with the sentence that describes a good value; as an attrs
validator it names the field ``prefix + attribute name``, and :meth:`Check.verify` names any
other path (``tool_timeouts['shell']``, ``stop_sequences[1]``). The factories below build the
few checks the params classes need::

    max_turns: int = attrs.field(default=20, validator=integer(ge=1))
    temperature: float | None = attrs.field(default=None, validator=optional(number(ge=0, le=2)))

Numbers must be finite (NaN and infinity are refused) and ``bool`` is never a number.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from innerloop._errors import ParamsError

__all__ = [
    "Check",
    "boolean",
    "check_changed",
    "check_fields",
    "checked",
    "field_check",
    "instance",
    "integer",
    "mapping_of",
    "number",
    "optional",
    "string",
    "tuple_of",
]


@attrs.frozen(repr=False)
class Check:
    """A validator: ``test(value)`` holds for good values, ``expect`` describes them."""

    expect: str
    test: Callable[[Any], bool]
    prefix: str = ""
    allow_none: bool = False

    def verify(self, field: str, value: Any) -> None:
        """Raise ParamsError for ``field`` unless ``value`` passes."""
        if value is None and self.allow_none:
            return
        if not self.test(value):
            expect = f"None or {self.expect}" if self.allow_none else self.expect
            raise ParamsError(field, f"must be {expect}, got {value!r}", value)

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is attribute.default or (value is None and self.allow_none) or self.test(value):
            return  # the field's own default, or a good value: no name to build
        self.verify(self.prefix + attribute.name, value)

    def __repr__(self) -> str:
        return f"<Check must be {'None or ' if self.allow_none else ''}{self.expect}>"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_a(cls: type) -> Callable[[Any], bool]:
    """``isinstance(v, cls)`` as one C call (``cls``'s metaclass's ``__instancecheck__``,
    which ``isinstance`` itself calls) rather than a lambda's frame: a check that passes
    runs no Python."""
    test: Callable[[Any], bool] = type(cls).__instancecheck__.__get__(cls)
    return test


def integer(*, ge: int, le: int | None = None, prefix: str = "") -> Check:
    """A whole number (not a bool) ``>= ge`` (and ``<= le``, when given)."""
    if le is not None:
        return Check(
            f"an integer between {ge} and {le}",
            lambda v: isinstance(v, int) and v is not True and v is not False and ge <= v <= le,
            prefix,
        )
    return Check(
        f"an integer >= {ge}",
        lambda v: isinstance(v, int) and v is not True and v is not False and v >= ge,
        prefix,
    )


def _bounds(ge: float | None, gt: float | None, le: float | None, lt: float | None) -> str:
    low = f">= {ge:g}" if ge is not None else f"> {gt:g}" if gt is not None else ""
    high = f"<= {le:g}" if le is not None else f"< {lt:g}" if lt is not None else ""
    if ge is not None and le is not None:
        return f" between {ge:g} and {le:g}"
    if gt is not None and lt is not None:
        return f" between {gt:g} and {lt:g} (exclusive)"
    return " " + " and ".join(b for b in (low, high) if b) if low or high else ""


def number(
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    prefix: str = "",
) -> Check:
    """A finite int or float within the given bounds (``ge``/``gt`` below, ``le``/``lt``
    above); without an upper bound the message says "finite" (inf is refused too)."""

    def test(v: Any) -> bool:
        return (
            _is_number(v)
            and (ge is None or v >= ge)
            and (gt is None or v > gt)
            and (le is None or v <= le)
            and (lt is None or v < lt)
        )

    finite = "" if le is not None or lt is not None else "finite "
    return Check(f"a {finite}number{_bounds(ge, gt, le, lt)}", test, prefix)


def string(*, non_empty: bool = False, prefix: str = "") -> Check:
    """A ``str`` (with ``non_empty``, not ``''``)."""
    if non_empty:
        return Check("a non-empty string", lambda v: isinstance(v, str) and v != "", prefix)
    return Check("a string", _is_a(str), prefix)


def boolean(*, prefix: str = "") -> Check:
    """``True`` or ``False`` (not 0, 1 or a string)."""
    return Check("True or False", _is_a(bool), prefix)


def instance(cls: type, *, hint: str = "", prefix: str = "") -> Check:
    """An instance of ``cls``; ``hint`` (e.g. how to build one) follows the class name."""
    return Check(f"a {cls.__name__}{hint}", _is_a(cls), prefix)


def optional(check: Check) -> Check:
    """``check``, or ``None``."""
    return attrs.evolve(check, allow_none=True)


@attrs.frozen(repr=False)
class _Each:
    """Validates a container, then each item with ``item`` under ``field[i]`` or
    ``field[key]``."""

    container: Check
    item: Check
    keys: Check | None = None

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is attribute.default:
            return
        field = self.container.prefix + attribute.name
        self.container.verify(field, value)
        if self.keys is not None:  # a mapping (mapping_of's container check passed)
            for key, item in value.items():
                self.keys.verify(f"{field} key {key!r}", key)
                self.item.verify(f"{field}[{key!r}]", item)
            return
        good = self.item.test
        for i, item in enumerate(value):
            if not good(item):  # a good item builds no name
                self.item.verify(f"{field}[{i}]", item)

    def __repr__(self) -> str:
        return f"<validator {self.container.expect}>"


_CHECKS = "innerloop.checks"

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def checked(*validators: Validator) -> dict[str, tuple[Validator, ...]]:
    """Field metadata holding the field's validators, run by :func:`check_fields` from the
    class's ``__attrs_post_init__`` rather than one call each from ``__init__``::

        max_turns: int = attrs.field(default=20, metadata=checked(integer(ge=1)))
    """
    return {_CHECKS: validators}


def _default_of(attribute: attrs.Attribute[Any]) -> object:
    """The value a field holds when not given: its default, or what its factory returns
    (a factory such as ``list`` returns a new object each time, which is then checked)."""
    default: Any = attribute.default
    if isinstance(default, attrs.Factory) and not default.takes_self:  # type: ignore[arg-type]
        return default.factory()
    return default


@functools.cache
def _field_checks(
    cls: type,
) -> tuple[tuple[object, ...], tuple[tuple[tuple[Validator, ...], attrs.Attribute[Any]], ...]]:
    """The ``checked`` fields of ``cls`` in order (read once per class and process): their
    defaults, and their validators with their attributes."""
    fields = [a for a in attrs.fields(cls) if _CHECKS in a.metadata]
    return tuple(map(_default_of, fields)), tuple((a.metadata[_CHECKS], a) for a in fields)


def check_fields(instance: attrs.AttrsInstance) -> None:
    """Run the validators of ``instance``'s ``checked`` fields, in field order, skipping a
    field that holds its own default (the class's value or its factory's, good by
    construction): a class whose fields mostly keep their defaults then pays for the few
    that do not."""
    _checker(type(instance))(instance)


@functools.cache
def _checker(cls: type) -> Callable[[object], None]:
    """The body of :func:`check_fields` for ``cls``, written out once per class and process
    as attrs writes an ``__init__``: per ``checked`` field, one read and one ``is not`` its
    default, and for a value off it each validator (a :class:`Check` runs its test first,
    and is called only to name a failure or let a None through; a tuple's items are tested
    the same way, in one ``all(map(...))``)::

        v = self.max_turns
        if v is not d7:
            if not t7_0(v): v7_0(self, a7, v)

    A loop over the fields would pay a call per field to compare each value with its
    default; the written-out body pays them only for the fields off their defaults."""
    defaults, checks = _field_checks(cls)
    names: dict[str, Any] = {}
    lines = ["def check(self):", "    pass"]
    for i, ((validators, attribute), default) in enumerate(zip(checks, defaults, strict=True)):
        if not validators:
            continue
        names[f"d{i}"], names[f"a{i}"] = default, attribute
        lines += [f"    v = self.{attribute.name}", f"    if v is not d{i}:"]
        for j, validate in enumerate(validators):
            names[f"v{i}_{j}"] = validate
            call = f"v{i}_{j}(self, a{i}, v)"
            if isinstance(validate, Check):
                names[f"t{i}_{j}"] = validate.test
                call = f"if not t{i}_{j}(v): {call}"
            elif isinstance(validate, _Each) and validate.keys is None:  # a tuple of items
                names[f"t{i}_{j}"], names[f"e{i}_{j}"] = validate.container.test, validate.item.test
                call = f"if not t{i}_{j}(v) or not all(map(e{i}_{j}, v)): {call}"
            lines.append(f"        {call}")
    exec(compile("\n".join(lines), f"<check_fields of {cls.__qualname__}>", "exec"), names)
    check: Callable[[object], None] = names["check"]
    return check


@functools.cache
def _checks_by_name(
    cls: type,
) -> Mapping[str, tuple[object, tuple[Validator, ...], attrs.Attribute[Any]]]:
    """The ``checked`` fields of ``cls`` by name: each one's default, validators and
    attribute (read once per class and process)."""
    defaults, checks = _field_checks(cls)
    by_name = {a.name: (d, v, a) for (v, a), d in zip(checks, defaults, strict=True)}
    return MappingProxyType(by_name)


def field_check(cls: type, name: str) -> Check:
    """The :class:`Check` of ``cls``'s ``checked`` field ``name``: what checks an argument
    standing in for that field as the field itself is checked (the same rule, the same
    message), e.g. ``optional(field_check(HarnessParams, "max_turns")).verify(...)``.
    :class:`TypeError` when the field is not checked by one :class:`Check` alone."""
    found = _checks_by_name(cls).get(name)
    validators = () if found is None else found[1]
    if len(validators) != 1 or not isinstance(validators[0], Check):
        raise TypeError(
            f"{cls.__qualname__}.{name} is not checked by one Check alone "
            f"(its checks: {validators!r}); check the argument with a Check of its own"
        )
    return validators[0]


def check_changed(instance: attrs.AttrsInstance, names: Iterable[str]) -> None:
    """Run the validators of the ``checked`` fields among ``names`` (the fields a copy
    changed, in field order), skipping one that holds its own default, as
    :func:`check_fields` does for all of them."""
    checks = _checks_by_name(type(instance))
    for name in names:
        if name in checks:
            default, validators, attribute = checks[name]
            value = getattr(instance, name)
            if value is not default:
                for validate in validators:
                    validate(instance, attribute, value)


def tuple_of(item: Check, what: str, *, prefix: str = "") -> _Each:
    """A tuple (what the field's converter makes of a list) of items passing ``item``;
    ``what`` names the items in the message (``a list or tuple of {what}``)."""
    return _Each(Check(f"a list or tuple of {what}", _is_a(tuple), prefix), item)


def mapping_of(item: Check, what: str, *, prefix: str = "") -> _Each:
    """A mapping from strings to values passing ``item``; ``what`` describes it."""
    return _Each(
        Check(f"a mapping of {what}", _is_a(Mapping), prefix),
        item,
        string(non_empty=True),
    )
