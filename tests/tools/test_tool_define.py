"""@tool: schemas from type hints, descriptions from docstrings, definition-time errors."""

from __future__ import annotations

import asyncio
import enum
from typing import Annotated, Any, Literal, Optional

import attrs
import pytest

from innerloop import HarnessParams, ParamsError, ToolDefinitionError
from innerloop.tools import ToolContext, Toolset, ToolSpec, schema_for, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Point:
    x: int
    y: float = 0.0


def _props(spec: ToolSpec) -> dict[str, Any]:
    return dict(spec.input_schema["properties"])


class TestSchemaFromHints:
    def test_scalars_required_and_defaults(self) -> None:
        """Scalars map to JSON types; parameters without a default are required."""

        @tool
        def f(s: str, i: int, x: float, b: bool = False) -> str:
            """Doc."""
            return s

        assert f.input_schema == {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "i": {"type": "integer"},
                "x": {"type": "number"},
                "b": {"type": "boolean"},
            },
            "required": ["s", "i", "x"],
            "additionalProperties": False,
        }

    def test_containers_literal_optional_enum_attrs(self) -> None:
        """list, dict, Literal, Optional, Enum and attrs classes have exact schemas."""

        @tool
        def f(
            tags: list[str],
            counts: dict[str, int],
            mode: Literal["fast", "slow"],
            limit: Optional[int],  # noqa: UP045 - the spelling under test
            color: Color,
            at: Point,
            note: str | None = None,
        ) -> None:
            """Doc."""

        props = _props(f)
        assert props["tags"] == {"type": "array", "items": {"type": "string"}}
        assert props["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
        assert props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
        assert props["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
        assert props["color"] == {"enum": ["red", "blue"], "type": "string"}
        assert props["at"] == {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "number"}},
            "required": ["x"],
            "additionalProperties": False,
        }
        assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
        assert f.input_schema["required"] == ["tags", "counts", "mode", "limit", "color", "at"]

    def test_annotated_description(self) -> None:
        """Annotated[X, "text"] describes the parameter."""
        assert schema_for(Annotated[int, "how many"], "p") == {
            "type": "integer",
            "description": "how many",
        }

    def test_context_parameter_is_not_in_the_schema(self) -> None:
        """A ToolContext parameter receives the context and is not offered to the model."""

        @tool
        def f(a: int, ctx: ToolContext) -> int:
            """Doc."""
            return a

        assert list(_props(f)) == ["a"]
        assert f.input_schema["required"] == ["a"]


class TestDescriptions:
    def test_google_docstring(self) -> None:
        """The summary becomes the description; Args entries describe parameters."""

        @tool
        def f(path: str, depth: int = 1) -> None:
            """List a directory.

            Goes as deep as asked.

            Args:
                path: where to look,
                    relative to the root
                depth (int): how deep

            Returns:
                nothing
            """

        assert f.description == "List a directory.\n\nGoes as deep as asked."
        assert _props(f)["path"]["description"] == "where to look, relative to the root"
        assert _props(f)["depth"]["description"] == "how deep"

    def test_sphinx_docstring(self) -> None:
        """:param name: lines describe parameters too."""

        @tool
        def f(path: str) -> None:
            """Read it.

            :param path: the file
            """

        assert f.description == "Read it."
        assert _props(f)["path"]["description"] == "the file"

    def test_missing_description(self) -> None:
        """A tool without docstring or description= is refused."""
        with pytest.raises(ToolDefinitionError, match="no description; write a docstring"):

            @tool
            def f(a: int) -> None:
                pass

    def test_options(self) -> None:
        """name, description, category and timeout are taken as given."""

        @tool(name="other", description="Custom.", category="network", timeout=2.5)
        def f() -> None:
            """Ignored."""

        assert (f.name, f.description, f.category, f.timeout) == (
            "other",
            "Custom.",
            "network",
            2.5,
        )
        assert HarnessParams(model="scripted:m", tools=[f]).timeout_for(f) == 2.5


class TestDefinitionErrors:
    @pytest.mark.parametrize(
        ("annotation", "shown"),
        [
            (set, "set"),
            (bytes, "bytes"),
            (tuple[int, int], "tuple[int, int]"),
            (int | str, "int | str"),
        ],
    )
    def test_unsupported_annotation(self, annotation: Any, shown: str) -> None:
        """The error names the tool, the parameter and the annotation."""

        def f(value: int) -> None:
            """Doc."""

        f.__annotations__["value"] = annotation
        with pytest.raises(ToolDefinitionError) as info:
            tool(f)
        assert str(info.value).startswith(
            f"tool 'f': parameter 'value': unsupported annotation {shown}; use str, int"
        )

    def test_nested_unsupported_annotation(self) -> None:
        """A bad type inside a list names the path to it."""
        with pytest.raises(
            ToolDefinitionError, match=r"parameter 'xs'\[\]: unsupported annotation set"
        ):

            @tool
            def f(xs: list[set]) -> None:  # type: ignore[type-arg]
                """Doc."""

    def test_missing_annotation(self) -> None:
        """An unannotated parameter is refused with the fix."""
        with pytest.raises(ToolDefinitionError, match="parameter 'a' has no type annotation"):

            @tool
            def f(a) -> None:  # type: ignore[no-untyped-def]
                """Doc."""

    def test_varargs(self) -> None:
        """*args cannot be offered to a model."""
        with pytest.raises(ToolDefinitionError, match=r"is variadic \(\*a\); tools take named"):

            @tool
            def f(*a: int) -> None:
                """Doc."""

    def test_unresolvable_hint(self) -> None:
        """A hint naming a type that is not importable at run time is explained."""

        def f(a: int) -> None:
            """Doc."""

        f.__annotations__["a"] = "NotImportedHere"
        with pytest.raises(ToolDefinitionError) as info:
            tool(f)
        assert str(info.value).startswith("tool 'f': cannot resolve the type hints of ")
        assert str(info.value).endswith(
            "(NameError: name 'NotImportedHere' is not defined); import every annotated type "
            "at module level"
        )

    def test_bad_name(self) -> None:
        """Names follow the providers' rule."""
        with pytest.raises(ToolDefinitionError, match="letters, digits"):
            tool(name="has space")(lambda: None)

    def test_isolated_local_function(self) -> None:
        """isolated=True needs an importable module-level function."""
        with pytest.raises(ToolDefinitionError, match="define 'TestDefinitionErrors"):

            @tool(isolated=True)
            def f() -> None:
                """Doc."""


class TestRegistration:
    def test_toolset_rejects_a_second_name(self) -> None:
        """Registering a name twice fails at registration, naming the tool."""
        tools = Toolset()

        @tools.tool
        def echo(text: str) -> str:
            """Echo."""
            return text

        with pytest.raises(ToolDefinitionError, match="'echo' is already registered"):

            @tools.tool(name="echo")
            def other(text: str) -> str:
                """Echo again."""
                return text

        assert [t.name for t in tools] == ["echo"]
        assert HarnessParams(model="scripted:m", tools=tools).tool("echo") is echo

    def test_params_reject_duplicates(self) -> None:
        """HarnessParams refuses two tools of one name."""

        @tool
        def echo(text: str) -> str:
            """Echo."""
            return text

        with pytest.raises(ParamsError, match="duplicate tool name 'echo'"):
            HarnessParams(model="scripted:m", tools=[echo, echo])

    def test_spec_still_calls_the_function(self) -> None:
        """The decorated name stays callable as the plain function."""

        @tool
        async def double(n: int) -> int:
            """Double."""
            return 2 * n

        assert asyncio.run(double(4)) == 8
