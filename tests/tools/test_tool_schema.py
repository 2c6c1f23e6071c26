"""The argument validator: every problem named by field path, expected and given."""

from __future__ import annotations

import enum
from typing import Any, Literal

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from innerloop.tools import schema_for, tool, validate
from innerloop.tools._schema import convert


class Size(enum.Enum):
    S = "s"
    L = "l"


@attrs.frozen
class Box:
    size: Size
    weight: float = 1.0


@tool
def pack(boxes: list[Box], label: str, count: int = 1, mode: Literal["a", "b"] = "a") -> str:
    """Pack boxes."""
    return label


SCHEMA = pack.input_schema


class TestValidate:
    def test_valid(self) -> None:
        """Valid arguments produce no errors; an integral float passes as an integer."""
        assert validate(SCHEMA, {"boxes": [{"size": "s"}], "label": "x", "count": 2.0}) == []

    def test_each_problem_is_named(self) -> None:
        """Type, enum, missing, unexpected and nested problems each get one line."""
        errors = validate(
            SCHEMA,
            {"boxes": [{"size": "m", "weight": "1"}, "no"], "count": True, "mode": "c", "x": 1},
        )
        assert errors == [
            "missing required field 'label'",
            "field 'boxes[0].size': 'm' is not one of 's', 'l'",
            "field 'boxes[0].weight': expected number, got string '1'",
            "field 'boxes[1]': expected object, got string 'no'",
            "field 'count': expected integer, got boolean True",
            "field 'mode': 'c' is not one of 'a', 'b'",
            "unexpected field 'x' (allowed: boxes, label, count, mode)",
        ]

    def test_optional_reports_the_inner_type(self) -> None:
        """For X | None the error says what X expected, not 'matches none'."""
        schema = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
        assert validate(schema, None) == []
        assert validate(schema, "3", "n") == ["field 'n': expected integer, got string '3'"]

    def test_not_an_object(self) -> None:
        """Arguments that are not an object are refused as a whole."""
        assert validate(SCHEMA, [1]) == ["the arguments: expected object, got array [1]"]

    @settings(deadline=None)
    @given(st.integers(), st.floats(allow_nan=False), st.text(), st.booleans())
    def test_scalars_match_their_python_type(self, i: int, f: float, s: str, b: bool) -> None:
        """Only a value of the right JSON type passes a scalar schema."""
        values: dict[str, Any] = {"integer": i, "number": f, "string": s, "boolean": b}
        for name, value in values.items():
            for other, schema_type in [(n, n) for n in values]:
                ok = validate({"type": schema_type}, value) == []
                expected = (
                    other == name
                    or (schema_type == "number" and name == "integer")
                    or (schema_type == "integer" and name == "number" and float(value).is_integer())
                )
                assert ok == expected, (name, value, schema_type)


class TestConvert:
    def test_enums_attrs_and_floats(self) -> None:
        """Validated JSON becomes the annotated Python types."""
        hints = {"boxes": list[Box], "weight": float}
        assert convert(hints["boxes"], [{"size": "l", "weight": 2}]) == [Box(Size.L, 2.0)]
        assert convert(hints["weight"], 3) == 3.0
        assert isinstance(convert(float, 3), float)


SCALARS: list[Any] = [str, int, float, bool, Size, Literal["x", "y"], Box]


def _annotations() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.sampled_from(SCALARS),
        lambda inner: st.one_of(
            inner.map(lambda a: list[a]),  # type: ignore[valid-type]
            inner.map(lambda a: dict[str, a]),  # type: ignore[valid-type]
            inner.map(lambda a: a | None),
        ),
        max_leaves=4,
    )


def _values(annotation: Any) -> st.SearchStrategy[Any]:
    """JSON values that a model could send for ``annotation``."""
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers()
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is str:
        return st.text(max_size=5)
    if annotation is Size:
        return st.sampled_from(["s", "l"])
    if annotation is Box:
        return st.fixed_dictionaries(
            {"size": st.sampled_from(["s", "l"])}, optional={"weight": st.floats(-1, 1)}
        )
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(_values(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=3), _values(args[1]), max_size=3)
    return st.one_of(st.none(), _values(next(a for a in args if a is not type(None))))


class TestRoundTrip:
    @settings(deadline=None, max_examples=200)
    @given(st.data(), _annotations())
    def test_generated_values_validate_and_convert(self, data: Any, annotation: Any) -> None:
        """Any value of the annotated type passes its schema and converts without error."""
        value = data.draw(_values(annotation))
        schema = schema_for(annotation, "p")
        assert validate(schema, value) == []
        convert(annotation, value)

    @settings(deadline=None, max_examples=200)
    @given(_annotations())
    def test_a_wrong_kind_is_refused(self, annotation: Any) -> None:
        """An object where the schema wants no object (or the reverse) is refused."""
        schema = schema_for(annotation, "p")
        inner = schema["anyOf"][0] if "anyOf" in schema else schema
        wants_object = inner.get("type") == "object"
        wrong = [1, 2] if wants_object else {"unexpected": []}
        assert validate(schema, wrong) != []
