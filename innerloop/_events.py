"""Structured events.

Stream events come from a provider while a model turn streams; run events come from the
driver. A run yields both, in order, as one async stream. Each event has a ``type`` string
(the names used in logs and docs) and ``to_dict()`` for the JSONL event log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeAlias

import attrs

from innerloop import _convert
from innerloop._errors import ProviderError
from innerloop._messages import Message, ModelResponse, ServerToolBlock, ToolUseBlock, Usage
from innerloop._tasks import Task

__all__ = [
    "Abort",
    "Alert",
    "Backoff",
    "ChildEvent",
    "Compacted",
    "Event",
    "Fallback",
    "Finished",
    "MessageComplete",
    "ModelCall",
    "ModelError",
    "ModelResponseEvent",
    "OutputDelta",
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


@attrs.frozen
class OutputDelta(StreamEvent):
    """The typed answer (``HarnessParams.output_type``) as parsed so far, while the model
    writes it: yielded by the ``stream`` state after the delta that changed it, never by
    a provider. Not validated: the final value is ``state.output``, checked when the turn
    is complete."""

    type: ClassVar[Literal["output_delta"]] = "output_delta"
    index: int
    """The content block being parsed: the text, or the ``final_result`` call."""
    data: dict[str, Any]
    """The answer's JSON data so far: complete values, and the string being written cut
    where it stands (an unfinished number, literal or key is left out until whole)."""
    tool_use_id: str | None = None
    """The ``final_result`` call that carries the answer; None for a native answer."""


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
    params: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    """The run's params as JSON data (tools by their definitions and import paths, the
    output type by its import path and schema), what a replay rebuilds them from. Made
    only when read (writing the log), so a run nobody logs does not pay for it."""
    messages: tuple[Message, ...] = attrs.field(default=(), eq=False, repr=False)
    """The history the run starts from (the prompt, or a conversation's messages). A live
    run's event makes the tuple when it is first read (writing a log, a live view), so a
    conversation's message does not copy the whole conversation for nobody."""
    turns: int = 0
    """The turns counted before the run (a conversation's earlier messages)."""
    usage: Usage = Usage()
    """The tokens counted before the run."""
    cost_usd: float | None = 0.0
    """The cost counted before the run (None: unknown, a model had no price)."""
    tasks: tuple[Task, ...] = attrs.field(default=(), eq=False, repr=False)
    """The pending task list the run starts with."""
    resumed: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    """A run going on mid-way (resumed after a suspension, or after its reader left):
    the rest of the state it goes on with, as JSON data (the answered ``interrupt``, the
    counters, ``notes``), its history and tasks being ``messages`` and ``tasks``. None
    for a run from the machine's first state."""
    _later: Callable[[], tuple[Message, ...]] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )
    """What makes ``messages`` when first read (see :meth:`_messages_later`)."""

    def _messages_later(self, make: Callable[[], tuple[Message, ...]]) -> Self:
        """This event, its ``messages`` made by ``make()`` when first read."""
        object.__setattr__(self, "_later", make)
        object.__delattr__(self, "messages")
        return self

    if not TYPE_CHECKING:  # (a type checker would take any attribute name then)

        def __getattr__(self, name: str) -> Any:
            """Only ever called for ``messages`` after :meth:`_messages_later`."""
            later = self._later if name == "messages" else None
            if later is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            messages = later()
            object.__setattr__(self, "messages", messages)
            object.__setattr__(self, "_later", None)
            return messages


@attrs.frozen
class Transition(Event):
    type: ClassVar[Literal["transition"]] = "transition"
    source: str
    target: str
    guard: str | None


@attrs.frozen
class ModelCall(Event):
    """A model call about to be sent: its normalized request's fingerprint (not yielded by
    a quiet ``run()``, which no log records)."""

    type: ClassVar[Literal["model_call"]] = "model_call"
    provider: str
    dialect: str
    """The wire format the request was built for (``anthropic``, ``openai``...)."""
    model: str
    fingerprint: str
    """``request_fingerprint(request)``: sha256 of the wire request (dialect and body)."""
    parts: Mapping[str, str]
    """A short hash per top-level key of the body, so a changed request names what changed."""
    messages: int
    """How many messages the request carries."""
    tools: tuple[str, ...] | None = None
    """The names of the tools offered on this call, when the run chooses them each turn
    (``params.tool_sources`` or ``prepare_tools``); None when it offers ``params.tools``."""


@attrs.frozen
class ModelError(Event):
    """A model call failed: when it was opened (``stage="open"``) or mid-stream."""

    type: ClassVar[Literal["model_error"]] = "model_error"
    error: ProviderError
    stage: Literal["open", "stream"]


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
    history: str | None = None
    """``history_fingerprint`` of the final history (None from a quiet ``run()``)."""
    interrupt: Mapping[str, Any] | None = None
    """A run that ended ``suspended``: what it waits on, as JSON data (``kind``,
    ``payload``, ``state``, ``tool_use_ids``, ``done``); None otherwise."""


@attrs.frozen
class ChildEvent(Event):
    """An event of a child run (a sub-agent, an agent tool, a fan-out branch, a handoff),
    streamed through its parent's ``events()``. ``path`` names the child from the
    parent down, ``/`` between levels and ``#n`` for the n-th branch of a fan-out
    (``research/web#2``); ``event`` is the child's own event, as its run yielded it (a
    grandchild's events are flattened: one ``ChildEvent`` with the whole path)."""

    type: ClassVar[Literal["child_event"]] = "child_event"
    path: str
    event: Event


RunEvent: TypeAlias = (
    TextDelta
    | ThinkingDelta
    | ToolUseStart
    | ToolInputDelta
    | ToolUseComplete
    | ServerToolEvent
    | MessageComplete
    | OutputDelta
    | RunStarted
    | Transition
    | ModelCall
    | ModelError
    | ModelResponseEvent
    | ToolExecuted
    | Backoff
    | Fallback
    | Compacted
    | Alert
    | Abort
    | Finished
    | ChildEvent
)
"""Every event a run of the machines innerloop ships yields (``Run.events()``): the stream
events of each model turn, then the driver's run events. ``match event:`` with a class
pattern per case narrows it, as does ``event.type == "text_delta"`` (each ``type`` is a
literal). An event class a custom state defines is not in it (see ``innerloop.events``)."""
