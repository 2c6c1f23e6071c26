"""Structured events.

Stream events come from a provider while a model turn streams; run events come from the
driver. A run yields both, in order, as one async stream. Each event has a ``type`` string
(the names used in logs and docs) and ``to_dict()`` for the JSONL event log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, TypeAlias

import attrs

from innerloop import _convert
from innerloop._messages import ModelResponse, ServerToolBlock, ToolUseBlock, Usage

__all__ = [
    "Abort",
    "Alert",
    "Backoff",
    "Compacted",
    "Event",
    "Fallback",
    "Finished",
    "MessageComplete",
    "ModelResponseEvent",
    "RunEvent",
    "RunStarted",
    "ServerToolEvent",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolExecuted",
    "ToolInputDelta",
    "ToolUseComplete",
    "ToolUseStart",
    "Transition",
    "event_to_dict",
]


@_convert.tagged_base
class Event:
    """Base of all events."""

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """``{"type": ..., **fields}``: one line of the event log (``docs/event-log.md``)."""
        return event_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The event ``data`` (a ``to_dict()``, or a line of an event log) describes.

        On ``Event`` it picks the class by ``type`` among every imported event class; on
        a subclass, ``type`` must match it. Keys that are not fields (``seq``, ``t``) are
        ignored."""
        return _convert.structure(data, cls)


def event_to_dict(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = _convert.unstructure(event)
    return data


# -- stream events (emitted by providers) -------------------------------------------------


class StreamEvent(Event):
    """An event of one streaming model turn."""


@attrs.frozen
class TextDelta(StreamEvent):
    type: ClassVar[Literal["text_delta"]] = "text_delta"
    index: int
    text: str


@attrs.frozen
class ThinkingDelta(StreamEvent):
    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"
    index: int
    thinking: str


@attrs.frozen
class ToolUseStart(StreamEvent):
    type: ClassVar[Literal["tool_use_start"]] = "tool_use_start"
    index: int
    id: str
    name: str


@attrs.frozen
class ToolInputDelta(StreamEvent):
    type: ClassVar[Literal["tool_input_delta"]] = "tool_input_delta"
    index: int
    id: str
    partial_json: str


@attrs.frozen
class ToolUseComplete(StreamEvent):
    """A tool call whose input is complete and parsed; eager dispatch may start it."""

    type: ClassVar[Literal["tool_use_complete"]] = "tool_use_complete"
    index: int
    tool_use: ToolUseBlock


@attrs.frozen
class ServerToolEvent(StreamEvent):
    """A call or a result of a tool the provider runs itself (web search, code execution,
    ...), complete as the model streamed it; it is kept in the message (as ``block``) and
    sent back to the same provider, never run by the harness."""

    type: ClassVar[Literal["server_tool"]] = "server_tool"
    index: int
    block: ServerToolBlock


@attrs.frozen
class MessageComplete(StreamEvent):
    """The last event of a turn: the assembled response with usage and stop reason."""

    type: ClassVar[Literal["message_complete"]] = "message_complete"
    response: ModelResponse


# -- run events (emitted by the driver) -----------------------------------------------------


@attrs.frozen
class RunStarted(Event):
    """The first event of a run (a resumed one too): the machine it runs on, so a log
    can be drawn on it later (``innerloop diagram --trace``, ``innerloop ui``)."""

    type: ClassVar[Literal["run_started"]] = "run_started"
    machine: str
    """The machine's name."""
    fingerprint: str
    """Its :attr:`~innerloop.fsm.MachineSpec.fingerprint`."""
    import_path: str | None
    """Where its spec can be imported from (``module:attr``), when it says."""
    state: str
    """The state the run starts (or goes on) from."""
    run_id: str | None = None
    """The run's id in a checkpoint store, when one keeps it."""


@attrs.frozen
class Transition(Event):
    type: ClassVar[Literal["transition"]] = "transition"
    source: str
    target: str
    guard: str | None


@attrs.frozen
class ModelResponseEvent(Event):
    type: ClassVar[Literal["model_response"]] = "model_response"
    response: ModelResponse
    turn: int


@attrs.frozen
class ToolExecuted(Event):
    type: ClassVar[Literal["tool_executed"]] = "tool_executed"
    tool_use_id: str
    name: str
    is_error: bool
    timed_out: bool
    duration: float
    output: str


@attrs.frozen
class Backoff(Event):
    type: ClassVar[Literal["backoff"]] = "backoff"
    attempt: int
    delay: float
    retry_after: float | None
    total_wait: float


@attrs.frozen
class Fallback(Event):
    type: ClassVar[Literal["fallback"]] = "fallback"
    from_provider: str
    from_model: str
    to_provider: str
    to_model: str
    reason: str


@attrs.frozen
class Compacted(Event):
    type: ClassVar[Literal["compacted"]] = "compacted"
    reason: str
    tokens_before: int
    tokens_after: int
    removed_messages: int


@attrs.frozen
class Alert(Event):
    """Something the host should page on (for example a token-counting bug)."""

    type: ClassVar[Literal["alert"]] = "alert"
    kind: str
    message: str


@attrs.frozen
class Abort(Event):
    type: ClassVar[Literal["abort"]] = "abort"
    reason: str
    diagnostic: dict[str, Any] | None = None


@attrs.frozen
class Finished(Event):
    type: ClassVar[Literal["finished"]] = "finished"
    exit_reason: str
    final_state: str
    turns: int
    usage: Usage
    cost_usd: float | None


RunEvent: TypeAlias = (
    TextDelta
    | ThinkingDelta
    | ToolUseStart
    | ToolInputDelta
    | ToolUseComplete
    | ServerToolEvent
    | MessageComplete
    | RunStarted
    | Transition
    | ModelResponseEvent
    | ToolExecuted
    | Backoff
    | Fallback
    | Compacted
    | Alert
    | Abort
    | Finished
)
"""Every event a run of the machines innerloop ships yields (``Run.events()``): the stream
events of each model turn, then the driver's run events. ``match event:`` with a class
pattern per case narrows it, as does ``event.type == "text_delta"`` (each ``type`` is a
literal). An event class a custom state defines is not in it (see ``innerloop.events``)."""
