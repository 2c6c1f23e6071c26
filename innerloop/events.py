"""The events a run yields, for hosts that read them.

``Run.events()`` (and ``Run.iter_sync()``, ``Harness.run_sync(on_event=...)``) yields
:data:`RunEvent`, the union of every concrete event class below, so a ``match`` narrows
each case under a type checker::

    from innerloop.events import Finished, TextDelta, ToolUseStart

    async for event in run.events():
        match event:
            case TextDelta(text=text):
                print(text, end="")
            case ToolUseStart(name=name):
                print(f"\\n[{name}]")
            case Finished(exit_reason=reason, turns=turns):
                print(f"\\n{reason} after {turns} turns")

Stream events (subclasses of :class:`StreamEvent`) come from the provider while a model
turn streams; run events (:class:`RunStarted` first, then :class:`Transition`,
:class:`ToolExecuted`, ...) from the driver.
Each has a literal ``type`` (``"text_delta"``, ``"transition"``: the names of the event log,
``docs/event-log.md``), so ``if event.type == "text_delta":`` narrows too.

A custom state may yield event classes of its own (subclasses of :class:`Event`); they are
not in :data:`RunEvent`: match those on ``event: Event = ...`` instead.
"""

from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    ChildEvent,
    Compacted,
    Event,
    Fallback,
    Finished,
    MessageComplete,
    ModelCall,
    ModelError,
    ModelResponseEvent,
    OutputDelta,
    RunEvent,
    RunStarted,
    ServerToolEvent,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolExecuted,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
    Transition,
)

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
]
