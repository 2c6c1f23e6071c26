"""The provider protocol the machine talks to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from innerloop._events import MessageComplete, StreamEvent
from innerloop._messages import ModelResponse
from innerloop.providers._normalize import WireRequest

__all__ = ["ModelStream", "Provider", "close_iterator", "final_response"]


@runtime_checkable
class ModelStream(Protocol):
    """An open streaming response. Iterating yields stream events and ends with one
    ``MessageComplete``; a failure mid-stream raises ``ProviderError``."""

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Provider(Protocol):
    """A model provider.

    ``open`` sends the request and returns once the response has started (HTTP status
    known); it raises ``ProviderError`` for a failed call. ``dialect`` names the wire format
    ``normalize`` must produce for it (``anthropic`` or ``openai``).
    """

    name: str
    dialect: str

    async def open(self, request: WireRequest) -> ModelStream: ...

    async def aclose(self) -> None: ...


async def final_response(stream: ModelStream) -> ModelResponse | None:
    """Drain ``stream`` and close it; its assembled response, or None when it ended
    without one. Failures mid-stream raise ``ProviderError`` as usual."""
    events = aiter(stream)
    try:
        async for event in events:
            if isinstance(event, MessageComplete):
                return event.response
    finally:
        await close_iterator(events)
        await stream.aclose()
    return None


async def close_iterator(events: AsyncIterator[StreamEvent]) -> None:
    """Close the iterator of a stream left before its end (an async generator, as most
    streams' ``__aiter__`` is, stays suspended after its last event). Left open, it is
    closed when collected, by a task the event loop makes for it: each model turn paid
    for a task and a wake-up of the loop."""
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
