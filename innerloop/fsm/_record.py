"""A run's params as JSON data, and back: what the event log's ``run_started`` keeps so a
replay (``innerloop.testing.replay``) can run the run again.

Code does not cross JSON: a tool is kept as its definition (name, description, schema,
category, timeout) and the import path of its function; ``output_type`` as its import
path and JSON schema. Reading back gives tools that refuse to run unless their function
is imported again (``real_tools``), and the output type imported again (else its schema).
"""

from __future__ import annotations

import functools
import importlib
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from innerloop._convert import structure, unstructure
from innerloop.fsm._live import LIVE, import_path_of, live_record
from innerloop.fsm._params import HarnessParams
from innerloop.recovery._pricing import DEFAULT_PRICES
from innerloop.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["ParamsRecord", "RecordError", "import_path_of", "params_from_record", "params_record"]

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


def _not_recorded(name: str) -> Callable[..., Any]:
    async def refuse(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raise RuntimeError(
            f"tool {name!r} was rebuilt from a log without its function; a replay serves "
            "its recorded results (or pass real_tools=True where its function can be imported)"
        )

    return refuse


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _tool(data: Mapping[str, Any], real: bool) -> ToolSpec:
    name = data["name"]
    handler: Any = _not_recorded(name)
    path = data.get("function")
    if real:
        if not path:
            raise RecordError(
                f"tool {name!r} has no importable function recorded (a local function); "
                "pass params= with the real tools to run it"
            )
        try:
            found = _import(path)
        except (ImportError, AttributeError) as exc:
            raise RecordError(
                f"tool {name!r}: cannot import its function {path} ({exc}); pass params= "
                "with the real tools to run it"
            ) from None
        if isinstance(found, ToolSpec):
            return found
        handler = found
    return ToolSpec(
        name,
        data.get("description", ""),
        data.get("input_schema", {"type": "object"}),
        handler,
        data.get("category", "code"),
        data.get("timeout"),
        bool(data.get("isolated", False)),
    )


def _output_type(data: Mapping[str, Any] | None) -> Any:
    if data is None:
        return None
    path = data.get("import_path")
    if path:
        try:
            return _import(path)
        except (ImportError, AttributeError):
            pass  # its schema stands in: the answer is then checked as a dict
    return data["schema"]


def params_from_record(data: Mapping[str, Any], *, real_tools: bool = False) -> HarnessParams[Any]:
    """The params ``data`` (a :func:`params_record`) describes; :class:`RecordError` when
    it cannot be read (a tool's function is not importable for ``real_tools``...)."""
    try:
        tools = [_tool(t, real_tools) for t in data.get("tools", ())]
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
    except (ValueError, TypeError, KeyError) as exc:
        raise RecordError(f"the recorded params cannot be read back: {exc}") from None
