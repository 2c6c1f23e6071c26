"""A run's params as JSON data, and back: what the event log's ``run_started`` keeps so a
replay (``innerloop.testing.replay``) can run the run again.

Code does not cross JSON, and a file is data: a tool is kept as its definition (name,
description, schema, category, timeout) and the import path of its function, ``output_type``
as its import path and JSON schema; the import paths are there for a person to read.
Reading back imports and evaluates nothing: the tools refuse to run (a replay serves their
recorded results) and the output type is the recorded JSON Schema dict. The real tools and
the output class come only from the reader's own code (``replay(params=...)``).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from innerloop._convert import structure, unstructure
from innerloop.fsm._live import LIVE, import_path_of, live_record
from innerloop.fsm._params import HarnessParams
from innerloop.recovery._pricing import DEFAULT_PRICES
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = [
    "ParamsRecord",
    "RecordError",
    "import_path_of",
    "params_from_record",
    "params_record",
    "recorded_only",
]

_CODE = ("tools", "output_type", "prices", *LIVE)
"""Fields written by hand: code (tools, the output type) and the prices (left out when
they are the default table)."""


class RecordError(ValueError):
    """Recorded params cannot be read back into :class:`HarnessParams`."""


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(HarnessParams)


def params_record(params: HarnessParams[Any]) -> dict[str, Any]:
    """``params`` as JSON data (see the module's docstring)."""
    hints = _hints()
    data: dict[str, Any] = {
        f.name: unstructure(getattr(params, f.name), hints[f.name])
        for f in attrs.fields(HarnessParams)
        if f.init and f.name not in _CODE
    }
    data["tools"] = [
        {
            **t.to_definition(),
            "category": t.category,
            "timeout": t.timeout,
            "isolated": t.isolated,
            "function": import_path_of(t.function or t.handler),
        }
        for t in params.tools
    ]
    data.update(live_record(params))
    if params.prices is not DEFAULT_PRICES:
        data["prices"] = unstructure(params.prices, hints["prices"])
    spec = params.output_spec
    if spec is not None:
        data["output_type"] = {
            "import_path": import_path_of(params.output_type),
            "schema": dict(spec.schema),
        }
    return data


class ParamsRecord(Mapping[str, Any]):
    """:func:`params_record` of ``params``, made when first read: a run's ``run_started``
    event carries it, and only a log writing the event pays for it."""

    __slots__ = ("_data", "_params")

    def __init__(self, params: HarnessParams[Any]) -> None:
        self._params = params
        self._data: dict[str, Any] | None = None

    def _made(self) -> dict[str, Any]:
        if self._data is None:
            self._data = params_record(self._params)
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._made()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())

    def __repr__(self) -> str:
        return f"ParamsRecord({self._params!r})"


@attrs.frozen
class _RecordedOnly:
    """The handler of a tool read back from a log: the log keeps no code, so it refuses
    to run (a replay serves the tool's recorded results instead)."""

    name: str

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raise RuntimeError(
            f"tool {self.name!r} was read back from a log, which keeps no code; a replay "
            "serves its recorded results (to run it, pass params= holding the real tool)"
        )


def recorded_only(spec: ToolSpec) -> bool:
    """The tool was read back from a log (:func:`params_from_record`) and has no function."""
    return isinstance(spec.handler, _RecordedOnly)


def _tool(data: Mapping[str, Any]) -> ToolSpec:
    name = data["name"]
    return ToolSpec(
        name,
        data.get("description", ""),
        data.get("input_schema", {"type": "object"}),
        _RecordedOnly(name),
        data.get("category", "code"),
        data.get("timeout"),
        bool(data.get("isolated", False)),
    )


def _output_type(data: Any) -> Any:
    """The recorded output type as the JSON Schema dict it recorded: the only form read
    back. A type is never rebuilt from text (pydantic evaluates a string type as a
    forward reference), nor imported from the recorded path."""
    if data is None:
        return None
    schema = data.get("schema") if isinstance(data, Mapping) else None
    if not isinstance(schema, Mapping):
        got = type(data if not isinstance(data, Mapping) else schema).__name__
        raise RecordError(
            f"output_type.schema is a {got}, not a JSON Schema object; a recorded type is read "
            "back only as a JSON Schema dict (pass params= with the output_type to use your "
            "own class)"
        )
    return dict(schema)


def params_from_record(data: Mapping[str, Any]) -> HarnessParams[Any]:
    """The params ``data`` (a :func:`params_record`) describes, as data: nothing it names is
    imported, called or evaluated. Its tools refuse to run (:func:`recorded_only`: a replay
    serves their recorded results); its ``output_type`` is the recorded JSON Schema dict (the
    answer is then checked as a dict). Whoever needs the real tools or the output class
    passes them (``replay(params=...)``). :class:`RecordError` when it cannot be read."""
    try:
        tools = [_tool(t) for t in data.get("tools", ())]
        hints, fields = _hints(), attrs.fields_dict(HarnessParams)
        kwargs = {
            k: structure(v, hints[k])
            for k, v in data.items()
            if k not in ("tools", "output_type", *LIVE) and k in fields and fields[k].init
        }
        output = _output_type(data.get("output_type"))
        params: HarnessParams[Any] = HarnessParams(**kwargs, tools=tools, output_type=output)
        return params
    except RecordError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RecordError(f"the recorded params cannot be read back: {exc}") from None
