"""check_fields: a field's checks run when its value is off its default, and only then."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from innerloop._errors import ParamsError
from innerloop._validators import check_fields, checked, field_check, integer, optional


def _counting(seen: list[tuple[str, object]]) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        seen.append((attribute.name, value))

    return check


SEEN: list[tuple[str, object]] = []
TABLE = {"a": 1}


def _table() -> dict[str, int]:
    return TABLE


@attrs.frozen(kw_only=True)
class _Params:
    size: int = attrs.field(default=3, metadata=checked(integer(ge=1), _counting(SEEN)))
    table: dict[str, int] = attrs.field(factory=_table, metadata=checked(_counting(SEEN)))
    items: list[int] = attrs.field(factory=list, metadata=checked(_counting(SEEN)))

    def __attrs_post_init__(self) -> None:
        check_fields(self)


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN.clear()


def test_defaults_and_factory_tables_are_not_checked_again() -> None:
    """A plain default and a factory's shared table are skipped; a factory that builds a
    new object each time (list) is checked, as any value the class did not make."""
    _Params()
    assert SEEN == [("items", [])]


def test_given_values_are_checked_in_field_order() -> None:
    """Every field given a value of its own runs its checks, in the order of the fields."""
    _Params(size=4, table={"b": 2}, items=[1])
    assert SEEN == [("size", 4), ("table", {"b": 2}), ("items", [1])]


def test_evolve_skips_the_fields_left_at_their_defaults() -> None:
    """attrs.evolve re-checks the changed field, not the defaults it carries over."""
    p = _Params()
    SEEN.clear()
    attrs.evolve(p, size=5)
    assert SEEN == [("size", 5), ("items", [])]


def test_a_bad_value_names_its_field() -> None:
    """The first failing check raises ParamsError naming the field."""
    with pytest.raises(ParamsError, match="size: must be an integer >= 1, got 0"):
        _Params(size=0)


@attrs.frozen(kw_only=True)
class _Sparse:
    plain: int = 0
    bare: int = attrs.field(default=0, metadata=checked())
    limit: int | None = attrs.field(default=5, metadata=checked(optional(integer(ge=1))))

    def __attrs_post_init__(self) -> None:
        check_fields(self)


def test_fields_without_checks_and_none_where_allowed_pass() -> None:
    """A field with no checks, one not ``checked`` at all, and None given to an optional
    check off its default all pass; a bad value after them still names its field."""
    assert _Sparse(plain=-1, bare=-1, limit=None).limit is None
    with pytest.raises(ParamsError, match="limit: must be None or an integer >= 1, got 0"):
        _Sparse(bare=-1, limit=0)


def test_field_check_is_the_check_a_field_runs() -> None:
    """``field_check`` hands out a field's own Check, so an argument standing in for the
    field is refused with the field's rule and message; a field checked otherwise (by
    more than one validator, by none, or not at all) is a TypeError saying so."""
    check = field_check(_Sparse, "limit")
    with pytest.raises(ParamsError, match="limit: must be None or an integer >= 1, got 0"):
        check.verify("limit", 0)
    assert check is attrs.fields(_Sparse).limit.metadata["innerloop.checks"][0]
    for name in ("size", "table"):
        with pytest.raises(TypeError, match=rf"_Params\.{name} is not checked by one Check"):
            field_check(_Params, name)
    for name in ("bare", "plain"):
        with pytest.raises(TypeError, match=rf"_Sparse\.{name} is not checked by one Check"):
            field_check(_Sparse, name)
