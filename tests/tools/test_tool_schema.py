"""Argument validation (pydantic for @tool, jsonschema for hand-written schemas), the
definition-time check of hand-written schemas, and the OpenAI strict form."""

from __future__ import annotations

import enum
import typing
from typing import Annotated, Any, Literal

import attrs
import jsonschema
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from innerloop import ToolDefinitionError
from innerloop.lowlevel import schema_for
from innerloop.tools import ToolSchema, ToolSpec, openai_strict_schema, tool, validate


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


def bound_schema(spec: ToolSpec) -> ToolSchema:
    """``spec.input_schema``, which a ToolSpec always holds as a ToolSchema."""
    assert isinstance(spec.input_schema, ToolSchema)
    return spec.input_schema


SCHEMA = bound_schema(pack)


async def _noop(args: Any, ctx: Any) -> Any:
    raise AssertionError("not called")


def hand(schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec("hand", "Hand-written.", schema, _noop)


class TestValidate:
    def test_valid(self) -> None:
        """Valid arguments produce no errors; an integral float passes as an integer."""
        assert validate(SCHEMA, {"boxes": [{"size": "s"}], "label": "x", "count": 2.0}) == []
        assert SCHEMA.parse({"boxes": [{"size": "s"}], "label": "x", "count": 2.0}) == {
            "boxes": [Box(Size.S)],
            "label": "x",
            "count": 2,
        }

    def test_each_problem_is_named(self) -> None:
        """Type, enum, missing, unexpected and nested problems each get one line: missing
        fields first, unexpected ones last."""
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

    def test_strings_are_not_numbers(self) -> None:
        """Validation is strict on the JSON: "3" is no integer, 1 no boolean."""

        @tool
        def f(n: int, flag: bool = False) -> None:
            """Doc."""

        assert validate(f.input_schema, {"n": "3", "flag": 1}) == [
            "field 'n': expected integer, got string '3'",
            "field 'flag': expected boolean, got integer 1",
        ]

    def test_constraints_are_checked(self) -> None:
        """Field(ge=..., pattern=...) constraints are enforced, not just written down."""

        @tool
        def f(
            n: Annotated[int, pydantic.Field(ge=0)],
            code: Annotated[str, pydantic.Field(pattern=r"^[A-Z]{3}$")] = "ABC",
        ) -> None:
            """Doc."""

        assert f.input_schema["properties"]["n"] == {"type": "integer", "minimum": 0}
        assert validate(f.input_schema, {"n": -1, "code": "abc"}) == [
            "field 'n': input should be greater than or equal to 0, got integer -1",
            "field 'code': string should match pattern '^[A-Z]{3}$', got string 'abc'",
        ]

    def test_optional_reports_the_inner_type(self) -> None:
        """For X | None the error says what X expected."""

        @tool
        def f(n: int | None) -> None:
            """Doc."""

        assert validate(f.input_schema, {"n": None}) == []
        assert validate(f.input_schema, {"n": "3"}) == [
            "field 'n': expected integer, got string '3'"
        ]

    def test_union_members_are_named(self) -> None:
        """For a union, each member's complaint says which member it is."""

        @tool
        def f(v: int | str) -> None:
            """Doc."""

        assert validate(f.input_schema, {"v": [1]}) == [
            "field 'v' (as int): expected integer, got array [1]",
            "field 'v' (as str): expected string, got array [1]",
        ]

    def test_null_for_an_optional_field_means_absent(self) -> None:
        """A null for an optional, non-nullable parameter (what OpenAI's strict mode sends)
        is read as leaving it out, so the default applies; for a required one it is an
        error."""
        assert SCHEMA.parse({"boxes": [], "label": "x", "count": None, "mode": None}) == {
            "boxes": [],
            "label": "x",
        }
        assert validate(SCHEMA, {"boxes": [{"size": "s", "weight": None}], "label": None}) == [
            "field 'label': expected string, got null None"
        ]

    def test_not_an_object(self) -> None:
        """Arguments that are not an object are refused as a whole."""
        assert validate(SCHEMA, [1]) == ["the arguments: expected object, got array [1]"]

    def test_type_adapter(self) -> None:
        """validate() takes a pydantic TypeAdapter too."""
        adapter = pydantic.TypeAdapter(dict[str, int])
        assert validate(adapter, {"a": 1}) == []
        assert validate(adapter, {"a": "x"}) == ["field 'a': expected integer, got string 'x'"]


class TestHandWritten:
    SCHEMA: typing.ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0},
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "required": ["n"],
        "additionalProperties": False,
    }

    @pytest.mark.parametrize(
        ("schema", "args", "problems"),
        [
            ({"type": "object"}, {"i": 3}, []),
            ({"type": "object", "properties": {}, "description": "none"}, {}, []),
            ({"type": "object"}, [1], ["the arguments: expected object, got array [1]"]),
            (
                {"type": "object", "properties": {}, "additionalProperties": False},
                {"a": 1},
                ["unexpected field 'a' (allowed: none)"],
            ),
            ({"type": "object", "minProperties": 1}, {}, ["the arguments: {} should be non-empty"]),
        ],
    )
    def test_a_schema_without_parameters(
        self, schema: dict[str, Any], args: Any, problems: list[str]
    ) -> None:
        """A schema that takes any object passes every object without a validator; a
        keyword that constrains it is still enforced."""
        assert validate(hand(schema).input_schema, args) == problems

    def test_calls_are_validated_with_every_keyword(self) -> None:
        """minimum, pattern, format and maxItems are enforced at run time."""
        spec = hand(self.SCHEMA)
        assert validate(spec.input_schema, {"n": 0, "when": "2025-01-02T03:04:05Z"}) == []
        assert validate(
            spec.input_schema,
            {"n": -1, "name": "A1", "when": "yesterday", "tags": ["a", "b", 3], "z": 0},
        ) == [
            "field 'n': -1 is less than the minimum of 0",
            "field 'name': 'A1' does not match '^[a-z]+$'",
            "field 'tags': ['a', 'b', 3] is too long",
            "field 'tags[2]': expected string, got integer 3",
            "field 'when': 'yesterday' is not a 'date-time'",
            "unexpected field 'z' (allowed: n, name, when, tags)",
        ]
        assert validate(spec.input_schema, {}) == ["missing required field 'n'"]

    def test_a_plain_dict_is_checked_then_validated(self) -> None:
        """validate() with a plain dict checks it first, as at definition."""
        assert validate({"type": "integer"}, "1") == [
            "the arguments: expected integer, got string '1'"
        ]
        with pytest.raises(ToolDefinitionError, match="unsupported keyword 'minimun'"):
            validate({"type": "integer", "minimun": 0}, 1)

    @pytest.mark.parametrize(
        ("schema", "message"),
        [
            (
                {"anyOf": 3},
                "input_schema is not a valid JSON schema: at 'anyOf': 3 is not of type 'array'",
            ),
            (
                {"type": "object", "properties": {"n": {"type": "integer", "minimun": 0}}},
                "input_schema uses unsupported keyword 'minimun' at '/properties/n'; did you "
                "mean 'minimum'?",
            ),
            (
                {"type": "object", "definitions": {}},
                "input_schema uses unsupported keyword 'definitions' at '(root)'; it is Draft "
                "7's name; use '$defs'",
            ),
            (
                {"type": "string", "contentMediaType": "text/html"},
                "input_schema uses unsupported keyword 'contentMediaType' at '(root)'; content "
                "keywords are not checked; drop it or use 'pattern'",
            ),
            (
                {"type": "object", "x-internal": True},
                "input_schema uses unsupported keyword 'x-internal' at '(root)'; it would be "
                "ignored; drop it, or put notes in 'description'",
            ),
            (
                {"properties": {"a": {"$ref": "#/$defs/missing"}}},
                "input_schema has $ref '#/$defs/missing' at '/properties/a' that does not "
                "resolve inside the schema; refer to '#/$defs/NAME' and define NAME under "
                "'$defs'",
            ),
            (
                {"type": "string", "format": "iri-reference"},
                "input_schema has format 'iri-reference' at '(root)', which cannot be checked "
                "here; use one of ",
            ),
            (
                {"$schema": "http://json-schema.org/draft-07/schema#"},
                "input_schema declares $schema 'http://json-schema.org/draft-07/schema#'; tool "
                "schemas are Draft 2020-12",
            ),
            (
                {"enum": [{1, 2}]},
                "input_schema is not JSON (Object of type set is not JSON serializable)",
            ),
        ],
    )
    def test_refused_at_definition(self, schema: dict[str, Any], message: str) -> None:
        """What cannot be enforced is refused when the ToolSpec is built, naming the tool,
        the place and the fix."""
        with pytest.raises(ToolDefinitionError) as info:
            hand(schema)
        assert str(info.value).startswith(f"tool 'hand': {message}")

    def test_local_refs_and_boolean_schemas_are_fine(self) -> None:
        """$defs with local $ref, and boolean subschemas, are accepted and enforced."""
        spec = hand(
            {
                "$defs": {"pos": {"type": "integer", "exclusiveMinimum": 0}},
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/pos"}, "b": True},
            }
        )
        assert validate(spec.input_schema, {"a": 1, "b": [1]}) == []
        assert validate(spec.input_schema, {"a": 0}) == [
            "field 'a': 0 is less than or equal to the minimum of 0"
        ]

    def test_the_spec_reads_as_the_dict_given(self) -> None:
        """The checked schema compares equal to the dict and serialises as it."""
        spec = hand(self.SCHEMA)
        assert spec.input_schema == self.SCHEMA
        assert spec.to_definition()["input_schema"] == self.SCHEMA


class TestOpenAIStrict:
    def test_function_schema(self) -> None:
        """Every property required, optional ones nullable, defaults dropped, nested objects
        closed."""
        assert openai_strict_schema(SCHEMA) == {
            "type": "object",
            "properties": {
                "boxes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "title": "Box",
                        "properties": {
                            "size": {"enum": ["s", "l"], "title": "Size", "type": "string"},
                            "weight": {"type": ["number", "null"]},
                        },
                        "required": ["size", "weight"],
                        "additionalProperties": False,
                    },
                },
                "label": {"type": "string"},
                "count": {"type": ["integer", "null"]},
                "mode": {"anyOf": [{"enum": ["a", "b"], "type": "string"}, {"type": "null"}]},
            },
            "required": ["boxes", "label", "count", "mode"],
            "additionalProperties": False,
        }

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "properties": {"m": {"type": "object"}}},
            {"type": "object", "properties": {"m": {"additionalProperties": {"type": "integer"}}}},
            {"type": "object", "properties": {"s": {"type": "string", "minLength": 1}}},
            {"type": "object", "properties": {"s": {"oneOf": [{"type": "string"}]}}},
            {"type": "object", "properties": {"a": {}}},
            {"type": "array"},
        ],
    )
    def test_cannot_be_strict(self, schema: dict[str, Any]) -> None:
        """Free-form objects, Any, and keywords strict mode does not take give None."""
        assert openai_strict_schema(schema) is None

    def test_the_input_is_not_changed(self) -> None:
        """The tool's own schema stays as it was."""
        before = dict(SCHEMA)
        openai_strict_schema(SCHEMA)
        assert dict(SCHEMA) == before
        assert "default" in SCHEMA["properties"]["count"]


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
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-(2**53), 2**53)
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


def _strictly(annotation: Any, value: Any) -> Any:
    """``value`` as strict mode sends it: every optional field present, null if unset."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if value is None:
        return None
    if annotation is Box:
        return {"weight": None, **value}
    if origin is list:
        return [_strictly(args[0], v) for v in value]
    if origin is dict:
        return {k: _strictly(args[1], v) for k, v in value.items()}
    if args and type(None) in args:
        return _strictly(next(a for a in args if a is not type(None)), value)
    return value


def _tool_of(annotation: Any) -> ToolSpec:
    def f(p: int, q: int = 0) -> None:
        """Doc."""

    f.__annotations__.update(p=annotation, q=annotation)
    return tool(f)


class TestRoundTrip:
    @settings(deadline=None, max_examples=100)
    @given(st.data(), _annotations())
    def test_generated_values_validate_and_convert(self, data: Any, annotation: Any) -> None:
        """Any value of the annotated type passes its schema and parses to the type, and
        the schema itself is a valid Draft 2020-12 schema that accepts it too."""
        value = data.draw(_values(annotation))
        spec = _tool_of(annotation)
        assert validate(spec.input_schema, {"p": value}) == []
        parsed = bound_schema(spec).parse({"p": value})
        if annotation in (Box, Size):
            assert isinstance(parsed["p"], annotation)
        jsonschema.Draft202012Validator(dict(spec.input_schema)).validate({"p": value})

    @settings(deadline=None, max_examples=100)
    @given(st.data(), _annotations())
    def test_strict_form_calls_pass_the_tool(self, data: Any, annotation: Any) -> None:
        """A call that fits the strict form (an optional parameter sent as null) passes
        the tool's own validation, when the annotation can be strict at all."""
        spec = _tool_of(annotation)
        strict = openai_strict_schema(spec.input_schema)
        if strict is None:
            return
        call = {"p": _strictly(annotation, data.draw(_values(annotation))), "q": None}
        jsonschema.Draft202012Validator(strict).validate(call)
        assert validate(spec.input_schema, call) == []

    @settings(deadline=None, max_examples=100)
    @given(_annotations())
    def test_a_wrong_kind_is_refused(self, annotation: Any) -> None:
        """An object where the schema wants no object (or the reverse) is refused."""
        schema = schema_for(annotation, "p")
        inner = schema["anyOf"][0] if "anyOf" in schema else schema
        wants_object = inner.get("type") == "object"
        wrong = [1, 2] if wants_object else {"unexpected": []}
        spec = _tool_of(annotation)
        assert validate(spec.input_schema, {"p": wrong}) != []
