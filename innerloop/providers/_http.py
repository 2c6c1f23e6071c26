"""What both HTTP providers share: a fast SSE splitter, the open stream over the SDK's raw
response, and the provider skeleton (``open``, ``complete``, ``aclose``).

The SDKs send the request (auth, headers, their error types); the bytes of the response
are read raw and parsed here, which costs a fraction of the SDKs' own event objects.
"""

from __future__ import annotations

import asyncio
import functools
import json
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs
import httpx2

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import Alert, MessageComplete, StreamEvent
from innerloop._json import (
    MAX_JSON_DEPTH,
    WRAPPED_JSON_DEPTH,
    JSONTooDeep,
    parse_json,
    unreadable_input,
    wrapped_depth,
)
from innerloop._loopend import close_at_loop_end
from innerloop._messages import ModelResponse
from innerloop._secrets import hide_userinfo, scrub_logs, scrub_secrets
from innerloop.providers._base import final_response
from innerloop.providers._errors import error_from_exception, error_from_status
from innerloop.providers._normalize import WireRequest
from innerloop.providers._transport import AsyncioTransport, RawResponse

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "Assembler",
    "HTTPModelStream",
    "HTTPProvider",
    "Posted",
    "SSESplitter",
    "Splitter",
    "WireRoute",
    "loads",
    "malformed",
    "missing_key",
    "parse_tool_input",
    "sdk_options",
    "stream_failure",
]


def loads(provider: str, data: bytes | str, max_depth: int = WRAPPED_JSON_DEPTH) -> Any:
    """Parse one SSE data payload; bad JSON (or JSON nested deeper than ``max_depth``) is
    a transient provider failure."""
    try:
        return parse_json(data.decode() if isinstance(data, bytes) else data, max_depth)
    except ValueError as exc:  # UnicodeDecodeError included
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise ProviderError(
            ErrorCategory.TRANSIENT,
            f"malformed JSON in the stream: {exc}",
            provider=provider,
            raw=text[:2000],
        ) from None


def parse_tool_input(
    provider: str, name: str, raw: str, max_depth: int = MAX_JSON_DEPTH, *, whole: bool = True
) -> dict[str, Any]:
    """A tool input: empty means ``{}``. One that is no JSON object (broken JSON, a list)
    or nested deeper than ``max_depth`` is the model's mistake, not the server's: it
    stands as :func:`~innerloop._json.unreadable_input` naming the problem (the call is
    answered with an ``is_error`` result, its tool never run). With ``whole=False`` (the
    input may still be arriving) a non-object raises ``ProviderError`` instead."""
    raw = raw.strip()
    if not raw:
        return {}
    try:
        value = parse_json(raw, max_depth)
    except JSONTooDeep as exc:  # the call stands, answered with an error result
        return unreadable_input(exc.msg)
    except ValueError as exc:
        value = exc
    if isinstance(value, dict):
        return value
    what = f"not valid JSON ({value})" if isinstance(value, ValueError) else "not a JSON object"
    if whole:
        return unreadable_input(f"{what}: {raw[:200]!r}")
    raise ProviderError(
        ErrorCategory.TRANSIENT, f"tool {name!r} input is {what}: {raw[:200]!r}", provider=provider
    )


DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The largest server-sent event (or non-streaming body) a provider reads by default."""


def malformed(provider: str, what: str, raw: bytes | str | None = None) -> ProviderError:
    """A malformed response: transient, so the machine retries it once."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return ProviderError(
        ErrorCategory.TRANSIENT,
        f"malformed response: {what}",
        provider=provider,
        raw=scrub_secrets(text[:2000]) if text else None,
    )


def too_large(provider: str, limit: int) -> ProviderError:
    return malformed(
        provider,
        f"an event is longer than max_event_bytes={limit:,} (an endless line, or a runaway "
        "server); if the API really sends events that large, give the provider a larger "
        "max_event_bytes=",
    )


class SSESplitter:
    """Splits a byte stream into the ``data`` payloads of its server-sent events.

    Event names, ids and comments are dropped: both APIs repeat what matters in the data.
    Each byte is looked at a bounded number of times however the stream is cut (an event
    spread over many reads is joined once, when it ends), and an event longer than
    ``max_event_bytes`` raises a malformed-response ``ProviderError`` instead of growing
    without bound.
    """

    __slots__ = ("_cr", "_max", "_parts", "_provider", "_size")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, provider: str = "") -> None:
        self._parts: list[bytes] = []  # the unfinished event, line ends already made LF
        self._size = 0
        self._cr = False  # the last piece ended with CR, whose LF may open the next one
        self._max = max_event_bytes
        self._provider = provider

    def feed(self, chunk: bytes) -> list[bytes]:
        end = len(chunk) - 2
        if (
            end >= 0
            and not self._parts
            and not self._cr
            and chunk.find(b"\n\n") == end
            and b"\r" not in chunk
        ):
            if end > self._max:
                raise too_large(self._provider, self._max)
            data = _frame_data(chunk[:end])  # the common case: one whole frame per read
            return [] if data is None else [data]
        chunk = self._lf_only(chunk)
        return self._split(chunk) if chunk else []

    def _lf_only(self, chunk: bytes) -> bytes:
        """``chunk`` with its line ends made LF; a CR at its end waits for the next piece
        (a CRLF may be split across two)."""
        if self._cr:
            chunk, self._cr = b"\r" + chunk, False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk, self._cr = chunk[:-1], True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return chunk

    def _split(self, chunk: bytes) -> list[bytes]:
        """The frames that end in ``chunk`` (LF line ends), the rest kept for later."""
        parts = self._parts
        if parts and chunk[0] == 10 and parts[-1].endswith(b"\n"):  # a blank line across pieces
            first, rest = b"".join(parts)[:-1], chunk[1:]
        else:
            pos = chunk.find(b"\n\n")
            if pos < 0:  # no event ends here: keep the piece, join once at the end
                parts.append(chunk)
                self._size += len(chunk)
                if self._size > self._max:
                    raise too_large(self._provider, self._max)
                return []
            first = b"".join(parts) + chunk[:pos] if parts else chunk[:pos]
            rest = chunk[pos + 2 :]
        frames = rest.split(b"\n\n")
        tail = frames.pop()
        self._parts = [tail] if tail else []
        self._size = len(tail)
        if (len(first) > self._max or len(rest) > self._max) and any(
            len(f) > self._max for f in (first, tail, *frames)
        ):
            raise too_large(self._provider, self._max)
        out = _frame_data(first)
        found = [] if out is None else [out]
        found += [d for d in map(_frame_data, frames) if d is not None]
        return found

    def finish(self) -> list[bytes]:
        """The last frame, when the body does not end with a blank line."""
        rest = b"".join(self._parts).strip()
        self._parts, self._size, self._cr = [], 0, False
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


class Splitter(Protocol):
    """Splits a response's bytes into the payloads of its events (``SSESplitter``, or
    ``EventStreamSplitter`` for Bedrock's framing)."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the events that end in ``chunk``."""

    def finish(self) -> list[bytes]:
        """The payloads left when the body ends."""


class Assembler(Protocol):
    """Turns one dialect's wire events into stream events and the final response."""

    max_depth: int
    """The deepest nesting read from the model (tool arguments); its envelopes may nest
    :func:`~innerloop._json.wrapped_depth` of it."""

    def feed(self, data: bytes, out: list[StreamEvent]) -> None:
        """Handle one SSE data payload; append the stream events it yields to ``out``."""

    def feed_json(self, body: Any, out: list[StreamEvent]) -> None:
        """Handle a whole non-streaming response body."""

    def finish(self, out: list[StreamEvent]) -> ModelResponse:
        """The assembled response (late events go to ``out``); raises ``ProviderError``
        when the stream was cut short."""


_SHAPE_ERRORS = (LookupError, TypeError, AttributeError, ValueError)
"""What an assembler raises on valid JSON of the wrong shape (a list for an object, a
delta without ``index``, a string for a number)."""


async def _nothing() -> None:
    return None


def stream_failure(provider: str, exc: Exception, data: bytes = b"") -> ProviderError:
    """What a failure reading a response body is: a malformed response (``data`` the
    payload being read) or the transport's error (a ``ProviderError`` stays itself)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, _SHAPE_ERRORS):
        what = f"an event of the wrong shape ({type(exc).__name__}: {exc})"
        return malformed(provider, what, data)
    if isinstance(exc, httpx2.DecodingError):
        what = f"its content-encoding cannot be undone (DecodingError: {exc})"
        return malformed(provider, what)
    return error_from_exception(provider, exc, "mid-stream")


class HTTPModelStream:
    """An open response: iterating parses its bytes into stream events."""

    def __init__(
        self,
        provider: str,
        chunks: AsyncIterable[bytes],
        content_type: str,
        close: Callable[[], Awaitable[object]],
        assembler: Assembler,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        deadline: float | None = None,
        splitter: Callable[[int, str], Splitter] = SSESplitter,
        first: bytes = b"",
    ) -> None:
        self._provider = provider
        self._first = first
        """The body's first bytes, already read off ``chunks`` (by a look at the start)."""
        self.notices: tuple[Alert, ...] = ()
        """What the provider did differently to get this answer (the call phase passes
        them on as alerts)."""
        self.after_failure: Callable[[], Awaitable[object]] = _nothing
        """Run when reading the response fails, before the error is raised (the provider
        drops its idle pooled connections then)."""
        self._splitter = splitter
        self._deadline = deadline
        """Event-loop time by which the whole response must have arrived."""
        self._chunks = chunks
        self._content_type = content_type
        self._close = close
        self._assembler = assembler
        self._depth = wrapped_depth(assembler.max_depth)
        self._max = max_event_bytes
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        assembler, out = self._assembler, list[StreamEvent]()
        data: bytes = b""  # the payload being handled, for the malformed-response error
        try:
            if "json" in self._content_type:
                data = await self._body()
                body = loads(self._provider, data, self._depth) if data.strip() else None
                assembler.feed_json(body, out)
            else:
                splitter = self._start(out)
                feed, deadline = assembler.feed, self._deadline
                now = asyncio.get_running_loop().time
                async for chunk in self._chunks:
                    if deadline is not None and now() > deadline:
                        raise self._past_deadline()
                    for data in splitter.feed(chunk):
                        feed(data, out)
                    for event in out:
                        yield event
                    out.clear()
                for data in splitter.finish():
                    feed(data, out)
            response = assembler.finish(out)
        except Exception as exc:
            error = stream_failure(self._provider, exc, data)
            await self.after_failure()  # the retry goes out on a fresh connection
            if error is exc:
                raise
            raise error from exc
        for event in out:
            yield event
        yield MessageComplete(response)

    def _start(self, out: list[StreamEvent]) -> Splitter:
        """The splitter of the events, the first bytes (when read already) fed."""
        splitter = self._splitter(self._max, self._provider)
        for data in splitter.feed(self._first) if self._first else ():
            self._assembler.feed(data, out)
        return splitter

    def _past_deadline(self) -> ProviderError:
        return ProviderError(
            ErrorCategory.TRANSIENT,
            "timeout: the call took longer than its deadline "
            "(HarnessParams.call_deadline); the response kept arriving too slowly",
            provider=self._provider,
        )

    async def _body(self) -> bytes:
        """A whole non-streaming body, up to the event limit."""
        parts, size = [self._first], len(self._first)
        deadline, now = self._deadline, asyncio.get_running_loop().time
        async for chunk in self._chunks:
            if deadline is not None and now() > deadline:
                raise self._past_deadline()
            parts.append(chunk)
            size += len(chunk)
            if size > self._max:
                raise too_large(self._provider, self._max)
        return b"".join(parts)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self._close()


_CLOUD_ROUTES = {
    "AsyncAnthropicVertex": "Vertex AI's per-model :streamRawPredict path",
    "AsyncAnthropicBedrock": "Bedrock's per-request SigV4 signing and per-model path",
    "AsyncAzureOpenAI": "Azure's per-deployment path and api-version query",
}
"""Clients whose requests the SDK rewrites per call: they keep the SDK's route."""


@attrs.frozen
class WireRoute:
    """Requests written by innerloop itself onto an ``AsyncioTransport``, skipping the SDK's
    per-request builder: the SDK client still supplies the base URL, the headers (API
    version and credentials included) and the timeout, read once at construction."""

    transport: AsyncioTransport
    url: httpx2.URL = attrs.field(repr=lambda url: repr(hide_userinfo(str(url))))
    headers: tuple[tuple[bytes, bytes], ...] = attrs.field(repr=False)  # credentials
    timeout: httpx2.Timeout

    @classmethod
    def of(cls, client: Any, transport: AsyncioTransport, path: str) -> WireRoute:
        """The route for ``path`` under ``client``'s base URL. Credentials must be static
        (an API key or token); a client that signs or refreshes each request keeps the
        SDK's own route: pass no transport then."""
        for base_cls in type(client).__mro__:
            why = _CLOUD_ROUTES.get(base_cls.__name__)
            if why is not None:
                raise ValueError(
                    f"{type(client).__name__} builds each request itself ({why}), so innerloop "
                    "cannot write its requests on an AsyncioTransport; drop the transport "
                    "argument to keep the SDK's own route"
                )
        every = {**client.default_headers, **client.auth_headers}
        headers = {k: v for k, v in every.items() if isinstance(v, str)}  # not the SDK's Omit
        static = any(k.lower() in ("x-api-key", "authorization") for k in headers)
        dynamic = client.custom_auth is not None or getattr(client, "workload_identity", None)
        if not static or dynamic:
            raise ValueError(
                f"{type(client).__name__} has no static API key or token, so innerloop "
                "cannot write its requests on an AsyncioTransport; give the provider an "
                "api_key, or drop the transport argument to keep the SDK's own route"
            )
        base: httpx2.URL = client.base_url
        url = base.copy_with(raw_path=base.raw_path.rstrip(b"/") + b"/" + path.encode("ascii"))
        timeout = client.timeout
        if not isinstance(timeout, httpx2.Timeout):
            timeout = httpx2.Timeout(timeout)
        wire = [(b"Host", url.netloc)]
        wire += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        return cls(transport, url, tuple(wire), timeout)

    async def send(self, provider: str, payload: dict[str, Any]) -> RawResponse:
        """POST ``payload``; a status of 400 and above raises its ``ProviderError``."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = [*self.headers, (b"Content-Length", b"%d" % len(body))]
        try:
            raw = await self.transport.send("POST", self.url, headers, body, self.timeout)
            if raw.status < 400:
                return raw
            text = (await raw.aread()).decode("utf-8", "replace")
        except Exception as exc:
            raise error_from_exception(provider, exc, url=str(self.url)) from exc
        fields = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw.headers}
        raise error_from_status(provider, raw.status, fields, text)


def missing_key(provider: type, variable: str, note: str = "") -> ValueError:
    """The error both providers raise at construction when no API key can be found."""
    return ValueError(
        f"{provider.__name__} has no API key: pass api_key=..., or set {variable} in the "
        f"environment{note}"
    )


def sdk_options(
    api_key: str | None,
    base_url: str | None,
    timeout: float,
    headers: dict[str, str] | None,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Keyword arguments for either SDK's async client. ``max_retries=0``: retries belong
    to the machine (backoff, fallback), never to the SDK. A ``transport`` (such as
    ``AsyncioTransport``) replaces the SDK's connection pool."""
    options: dict[str, Any] = {
        "api_key": api_key,
        "base_url": base_url,
        "max_retries": 0,
        "timeout": timeout,
        "default_headers": headers,
    }
    if transport is not None:
        options["http_client"] = httpx2.AsyncClient(transport=transport, follow_redirects=True)
    return options


class Posted:
    """A response whose status is known: its body's chunks (``first`` already read off
    them, when a provider looked), its content type, how to close it, and what the
    provider did differently to get it (``notice``)."""

    __slots__ = ("chunks", "close", "content_type", "first", "notice")

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        content_type: str,
        close: Callable[[], Awaitable[object]],
    ) -> None:
        self.chunks = chunks
        self.content_type = content_type
        self.close = close
        self.first = b""
        self.notice: Alert | None = None

    async def empty(self) -> bool:
        """Whether the body ends before its first byte (read into ``first`` otherwise)."""
        async for chunk in self.chunks:
            if chunk:
                self.first = chunk
                return False
        return True


def _sdk_transports(client: Any) -> list[Any]:
    """The ``httpx2`` transports of an SDK client (its own pool, and mounted proxies).
    Neither SDK exposes its pool, so this reads their private attributes; tests/providers/
    test_sync_clients.py fails when they move."""
    http = getattr(client, "_client", None)  # the SDK's httpx2.AsyncClient
    if not isinstance(http, httpx2.AsyncClient):
        return []
    mounts: dict[Any, Any] = getattr(http, "_mounts", {})
    return [getattr(http, "_transport", None), *mounts.values()]


async def _drop_pool(client: Any) -> None:
    """Close the connections pooled in ``client``'s ``httpx2`` transports, leaving the
    client open (see :meth:`HTTPProvider._drop_connections`)."""
    for transport in _sdk_transports(client):
        if isinstance(transport, httpx2.AsyncHTTPTransport):
            await transport.aclose()  # closes the pool's connections, not the pool


class HTTPProvider:
    """The skeleton of an SDK-backed provider; subclasses say how to send and parse."""

    name: str
    dialect: str
    client: Any
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    route: WireRoute | None = None
    splitter: Callable[[int, str], Splitter] = SSESplitter  # how the response is framed
    _rebuild: Callable[[], Any] | None = None  # a fresh SDK client, when the provider built it
    _owns_pool = False  # the provider built the client and its connection pool: it closes them
    _loop: asyncio.AbstractEventLoop | None = None  # the loop the client's pool belongs to
    _loop_end: asyncio.Task[None] | None = None
    _unscrub: Callable[[], object] = staticmethod(lambda: None)  # releases the log scrubber

    def _connect(
        self,
        make: Callable[..., Any],
        client: Any,
        transport: httpx2.AsyncBaseTransport | None,
        path: str,
        max_event_bytes: int,
        **settings: Any,
    ) -> None:
        """Take ``client``, or build one with ``make(**sdk_options(**settings))`` (and keep
        the recipe, to build a fresh one for a new event loop); with an
        ``AsyncioTransport``, requests to ``path`` go on the wire route."""
        if isinstance(max_event_bytes, bool) or not isinstance(max_event_bytes, int):
            raise TypeError(f"max_event_bytes must be an int, got {max_event_bytes!r}")
        if max_event_bytes < 1:
            raise ValueError(
                f"max_event_bytes must be at least 1, got {max_event_bytes}; the default is "
                f"{DEFAULT_MAX_EVENT_BYTES:,} (16 MiB)"
            )
        self.max_event_bytes = max_event_bytes
        if client is None:
            self._rebuild = functools.partial(make, **sdk_options(transport=transport, **settings))
            self._owns_pool = transport is None
            client = self._rebuild()
        self.client = client
        if isinstance(transport, AsyncioTransport):
            self.route = WireRoute.of(client, transport, path)
        # the SDKs' and httpx's DEBUG logs hold URLs with userinfo and may echo headers:
        # scrubbed while this provider lives (until aclose, or until it is collected)
        names = ("api_key", "auth_token", "aws_secret_key", "aws_session_token")
        secrets = (getattr(client, name, None) for name in names)
        handle = scrub_logs(s for s in secrets if isinstance(s, str))
        self._unscrub = weakref.finalize(self, handle.release)

    def _send(self, payload: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    def _assembler(self, request: WireRequest) -> Assembler:
        raise NotImplementedError

    async def open(self, request: WireRequest) -> HTTPModelStream:
        """Send ``request``; returns once the response status is known."""
        return self._stream(request, await self._post(request.payload))

    def _stream(
        self, request: WireRequest, posted: Posted, notices: tuple[Alert, ...] = ()
    ) -> HTTPModelStream:
        """The model stream that reads ``posted``, the response to ``request``."""
        limit = request.time_limit
        deadline = None if limit is None else asyncio.get_running_loop().time() + limit
        stream = HTTPModelStream(
            self.name,
            posted.chunks,
            posted.content_type,
            posted.close,
            self._assembler(request),
            self.max_event_bytes,
            deadline,
            self.splitter,
            posted.first,
        )
        stream.notices = notices if posted.notice is None else (*notices, posted.notice)
        stream.after_failure = self.drop_idle_connections
        return stream

    async def _post(self, payload: dict[str, Any]) -> Posted:
        """POST ``payload``; the response once its status is known (a failed one raises
        its ``ProviderError``, the idle pooled connections dropped first: the retry goes
        out on a fresh one)."""
        if self.route is not None:
            try:
                raw = await self.route.send(self.name, payload)
            except ProviderError:
                await self.drop_idle_connections()
                raise
            return Posted(raw.decoded(), raw.header("content-type") or "", raw.aclose)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            await self._adopt(loop)
        manager = self._send(payload)
        try:
            response = await manager.__aenter__()
        except Exception as exc:
            await self.drop_idle_connections()
            raise error_from_exception(self.name, exc) from exc
        http = response.http_response

        async def close() -> None:
            await manager.__aexit__(None, None, None)

        return Posted(http.aiter_bytes(), http.headers.get("content-type", ""), close)

    async def complete(self, request: WireRequest) -> ModelResponse:
        """One call, the assembled response (no machine, no retries)."""
        response = await final_response(await self.open(request))
        if response is not None:
            return response
        raise ProviderError(  # pragma: no cover - HTTPModelStream always ends with one
            ErrorCategory.TRANSIENT, "the stream ended without a final message", provider=self.name
        )

    async def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Move to ``loop``. The SDK client's pool belongs to the old loop (each
        ``asyncio.run`` is a loop of its own): its connections cannot carry this loop's
        requests, so a client the provider built is built afresh, and any other client's
        pooled connections are dropped (the old loop may still be open: a ``with
        harness:`` block's, between its runs). When ``loop`` ends, by that loop, a client
        whose pool the provider built is closed, and any other client's connections are
        dropped again while the client stays open for its owner (a user's client or
        transport is the user's to close)."""
        if self._loop is not None:
            if self._rebuild is not None:
                self.client = self._rebuild()
            elif not self._owns_pool:
                await self._drop_connections()
        self._loop = loop
        close = self.client.close if self._owns_pool else functools.partial(_drop_pool, self.client)
        self._loop_end = close_at_loop_end(self, close)  # holds the client, not the provider

    async def drop_idle_connections(self) -> None:
        """Close the connections idle in the pool (the SDK client's, or the
        ``AsyncioTransport``'s), leaving those that carry a response: after a failed
        call the server may have dropped them (a dropped stream, a server that closes the
        connection after an error while its head said keep-alive), and a retry sent on
        one is wasted. The next request opens a fresh connection. Reads the SDK's and
        httpx2's private attributes, as :meth:`_drop_connections` does."""
        if self.route is not None:
            self.route.transport._close_idle()
            return
        for transport in _sdk_transports(self.client):
            pool = getattr(transport, "_pool", None)
            for connection in getattr(pool, "connections", ()):
                if connection.is_idle():  # closed at once: no request can take it now
                    await connection.aclose()

    async def _drop_connections(self) -> None:
        """Close the connections pooled in the SDK client's ``httpx2`` transports (its own
        pool, and mounted proxies) and leave the client open: the pool opens new ones on
        the client's next event loop. Other transports are left alone (an
        ``AsyncioTransport`` drops its own connections at the loop's end)."""
        await _drop_pool(self.client)

    async def aclose(self) -> None:
        watcher, self._loop_end = self._loop_end, None
        if watcher is not None and watcher.get_loop() is asyncio.get_running_loop():
            watcher.cancel()
        try:
            await self.client.close()
        finally:
            self._unscrub()

    def __repr__(self) -> str:
        base_url = hide_userinfo(str(self.client.base_url))
        return f"{type(self).__name__}(name={self.name!r}, base_url={base_url!r})"
