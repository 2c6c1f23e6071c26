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

from innerloop._convert import structure, unstructure
from innerloop._errors import ConversionError, ProviderError
from innerloop._messages import ModelResponse
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
    raises an :class:`~innerloop.InnerloopError` naming its type)."""
    data: dict[str, Any] = unstructure(state)
    return data


def state_from_dict(data: Mapping[str, Any]) -> HarnessState:
    """The inverse of :func:`state_to_dict`."""
    return structure(data, HarnessState)
