"""JSON forms of what crosses a durable engine's boundary.

A durable engine stores workflow inputs and step results as JSON. These functions are thin
names over the package's one converter (``innerloop._convert``): a :class:`HarnessState`,
a :class:`ModelResponse`, a :class:`ProviderError` and a :class:`ToolCallResult` become
JSON data and come back equal, every field included.

A tool's ``value`` (the Python object its function returned) crosses as its JSON form when
it has one, and as ``None`` when it has none: the model saw the tool's text output, the
machine never reads ``value``, and a tool is free to return any object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from innerloop._convert import make_converter, structure, unstructure
from innerloop._errors import ConversionError, ProviderError
from innerloop._messages import ModelResponse
from innerloop.fsm import _state as _state_module
from innerloop.fsm._state import HarnessState
from innerloop.tools._spec import ToolCallResult

__all__ = [
    "error_from_dict",
    "error_to_dict",
    "response_from_dict",
    "state_from_dict",
    "state_to_dict",
    "tool_result_from_dict",
    "tool_result_to_dict",
]


def error_to_dict(error: ProviderError) -> dict[str, Any]:
    """All fields of ``error``, the raw body included."""
    data: dict[str, Any] = unstructure(error)
    return data


def error_from_dict(data: Mapping[str, Any]) -> ProviderError:
    return structure(data, ProviderError)


def response_from_dict(data: Mapping[str, Any]) -> ModelResponse:
    return structure(data, ModelResponse)


def tool_result_to_dict(result: ToolCallResult) -> dict[str, Any]:
    """The result's fields; ``value`` is ``None`` when it has no JSON form."""
    try:
        data: dict[str, Any] = unstructure(result)
    except ConversionError:
        data = unstructure(attrs.evolve(result, value=None))
    return data


def tool_result_from_dict(data: Mapping[str, Any]) -> ToolCallResult:
    return structure(data, ToolCallResult)


def state_to_dict(state: HarnessState) -> dict[str, Any]:
    """``state`` as JSON data, every field included (a ``notes`` value with no JSON form
    raises :class:`~innerloop._errors.ConversionError` naming its type)."""
    data: dict[str, Any] = unstructure(state, converter=_STATE)
    return data


def state_from_dict(data: Mapping[str, Any]) -> HarnessState:
    """The inverse of :func:`state_to_dict`."""
    return structure(data, HarnessState, converter=_STATE)


# TODO(lead): delete from here to the end of the module once HarnessState is pure data (its
# abort a plain pending request or None; `request` and `stream` moved out of it), and use
# `unstructure(state)` / `structure(data, HarnessState)` above: nothing else is special.
# Until then the live AbortFlag crosses as its reason (or None), and the turn's wire request
# and open stream, which are never live at a phase boundary, are not written. Each part
# applies only while the state still has it, so the reshape alone does not break this.
_STATE = make_converter()
_AbortFlag: Any = getattr(_state_module, "AbortFlag", None)
_LIVE = {
    name: override(omit=True)
    for name in ("request", "stream")
    if name in attrs.fields_dict(HarnessState)
}


def _abort_from_json(reason: str | None, _: Any) -> Any:
    flag = _AbortFlag()
    if reason is not None:
        flag.request(reason)
    return flag


if _AbortFlag is not None and not attrs.has(_AbortFlag):
    _STATE.register_unstructure_hook(_AbortFlag, lambda f: f.reason if f.requested else None)
    _STATE.register_structure_hook(_AbortFlag, _abort_from_json)
if _LIVE:
    _STATE.register_unstructure_hook(
        HarnessState,
        make_dict_unstructure_fn(HarnessState, _STATE, **_LIVE),  # type: ignore[arg-type]
    )
    _STATE.register_structure_hook(
        HarnessState,
        make_dict_structure_fn(HarnessState, _STATE, **_LIVE),  # type: ignore[arg-type]
    )
