"""Typed structured output: ``HarnessParams.output_type`` as a schema to send and a
validator for the final answer.

A model is asked for the answer in one of two ways (``HarnessParams.output_mode``;
``auto`` picks per model of the fallback chain):

Native structured output (``providers._normalize.build_request`` builds it from
:class:`OutputSpec`'s schema):

- Anthropic Messages: ``output_config.format`` (``{"type": "json_schema", "schema": ...}``);
- OpenAI Chat Completions: ``response_format`` (``json_schema``, strict when it can be);
- OpenAI Responses: ``text.format`` (``json_schema``, strict when it can be).

The final answer is then the text of the model's last turn, and a repair is a user message
(see the ``repair`` state).

The final-result tool (``final_result``), for the models without native structured output
(Claude older than Sonnet 4.5, Opus 4.1 and Haiku 4.5) or for any model with
``output_mode="tool"``: the request carries one more tool whose input schema is the output
schema (strict for OpenAI when it can be), and a system line asking the model to end by
calling it. ``tool_choice`` is not forced: forcing a tool call on every turn would make the
model answer before it used the run's own tools, so a model that ends in prose is repaired
instead (a user message asking for the call). The call's input is the answer. The ``check``
state answers every ``final_result`` call at once, so the history stays valid for every
provider whatever the run does next (fallback, resume, fork, an abort, a spent budget):
``accepted`` when the input is valid (the run ends in ``model_complete``), else an
``is_error`` result naming the problems, which ``repair`` counts against
``max_output_repairs`` like a native repair. A ``final_result`` called beside other tools
in one turn is not taken: the other tools run, and the final call is answered with an
error asking for it alone once their results are read (no repair is spent: the run's turn
limit bounds it). The tool's calls never reach the run's tool runner.

OpenAI is sent the strict form of the type's schema when it has one (every property
required, the optional ones nullable, no extra keys; see ``openai_strict_schema``),
Anthropic the schema in the form its structured output takes (:func:`anthropic_schema`:
no extra keys; the constraints it does not enforce moved into descriptions). The answer is
validated against the type itself, with the ``null`` of an optional field read as "not
given", as tool arguments are.

A pydantic model, a dataclass or a TypedDict is validated (strictly, as JSON) by a pydantic
``TypeAdapter``; a JSON schema dict by ``jsonschema`` (Draft 2020-12, checked at
construction as tool schemas are).

While the answer streams, :class:`PartialOutput` parses what has arrived (the ``stream``
state yields it as ``OutputDelta`` events; see the section at the end).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
from typing_extensions import TypeVar

from innerloop._errors import ParamsError, ToolDefinitionError
from innerloop._events import (
    OutputDelta,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._json import MAX_JSON_DEPTH, parse_json, unreadable_reason
from innerloop.providers._normalize import OUTPUT_TOOL
from innerloop.tools._strict import openai_strict_schema
from innerloop.tools._validate import (
    ToolSchema,
    as_meant,
    checked_schema,
    problems_from_pydantic,
    strict_json,
)

if TYPE_CHECKING:
    import pydantic

__all__ = [
    "ACCEPTED",
    "ALONE",
    "FIRST_STEP",
    "OUTPUT_TOOL",
    "STEP_FRACTION",
    "InvalidOutput",
    "OutputSpec",
    "OutputT",
    "PartialOutput",
    "anthropic_schema",
    "output_spec",
]

ACCEPTED = "accepted"
"""The result of a final-result call whose input is the valid answer."""
ALONE = (
    f"Not accepted: {OUTPUT_TOOL} was called together with other tools. Read their results, "
    f"then call {OUTPUT_TOOL} alone with the final answer."
)
"""The error result of a final-result call made beside other tool calls."""

OutputT = TypeVar("OutputT", default=Any)
"""The type of a run's final answer, for a type checker: ``Weather`` for
``HarnessParams(output_type=Weather)``, so ``state.output`` is ``Weather | None``. ``Any``
(the default, PEP 696) without an ``output_type`` or with a JSON schema dict, whose answer is
JSON data (a dict)."""

_NAME = re.compile(r"[^A-Za-z0-9_-]")
_FIELD = "output_type"


class InvalidOutput(Exception):
    """The final answer does not match ``output_type``; ``problems`` says how."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


def _object_root(schema: Mapping[str, Any], what: str) -> None:
    if schema.get("type") != "object":
        raise ParamsError(
            _FIELD,
            f"{what} is not a JSON object (its schema has type {schema.get('type')!r}); the "
            "providers' structured output takes objects only: wrap the value in a model, "
            "dataclass or TypedDict with one field",
        )


@final
@attrs.frozen(repr=False)
class OutputSpec:
    """``output_type`` compiled once: the schema each provider is sent and the validator
    of the final answer. Build it with :func:`output_spec`."""

    type: Any
    """The ``output_type`` as given."""
    name: str
    """The schema's name (OpenAI requires one): the type's name, or the schema's title."""
    schema: Mapping[str, Any]
    """The JSON schema of the answer (``$ref`` inlined where it can be)."""
    strict_schema: Mapping[str, Any] | None
    """OpenAI's strict form of ``schema`` (sent with ``strict: true``); None when it has
    none (``schema`` is sent, not strict)."""
    anthropic_schema: Mapping[str, Any]
    """``schema`` as Anthropic is sent it (see :func:`anthropic_schema`)."""
    adapter: pydantic.TypeAdapter[Any] | None
    """The validator of a type; None for a JSON schema dict."""
    checker: ToolSchema | None
    """The validator of a JSON schema dict; None for a type."""

    def __repr__(self) -> str:
        return f"OutputSpec({self.name!r}, strict={self.strict_schema is not None})"

    def parse(self, text: str, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, Any]:
        """The typed value of the answer ``text`` and its JSON data; raises
        :class:`InvalidOutput` naming every problem (not JSON, nested deeper than
        ``max_depth``, a missing field...)."""
        try:
            data = parse_json(text, max_depth)
        except ValueError as exc:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise InvalidOutput([f"the answer is not JSON ({exc}): {shown!r}"]) from None
        return self.parse_data(data)

    def parse_data(self, data: Any) -> tuple[Any, Any]:
        """As :meth:`parse`, for JSON data (the input of a final-result call)."""
        data = as_meant(self.schema, data)  # strict mode's null for "not given"
        if self.checker is not None:
            problems = self.checker.problems(data)
            if problems:
                raise InvalidOutput(problems)
            return data, data
        assert self.adapter is not None
        import pydantic  # loaded with the first output type, not with innerloop

        try:
            value = strict_json(self.adapter, data)
        except pydantic.ValidationError as exc:
            raise InvalidOutput(problems_from_pydantic(exc, self.schema)) from None
        except ValueError as exc:  # not JSON data
            raise InvalidOutput([f"the answer: {exc}"]) from None
        return value, self.adapter.dump_python(value, mode="json")

    def rebuild(self, data: Any) -> Any:
        """The typed value of JSON data that ``parse`` returned (from a checkpoint)."""
        if self.adapter is None:
            return data
        return strict_json(self.adapter, data)

    def repair_message(self, problems: Sequence[str]) -> str:
        """The user message that feeds the validation problems back to the model."""
        lines = "\n".join(f"- {p}" for p in problems)
        return (
            f"Your answer does not match the required output format ({self.name}):\n"
            f"{lines}\nAnswer again with only the corrected JSON object."
        )

    def tool_repair_message(self, problems: Sequence[str]) -> str:
        """The error result of a final-result call whose input is invalid."""
        lines = "\n".join(f"- {p}" for p in problems)
        return (
            f"Not accepted: the input does not match the required output format "
            f"({self.name}):\n{lines}\nCall {OUTPUT_TOOL} again with the corrected input."
        )

    def prose_repair_message(self) -> str:
        """The user message that asks a model in tool mode to call the final-result tool."""
        return (
            f"Give your final answer by calling the {OUTPUT_TOOL} tool with it as the input "
            f"({self.name}), not as text."
        )


def _name(raw: str) -> str:
    return _NAME.sub("_", raw)[:64] or "output"


def _from_schema(output_type: Mapping[str, Any]) -> OutputSpec:
    try:
        checker = checked_schema(output_type, _FIELD)
    except ToolDefinitionError as exc:
        reason = str(exc).removeprefix(f"{_FIELD}: ")
        raise ParamsError(_FIELD, reason.replace("input_schema", "the schema"), None) from None
    schema = dict(checker)
    _object_root(schema, "the schema")
    strict = openai_strict_schema(schema)
    title = schema.get("title")
    return OutputSpec(
        output_type,
        _name(title if isinstance(title, str) else "output"),
        schema,
        strict,
        anthropic_schema(schema),
        None,
        checker,
    )


def _from_type(output_type: Any) -> OutputSpec:
    shown = getattr(output_type, "__name__", repr(output_type))
    fix = (
        "give a pydantic model, a dataclass, a TypedDict or a JSON schema dict whose "
        "fields JSON can carry"
    )
    import pydantic  # loaded with the first output type, not with innerloop

    from innerloop.tools._schema import schema_for

    try:
        schema = schema_for(output_type, f"output type {shown}")
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
    except ToolDefinitionError as exc:
        raise ParamsError(_FIELD, f"{exc}", output_type) from None
    except (pydantic.PydanticUserError, TypeError) as exc:  # TypeAdapter's own refusals
        reason = str(exc).split("\n")[0]
        raise ParamsError(_FIELD, f"pydantic cannot validate {shown} ({reason}); {fix}") from None
    _object_root(schema, shown)
    strict = openai_strict_schema(schema)
    return OutputSpec(
        output_type,
        _name(shown),
        schema,
        strict,
        anthropic_schema(schema),
        adapter,
        None,
    )


def output_spec(output_type: Any) -> OutputSpec:
    """``output_type`` (a pydantic model, dataclass, TypedDict or JSON schema dict)
    compiled; a :class:`ParamsError` for ``output_type`` naming the problem and the fix."""
    if isinstance(output_type, OutputSpec):
        return output_type
    if isinstance(output_type, Mapping):
        return _from_schema(output_type)
    return _from_type(output_type)


# -- Anthropic's form ---------------------------------------------------------------------------

_A_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_A_SCALARS = (str, int, float, bool, type(None))


def anthropic_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` as Anthropic's structured output takes it: every object closed
    (``additionalProperties: false``), ``oneOf`` read as ``anyOf``, and what it does not
    enforce (numeric bounds, string lengths, ``minItems`` above 1, other string formats,
    defaults...) written into the node's description as ``{key: value, ...}``, so the model
    still reads it; the answer is validated against the full schema anyway.

    The rules are those the anthropic SDK's ``transform_schema`` applies (a test checks
    the two agree); it is not called here because the machine's layers import no SDK."""
    node = dict(schema)
    out: dict[str, Any] = {}
    defs = node.pop("$defs", None)
    if defs is not None:
        out["$defs"] = {name: anthropic_schema(sub) for name, sub in defs.items()}
    ref = node.pop("$ref", None)
    if ref is not None:
        out["$ref"] = ref
        return out
    kind = node.pop("type", None)
    variants = {k: node.pop(k, None) for k in ("anyOf", "oneOf", "allOf")}
    literal = _literals(node, out)
    if literal:
        kind = None
    _combine(variants, out)
    if not literal and not any(variants.values()) and kind is not None:
        out["type"] = kind
    for key in ("description", "title"):
        if key in node:
            out[key] = node.pop(key)
    _typed(kind, node, out)
    if node:  # what Anthropic does not take: kept as words for the model
        extra = "{" + ", ".join(f"{k}: {v}" for k, v in node.items()) + "}"
        described = out.get("description")
        out["description"] = extra if described is None else f"{described}\n\n{extra}"
    return out


def _literals(node: dict[str, Any], out: dict[str, Any]) -> bool:
    """Move ``enum`` (of scalars) and a scalar ``const`` to ``out``; whether there was one."""
    enum = node.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, _A_SCALARS) for v in enum):
        out["enum"] = list(node.pop("enum"))
    if "const" in node and isinstance(node["const"], _A_SCALARS):
        out["const"] = node.pop("const")
    return "enum" in out or "const" in out


def _combine(variants: dict[str, Any], out: dict[str, Any]) -> None:
    if isinstance(variants["anyOf"], list):
        out["anyOf"] = [anthropic_schema(v) for v in variants["anyOf"]]
    elif isinstance(variants["oneOf"], list):
        out["anyOf"] = [anthropic_schema(v) for v in variants["oneOf"]]
    elif isinstance(variants["allOf"], list):
        out["allOf"] = [anthropic_schema(v) for v in variants["allOf"]]


def _typed(kind: Any, node: dict[str, Any], out: dict[str, Any]) -> None:
    """The keywords of an object, string or array node that Anthropic takes."""
    if kind == "object":
        properties = node.pop("properties", {})
        out["properties"] = {name: anthropic_schema(sub) for name, sub in properties.items()}
        node.pop("additionalProperties", None)
        out["additionalProperties"] = False
        if "required" in node:
            out["required"] = list(node.pop("required"))
    elif kind == "string" and node.get("format") in _A_FORMATS:
        out["format"] = node.pop("format")
    elif kind == "array":
        if "items" in node:
            out["items"] = anthropic_schema(node.pop("items"))
        if node.get("minItems") in (0, 1):
            out["minItems"] = node.pop("minItems")


# -- the answer as it streams ------------------------------------------------------------------
# :class:`PartialOutput` follows one model turn and turns its answer's prefix into
# :class:`~innerloop.events.OutputDelta` events.
#
# The answer is the turn's text (native structured output) or the input of a
# ``final_result`` call (the final-result tool). Its prefix is parsed by pydantic's partial
# JSON mode (``pydantic_core.from_json(..., allow_partial="trailing-strings")``, jiter inside):
# what is complete so far, plus the string being written, cut where it stands; an unfinished
# literal or key is left out until it is whole, and a prefix ending in a digit is not parsed
# (the number may go on: jiter would read ``21`` of ``21.5``).
#
# Cost: parsing the whole prefix at every delta would be quadratic in the answer's length
# (a 3.4 kB answer streamed in 4-byte deltas: about 15 µs a delta). The prefix is parsed
# only once the bytes not parsed yet reach ``max(FIRST_STEP, parsed // STEP_FRACTION)``, so
# each received byte pays for at most about ``STEP_FRACTION`` bytes of parsing (linear in
# the answer), small answers are still parsed every ``FIRST_STEP`` bytes, and the end of the
# answer is always parsed (the complete call's input, or the text when the turn ends). A
# delta is yielded only when the parsed data differ from the last one yielded.
#
# The final value is not this: ``check`` validates the whole answer as before.

FIRST_STEP: Final = 16
"""Bytes of answer received before the first parse, and the least between two parses."""
STEP_FRACTION: Final = 16
"""A parse waits for at least ``1/STEP_FRACTION`` of what was parsed before to arrive."""


class PartialOutput:
    """Follows one model turn's answer; :meth:`feed` each stream event, then
    :meth:`finish` when the turn is complete. Each returns an :class:`OutputDelta` when
    the answer parsed so far changed, else None.

    ``text``: the turn's text is the answer (the model was asked natively).
    ``tool``: a ``final_result`` call is the answer (a model of the chain is asked through
    the tool); once one starts, the turn's text is no longer followed.
    """

    __slots__ = ("_call", "_index", "_last", "_next", "_parsed", "_parts", "_size", "_text")

    def __init__(self, *, text: bool, tool: bool) -> None:
        self._text = text
        self._call: str | None = "" if tool else None
        """The followed final-result call's id; "" before one starts; None: not asked."""
        self._index = 0
        self._parts: list[str] = []
        self._size = 0
        self._parsed = 0
        self._next = FIRST_STEP
        self._last: dict[str, Any] | None = None

    def feed(self, event: StreamEvent) -> OutputDelta | None:
        """The delta ``event`` brings, if the answer parsed so far changed."""
        if isinstance(event, TextDelta):
            if self._text and not self._call:
                return self._add(event.index, event.text)
        elif isinstance(event, ToolInputDelta):
            if self._call and event.id == self._call:
                return self._add(event.index, event.partial_json)
        elif isinstance(event, ToolUseStart):
            if self._call is not None and event.name == OUTPUT_TOOL:
                self._start(event.index, event.id)
        elif isinstance(event, ToolUseComplete):
            call = event.tool_use
            if self._call and call.id == self._call:
                self._parts, self._size, self._parsed = [], 0, 0
                if unreadable_reason(call.input) is None:  # a copy: the history keeps its own
                    return self._changed(copy.deepcopy(call.input))
        return None

    def finish(self) -> OutputDelta | None:
        """The last delta of the turn: its whole answer parsed, if anything is left."""
        return self._parse() if self._size > self._parsed else None

    def _start(self, index: int, call_id: str) -> None:
        """Follow the final-result call ``call_id`` from now on (the last one is taken)."""
        self._call, self._index = call_id, index
        self._parts, self._size, self._parsed = [], 0, 0
        self._next, self._last = FIRST_STEP, None

    def _add(self, index: int, chunk: str) -> OutputDelta | None:
        self._index = index
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size < self._next or chunk[-1:].isdigit():
            return None  # a number at the end may go on: parsed at the next delta
        self._next = self._size + max(FIRST_STEP, self._size // STEP_FRACTION)
        return self._parse()

    def _parse(self) -> OutputDelta | None:
        text = "".join(self._parts)
        self._parts, self._parsed = [text], self._size
        import pydantic_core  # loaded when first needed, not with innerloop

        try:
            data = pydantic_core.from_json(text, allow_partial="trailing-strings")
        except ValueError:  # not JSON (prose), or nested past jiter's own limit
            return None
        if not isinstance(data, dict):
            return None
        return self._changed(data)

    def _changed(self, data: dict[str, Any]) -> OutputDelta | None:
        if data == self._last:
            return None
        self._last = data
        return OutputDelta(self._index, data, self._call or None)
