"""@tool: schemas from type hints, descriptions from docstrings, definition-time errors."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import enum
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import attrs
import pydantic
import pytest
from pydantic import Field
from typing_extensions import TypedDict

import innerloop.tools
from innerloop import HarnessParams, ParamsError, ToolDefinitionError
from innerloop.lowlevel import schema_for
from innerloop.tools import ToolCallResult, ToolContext, Toolset, ToolSpec, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Point:
    x: int
    y: float = 0.0


class Opaque:
    """Not something JSON can carry."""


@attrs.frozen
class Node:
    children: list[Node]


@attrs.frozen
class Span:
    """A range of lines.

    Attributes:
        start: first line, from 1
    """

    start: int = attrs.field(validator=attrs.validators.gt(0))
    end: int | None = None


class Filter(pydantic.BaseModel):
    pattern: str = Field(min_length=1)
    limit: int = 10


@dataclasses.dataclass
class Window:
    width: int
    tags: list[str] = dataclasses.field(default_factory=list)


class Options(TypedDict):
    mode: Literal["a", "b"]


@tool(isolated=True)
def describe_span(span: Span, color: Color, times: int = 1) -> str:
    """Describe a span in a child process."""
    return f"{span!r} {color!r} x{times}"


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
                "b": {"type": "boolean", "default": False},
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
        assert props["color"] == {"enum": ["red", "blue"], "type": "string", "title": "Color"}
        assert props["at"] == {
            "type": "object",
            "title": "Point",
            "properties": {"x": {"type": "integer"}, "y": {"type": "number"}},
            "required": ["x"],
            "additionalProperties": False,
        }
        assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
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
        ("annotation", "shown", "reason"),
        [
            (Opaque, "Opaque", "Unable to generate pydantic-core schema for <class "),
            (list[Opaque], "list[tests.tools.test_tool_define.Opaque]", "Unable to generate"),
            (Callable[[int], int], "collections.abc.Callable[[int], int]", "Cannot generate a"),
        ],
    )
    def test_unsupported_annotation(self, annotation: Any, shown: str, reason: str) -> None:
        """A type JSON cannot carry: the error names the tool, the parameter and the
        annotation, pydantic's reason and what to use instead."""

        def f(value: int) -> None:
            """Doc."""

        f.__annotations__["value"] = annotation
        with pytest.raises(ToolDefinitionError) as info:
            tool(f)
        assert str(info.value).startswith(
            f"tool 'f': parameter 'value': unsupported annotation {shown} ({reason}"
        )
        assert str(info.value).endswith(
            "; use types that JSON can carry: str, int, float, bool, list[X], dict[str, X], "
            "Literal[...], X | None, an Enum, a dataclass, a TypedDict, a pydantic model or an "
            "attrs class"
        )

    def test_recursive_attrs_class(self) -> None:
        """An attrs class that contains itself is refused with the way out."""
        with pytest.raises(ToolDefinitionError, match=r"attrs class Node refers to itself; use a"):

            @tool
            def f(tree: Node) -> None:
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


class TestPydanticArguments:
    @staticmethod
    def _rich() -> ToolSpec:
        @tool
        def rich(
            span: Span,
            where: Filter,
            window: Window,
            options: Options,
            count: Annotated[int, Field(ge=0, le=5)] = 1,
        ) -> str:
            """Everything at once.

            Args:
                count: how many
            """
            return repr((span, where, window, options, count))

        return rich

    def test_schema(self) -> None:
        """Constraints, models, dataclasses, TypedDicts and attrs classes (with attribute
        docs) have pydantic's schemas, inlined; the docstring describes the parameter."""
        props = _props(self._rich())
        assert props["count"] == {
            "type": "integer",
            "minimum": 0,
            "maximum": 5,
            "description": "how many",
            "default": 1,
        }
        assert props["span"] == {
            "type": "object",
            "title": "Span",
            "description": "A range of lines.",
            "properties": {
                "start": {"type": "integer", "description": "first line, from 1"},
                "end": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            },
            "required": ["start"],
            "additionalProperties": False,
        }
        assert props["where"] == {
            "type": "object",
            "title": "Filter",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "default": 10},
            },
            "required": ["pattern"],
        }
        assert props["window"]["required"] == ["width"]
        assert props["options"]["properties"] == {"mode": {"enum": ["a", "b"], "type": "string"}}

    def test_calls_receive_python_values(self, call_tool: Any) -> None:
        """A valid call reaches the function as the annotated types, defaults filled in."""
        result: ToolCallResult = call_tool(
            self._rich(),
            "rich",
            {
                "span": {"start": 2},
                "where": {"pattern": "x"},
                "window": {"width": 3},
                "options": {"mode": "a"},
            },
        )
        assert result.output == (
            "(Span(start=2, end=None), Filter(pattern='x', limit=10), "
            "Window(width=3, tags=[]), {'mode': 'a'}, 1)"
        )

    def test_every_problem_is_fed_back(self, call_tool: Any) -> None:
        """Constraint, attrs-validator, model and TypedDict problems each name the field."""
        result: ToolCallResult = call_tool(
            self._rich(),
            "rich",
            {
                "span": {"start": 0},
                "where": {"pattern": ""},
                "window": {"width": "3"},
                "options": {"mode": "c"},
                "count": 6,
            },
        )
        assert result.error == "invalid_arguments"
        assert result.output == (
            "invalid arguments for tool 'rich', the tool was not run: "
            "field 'span': Span: 'start' must be > 0: 0; "
            "field 'where.pattern': string should have at least 1 character, got string ''; "
            "field 'window.width': expected integer, got string '3'; "
            "field 'options.mode': 'c' is not one of 'a', 'b'; "
            "field 'count': input should be less than or equal to 5, got integer 6"
        )

    def test_isolated_tool_gets_python_values(self, call_tool: Any) -> None:
        """The child process converts the JSON arguments the same way."""
        result: ToolCallResult = call_tool(
            describe_span, "describe_span", {"span": {"start": 3}, "color": "red"}
        )
        assert result.output == "Span(start=3, end=None) <Color.RED: 'red'> x1", result

    def test_annotation_description_wins_over_docstring(self) -> None:
        """Field(description=...) on the annotation beats the docstring entry."""

        @tool
        def f(n: Annotated[int, Field(description="from the type")]) -> None:
            """Doc.

            Args:
                n: from the docstring
            """

        assert _props(f)["n"] == {"type": "integer", "description": "from the type"}

    def test_numpy_docstring(self) -> None:
        """NumPy-style Parameters sections describe parameters too."""

        @tool
        def f(path: str) -> None:
            """Read it.

            Parameters
            ----------
            path : str
                the file to read
            """

        assert f.description == "Read it."
        assert _props(f)["path"]["description"] == "the file to read"


class TestModuleGraph:
    def test_no_import_cycle_in_tools(self) -> None:
        """No two innerloop.tools modules import each other, not even lazily in a function."""
        package = Path(innerloop.tools.__file__).parent
        graph: dict[str, set[str]] = {}
        for path in package.glob("*.py"):
            name = f"innerloop.tools.{path.stem}"
            graph[name] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    graph[name].add(node.module)
                elif isinstance(node, ast.Import):
                    graph[name].update(alias.name for alias in node.names)
        graph.pop("innerloop.tools.__init__")

        def reaches(start: str, goal: str, seen: set[str]) -> bool:
            for nxt in graph.get(start, ()):
                if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                    return True
            return False

        cycles = sorted(name for name in graph if reaches(name, name, {name}))
        assert cycles == []


class TestReturnValues:
    def test_dataclasses_and_models_render_as_json(self, call_tool: Any) -> None:
        """A dataclass or pydantic model returned by a tool reaches the model as JSON."""

        @tool
        def both() -> list[Any]:
            """Doc."""
            return [Window(2), Filter(pattern="p"), Span(1), Color.BLUE]

        assert call_tool(both, "both", {}).output == (
            '[{"width": 2, "tags": []}, {"pattern": "p", "limit": 10}, '
            '{"start": 1, "end": null}, "blue"]'
        )
