"""What both HTTP providers share: a fast SSE splitter, the open stream over the SDK's raw
response, and the provider skeleton (``open``, ``complete``, ``aclose``).

The SDKs send the request (auth, headers, their error types); the bytes of the response
are read raw and parsed here, which costs a fraction of the SDKs' own event objects.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import MessageComplete, StreamEvent
from innerloop._messages import ModelResponse
from innerloop.providers._base import final_response
from innerloop.providers._errors import error_from_exception
from innerloop.providers._normalize import WireRequest

__all__ = [
    "Assembler",
    "HTTPModelStream",
    "HTTPProvider",
    "SSESplitter",
    "loads",
    "parse_tool_input",
    "sdk_options",
]


def loads(provider: str, data: bytes | str) -> Any:
    """Parse one SSE data payload; bad JSON is a transient provider failure."""
    try:
        return json.loads(data)
    except ValueError as exc:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise ProviderError(
            ErrorCategory.TRANSIENT,
            f"malformed JSON in the stream: {exc}",
            provider=provider,
            raw=text[:2000],
        ) from None


def parse_tool_input(provider: str, name: str, raw: str) -> dict[str, Any]:
    """A complete tool input: empty means ``{}``; anything but a JSON object is malformed."""
    raw = raw.strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        value = exc
    if not isinstance(value, dict):
        raise ProviderError(
            ErrorCategory.TRANSIENT,
            f"tool {name!r} input is not a JSON object: {raw[:200]!r}",
            provider=provider,
        )
    return value


class SSESplitter:
    """Splits a byte stream into the ``data`` payloads of its server-sent events.

    Event names, ids and comments are dropped: both APIs repeat what matters in the data.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # a CRLF split across two chunks
                self._buffer = buffer
                return []
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        frames = buffer.split(b"\n\n")
        self._buffer = frames.pop()
        return [d for d in map(_frame_data, frames) if d is not None]

    def finish(self) -> list[bytes]:
        """The last frame, when the body does not end with a blank line."""
        rest, self._buffer = self._buffer.strip(), b""
        if not rest:
            return []
        data = _frame_data(rest)
        return [data] if data is not None else []


def _frame_data(frame: bytes) -> bytes | None:
    if frame.startswith(b"data:") and b"\n" not in frame:
        return frame[5:]
    if frame.startswith(b"event:"):  # Anthropic's "event: x\ndata: {...}"
        rest = frame[frame.find(b"\n") + 1 :]
        if rest.startswith(b"data:") and b"\n" not in rest:
            return rest[5:]
    data = [line[5:] for line in frame.split(b"\n") if line.startswith(b"data:")]
    if not data:
        return None
    return data[0] if len(data) == 1 else b"\n".join(d.removeprefix(b" ") for d in data)


class Assembler(Protocol):
    """Turns one dialect's wire events into stream events and the final response."""

    def feed(self, data: bytes, out: list[StreamEvent]) -> None:
        """Handle one SSE data payload; append the stream events it yields to ``out``."""

    def feed_json(self, body: Any, out: list[StreamEvent]) -> None:
        """Handle a whole non-streaming response body."""

    def finish(self, out: list[StreamEvent]) -> ModelResponse:
        """The assembled response (late events go to ``out``); raises ``ProviderError``
        when the stream was cut short."""


class HTTPModelStream:
    """An open response: iterating parses its bytes into stream events."""

    def __init__(
        self,
        provider: str,
        manager: AbstractAsyncContextManager[Any],
        response: Any,
        assembler: Assembler,
    ) -> None:
        self._provider = provider
        self._manager = manager
        self._http = response.http_response
        self._assembler = assembler
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        assembler, out = self._assembler, list[StreamEvent]()
        try:
            content_type = self._http.headers.get("content-type", "")
            if "json" in content_type:
                body = await self._http.aread()
                assembler.feed_json(loads(self._provider, body) if body.strip() else None, out)
            else:
                splitter = SSESplitter()
                feed = assembler.feed
                async for chunk in self._http.aiter_bytes():
                    for data in splitter.feed(chunk):
                        feed(data, out)
                    if out:
                        for event in out:
                            yield event
                        out.clear()
                for data in splitter.finish():
                    feed(data, out)
            response = assembler.finish(out)
        except ProviderError:
            raise
        except Exception as exc:
            raise error_from_exception(self._provider, exc, "mid-stream") from exc
        for event in out:
            yield event
        yield MessageComplete(response)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self._manager.__aexit__(None, None, None)


def sdk_options(
    api_key: str | None, base_url: str | None, timeout: float, headers: dict[str, str] | None
) -> dict[str, Any]:
    """Keyword arguments for either SDK's async client. ``max_retries=0``: retries belong
    to the machine (backoff, fallback), never to the SDK."""
    return {
        "api_key": api_key,
        "base_url": base_url,
        "max_retries": 0,
        "timeout": timeout,
        "default_headers": headers,
    }


class HTTPProvider:
    """The skeleton of an SDK-backed provider; subclasses say how to send and parse."""

    name: str
    dialect: str
    client: Any

    def _send(self, payload: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    def _assembler(self, request: WireRequest) -> Assembler:
        raise NotImplementedError

    async def open(self, request: WireRequest) -> HTTPModelStream:
        """Send ``request``; returns once the response status is known."""
        manager = self._send(request.payload)
        try:
            response = await manager.__aenter__()
        except Exception as exc:
            raise error_from_exception(self.name, exc) from exc
        return HTTPModelStream(self.name, manager, response, self._assembler(request))

    async def complete(self, request: WireRequest) -> ModelResponse:
        """One call, the assembled response (no machine, no retries)."""
        response = await final_response(await self.open(request))
        if response is not None:
            return response
        raise ProviderError(  # pragma: no cover - HTTPModelStream always ends with one
            ErrorCategory.TRANSIENT, "the stream ended without a final message", provider=self.name
        )

    async def aclose(self) -> None:
        await self.client.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={str(self.client.base_url)!r})"
