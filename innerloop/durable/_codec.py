"""JSON-safe forms of what crosses a durable engine's boundary.

A durable engine stores step results and workflow inputs as JSON. These pure functions turn
a :class:`HarnessState`, a :class:`ModelResponse`, a :class:`ProviderError` and a
:class:`ToolCallResult` into plain dicts and back, losslessly for everything the machine
reads. The open stream and the normalized request of the current turn are not carried: a
run is only ever moved between processes at a phase boundary where neither is live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._messages import ModelResponse, Usage, message_from_dict
from innerloop.fsm._state import AbortRequest, HarnessState, OutcomeEnum, Task
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
    return {**error.to_dict(), "raw": error.raw}


def error_from_dict(data: Mapping[str, Any]) -> ProviderError:
    return ProviderError(
        ErrorCategory(data["category"]),
        data["message"],
        provider=data.get("provider", ""),
        status=data.get("status"),
        retry_after=data.get("retry_after"),
        raw=data.get("raw"),
    )


def response_from_dict(data: Mapping[str, Any]) -> ModelResponse:
    return ModelResponse(
        message_from_dict(data["message"]),
        data["stop_reason"],
        Usage(**data.get("usage", {})),
        data.get("model", ""),
        data.get("provider", ""),
        tuple(data.get("incomplete_tool_uses", ())),
    )


def tool_result_to_dict(result: ToolCallResult) -> dict[str, Any]:
    """The result's fields; ``value`` is dropped unless it is plain JSON data."""
    data = attrs.asdict(result)
    if not _is_json(data["value"]):
        data["value"] = None
    return data


def tool_result_from_dict(data: Mapping[str, Any]) -> ToolCallResult:
    return ToolCallResult(**data)


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


_PLAIN = (
    "turns",
    "active",
    "degraded",
    "outcome",
    "exit_reason",
    "final_state",
    "rate_limit_failures",
    "transient_failures",
    "backoff_attempts",
    "total_wait",
    "cost_usd",
    "context_tokens",
    "compaction_reason",
    "diagnostic",
)


def state_to_dict(state: HarnessState) -> dict[str, Any]:
    """``state`` as JSON data. ``notes`` entries that are not JSON data are dropped."""
    data: dict[str, Any] = {name: getattr(state, name) for name in _PLAIN}
    data["history"] = [m.to_dict() for m in state.history]
    data["tasks"] = [attrs.asdict(t) for t in state.tasks]
    data["usage"] = state.usage.to_dict()
    data["errors"] = dict(state.errors)
    data["tool_failures"] = dict(state.tool_failures)
    data["resolved_models"] = list(state.resolved_models)
    data["error"] = error_to_dict(state.error) if state.error is not None else None
    data["last_response"] = (
        state.last_response.to_dict() if state.last_response is not None else None
    )
    data["abort"] = attrs.asdict(state.abort) if state.abort is not None else None
    data["notes"] = {k: v for k, v in state.notes.items() if _is_json(v)}
    return data


def state_from_dict(data: Mapping[str, Any]) -> HarnessState:
    """The inverse of :func:`state_to_dict`."""
    state = HarnessState(
        history=[message_from_dict(m) for m in data.get("history", ())],
        tasks=[Task(**t) for t in data.get("tasks", ())],
        usage=Usage(**data.get("usage", {})),
        errors=dict(data.get("errors", {})),
        tool_failures=dict(data.get("tool_failures", {})),
        resolved_models=list(data.get("resolved_models", ())),
        notes=dict(data.get("notes", {})),
    )
    for name in _PLAIN:
        if name in data:
            setattr(state, name, data[name])
    if data.get("error") is not None:
        state.error = error_from_dict(data["error"])
    if data.get("last_response") is not None:
        state.last_response = response_from_dict(data["last_response"])
    if data.get("abort") is not None:
        state.abort = AbortRequest(**data["abort"])
    state.outcome = OutcomeEnum.lookup(data.get("outcome", "started"))
    return state
