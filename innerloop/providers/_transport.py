"""``AsyncioTransport``: a lean HTTP/1.1 transport for the SDKs' httpx client.

The SDKs keep doing what they do (auth, headers, request building, their error types);
only the bytes on the wire go through this transport instead of the default connection
pool. It exists for hosts that run many loops in one process: the default pool scans every
pooled connection on each request and each response close, and reads each streamed chunk
through several layers, which costs milliseconds per model turn once a thousand streams are
open. Here a connection is an asyncio protocol, the idle ones of an origin sit in a deque,
and a streamed chunk costs one wake-up and one parse.

Scope: HTTP/1.1 over TCP or TLS, keep-alive, ``content-length``, chunked and read-to-close
bodies; connect, read, write and pool timeouts from the request; ``max_connections``.
Not handled: HTTP/2, proxies (give the client a proxy mount of its own), ``Expect``.
A request is never re-sent: a connection lost before the response raises, and the
machine's recovery decides.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import re
import socket
import ssl
import weakref
import zlib
from collections.abc import AsyncIterator
from typing import cast

import attrs
import httpx2

from innerloop._loopend import close_at_loop_end

__all__ = [
    "AsyncioTransport",
    "RawResponse",
    "ResponseHead",
    "parse_head",
]

_MAX_HEAD = 64 * 1024  # bytes of status line and headers
_HIGH_WATER = 256 * 1024  # buffered body bytes before reading pauses
_NO_BODY = frozenset({204, 304})
_SIZE, _DATA, _CRLF, _TRAILERS = "size", "data", "crlf", "trailers"  # chunked states
_SWEEP_BATCH = 32  # idle connections closed per event-loop turn
_Origin = tuple[str, str, int]


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: buffers what arrives and wakes the one reader."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost: BaseException | None = None
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        self._timeout: float | None = None
        self._wait_started = 0.0

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.lost = exc or ConnectionResetError("connection closed")
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # -- the reader's side -----------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def usable(self) -> bool:
        """Open, with nothing unread: fit to carry another request."""
        return not self.eof and not self.buffer and self.transport is not None

    def take(self, n: int | None = None) -> bytes:
        """Up to ``n`` buffered bytes (all of them when ``n`` is None)."""
        buffer = self.buffer
        if n is None or n >= len(buffer):
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:n])
            del buffer[:n]
        if self._paused and len(buffer) < _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def more(self, timeout: float | None, request: httpx2.Request | None) -> None:
        """Wait until more bytes arrive or the peer closes; ``ReadTimeout`` after
        ``timeout`` seconds of silence. One timer serves many waits: it is re-armed only
        when it fires early or a shorter timeout asks for it."""
        if self.eof:
            raise httpx2.RemoteProtocolError(
                "the server closed the connection in the middle of a response", request=request
            )
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        if timeout is not None:
            self._wait_started = now = loop.time()
            self._timeout = timeout
            timer = self._timer
            if timer is None or self._timer_due > now + timeout:
                if timer is not None:
                    timer.cancel()
                self._timer_due = now + timeout
                self._timer = loop.call_at(self._timer_due, self._check_timeout)
        else:
            self._timeout = None
        try:
            await waiter
        except TimeoutError:
            raise httpx2.ReadTimeout(
                f"no data from the server for {timeout:g} s", request=request
            ) from None
        finally:
            self._waiter = None

    def _check_timeout(self) -> None:
        self._timer = None
        waiter, timeout = self._waiter, self._timeout
        if waiter is None or waiter.done() or timeout is None:
            return  # not waiting now: the next wait arms a timer again
        due = self._wait_started + timeout
        if self._loop.time() >= due:
            waiter.set_exception(TimeoutError())
        else:
            self._timer_due = due
            self._timer = self._loop.call_at(due, self._check_timeout)

    async def write(
        self, data: bytes, timeout: float | None, request: httpx2.Request | None
    ) -> None:
        if self.transport is None or self.transport.is_closing():
            raise httpx2.WriteError("the connection is closed", request=request)
        self.transport.write(data)
        writable = self._writable
        if writable is not None:
            try:
                await asyncio.wait_for(asyncio.shield(writable), timeout)
            except TimeoutError:
                raise httpx2.WriteTimeout(
                    f"the request was not sent within {timeout:g} s", request=request
                ) from None
        if self.lost is not None:
            raise httpx2.WriteError(f"the connection was lost: {self.lost}", request=request)

    def close(self) -> None:
        self.eof = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.abort()


class _Body(httpx2.AsyncByteStream):
    """A response body read off its connection; at the end the connection goes back to
    the pool (or is closed)."""

    def __init__(
        self,
        pool: AsyncioTransport,
        origin: _Origin,
        conn: _Connection,
        request: httpx2.Request | None,
        framing: str,
        length: int,
        keep: bool,
        timeout: float | None,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: _Connection | None = conn
        self._request = request
        self._framing = framing
        self._length = length
        self._keep = keep
        self._timeout = timeout

    def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return _nothing()
        if self._framing == "length":
            return self._by_length(conn, self._length)
        if self._framing == "chunked":
            return self._chunked(conn)
        return self._to_close(conn)

    async def _by_length(self, conn: _Connection, left: int) -> AsyncIterator[bytes]:
        try:
            while left > 0:
                if not conn.buffer:
                    await conn.more(self._timeout, self._request)
                    if not conn.buffer:
                        continue
                data = conn.take(left)
                left -= len(data)
                yield data
        except BaseException:
            self._finish(reuse=False)
            raise
        self._finish(reuse=self._keep)

    async def _to_close(self, conn: _Connection) -> AsyncIterator[bytes]:
        try:
            while True:
                if conn.buffer:
                    yield conn.take()
                elif conn.eof:
                    return
                else:
                    await conn.more(self._timeout, self._request)
        finally:
            self._finish(reuse=False)

    async def _chunked(self, conn: _Connection) -> AsyncIterator[bytes]:
        """Chunked transfer coding. What has arrived of a chunk is passed on at once, and
        chunks that arrived together are passed on as one piece."""
        try:
            request, timeout = self._request, self._timeout
            parser = _ChunkParser(request)
            while True:
                if not conn.buffer:
                    await conn.more(timeout, request)
                    continue
                data = conn.take()
                if parser.state is _SIZE:  # the common case: exactly one whole chunk arrived
                    whole = _whole_chunk(data)
                    if whole is not None:
                        yield whole
                        continue
                out, pos, ended = parser.parse(data)
                if ended:
                    conn.buffer[:0] = data[pos:]
                    if out:
                        yield b"".join(out)
                    self._finish(reuse=self._keep)
                    return
                if pos < len(data):
                    conn.buffer[:0] = data[pos:]  # a partial line: wait for the rest
                if out:
                    yield out[0] if len(out) == 1 else b"".join(out)
                else:
                    await conn.more(timeout, request)
        except BaseException:
            self._finish(reuse=False)
            raise

    def _finish(self, *, reuse: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._release(self._origin, conn, reuse=reuse)

    async def aclose(self) -> None:
        self._finish(reuse=False)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


def _whole_chunk(data: bytes) -> bytes | None:
    """The data of ``data`` when it is exactly one whole chunk (size line, data, CRLF)."""
    end = data.find(b"\r\n")
    if 0 < end < 9 and data.endswith(b"\r\n"):
        try:
            length = int(data[:end], 16)
        except ValueError:
            return None
        if length > 0 and len(data) == end + length + 4:
            return data[end + 2 : -2]
    return None


class _ChunkParser:
    """Chunked transfer coding over arbitrary pieces: the size line, the chunk data, the
    CRLF after it, then the trailers. (The one-whole-chunk-per-read case never gets here.)"""

    __slots__ = ("left", "request", "state")

    def __init__(self, request: httpx2.Request | None) -> None:
        self.request = request
        self.state = _SIZE
        self.left = 0

    def parse(self, data: bytes) -> tuple[list[bytes], int, bool]:
        """The chunk data in ``data``, how much of ``data`` was used, and whether the body
        ended (the rest of ``data`` then belongs to the next response)."""
        pos, size, out = 0, len(data), list[bytes]()
        while pos < size:
            if self.state is _DATA:
                end = min(size, pos + self.left)
                out.append(data[pos:end])
                self.left -= end - pos
                pos = end
                if not self.left:
                    self.state = _CRLF
                continue
            if self.state is _TRAILERS:
                end = self._trailers_end(data, pos)
                return (out, end, True) if end >= 0 else (out, pos, False)
            end = self._crlf(data, pos) if self.state is _CRLF else self._size_line(data, pos)
            if end < 0:
                break
            pos = end
        return out, pos, False

    def _crlf(self, data: bytes, pos: int) -> int:
        if len(data) - pos < 2:
            return -1
        if data[pos : pos + 2] != b"\r\n":
            raise httpx2.RemoteProtocolError(
                "a chunk is longer than its size line says", request=self.request
            )
        self.state = _SIZE
        return pos + 2

    def _size_line(self, data: bytes, pos: int) -> int:
        end = data.find(b"\r\n", pos)
        if end < 0:
            if len(data) - pos > _MAX_HEAD:
                raise httpx2.RemoteProtocolError(
                    "a chunk size line is too long", request=self.request
                )
            return -1
        self.left = _chunk_size(data[pos:end], self.request)
        self.state = _DATA if self.left else _TRAILERS
        return end + 2

    def _trailers_end(self, data: bytes, pos: int) -> int:
        """Trailers: none (a bare CRLF), or header lines up to a blank line."""
        if data.startswith(b"\r\n", pos):
            return pos + 2
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            if len(data) - pos > _MAX_HEAD:
                raise httpx2.RemoteProtocolError("the trailers are too long", request=self.request)
            return -1
        return end + 4


def _chunk_size(line: bytes, request: httpx2.Request | None) -> int:
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        size = -1
    if size < 0:
        raise httpx2.RemoteProtocolError(f"bad chunk size line {line[:40]!r}", request=request)
    return size


class AsyncioTransport(httpx2.AsyncBaseTransport):
    """An HTTP/1.1 transport on asyncio protocols, for an SDK's ``http_client``.

    It serves one event loop at a time; moving to another (``run_sync`` runs each call on
    a loop of its own) drops the idle connections of the old one.
    ``max_connections`` bounds the open connections (a request waits for a free one up to
    the pool timeout); at most ``max_idle`` idle connections are kept, each for
    ``keepalive_expiry`` seconds. ``ssl_context`` is used for https origins (default: the
    system's trust store via ``ssl.create_default_context()``).
    """

    def __init__(
        self,
        *,
        max_connections: int = 1000,
        max_idle: int = 1000,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if max_idle < 0:
            raise ValueError(f"max_idle must not be negative, got {max_idle}")
        if keepalive_expiry < 0:
            raise ValueError(f"keepalive_expiry must not be negative, got {keepalive_expiry}")
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._ssl = ssl_context
        self._idle: dict[_Origin, collections.deque[_Connection]] = {}
        self._idle_count = 0
        self._open = 0
        self._slots: asyncio.Semaphore | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_end: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    @property
    def idle_connections(self) -> int:
        return self._idle_count

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """The httpx entry point: what an SDK client calls."""
        url = request.url
        timeouts = request.extensions.get("timeout") or {}
        body = await request.aread()
        close = request.headers.get("connection", "").lower() == "close"
        raw = await self._exchange(
            _origin(url, request),
            _request_head(request.method, url.raw_path, request.headers.raw),
            body,
            _Timeouts.of(timeouts),
            head_only=request.method == "HEAD",
            close=close,
            request=request,
        )
        return httpx2.Response(
            raw.status,
            headers=raw.headers,
            stream=raw.body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": raw.reason},
        )

    async def send(
        self,
        method: str,
        url: httpx2.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeout: httpx2.Timeout,
    ) -> RawResponse:
        """Send one request written by the caller (``headers`` must include ``Host`` and
        ``Content-Length``); returns once the response head has arrived. The body is read
        by iterating the response, which must then be closed (``aclose``)."""
        return await self._exchange(
            _origin(url, None),
            _request_head(method, url.raw_path, headers),
            body,
            _Timeouts.of(timeout.as_dict()),
            head_only=method == "HEAD",
            close=False,
            request=None,
        )

    async def _exchange(
        self,
        origin: _Origin,
        head: bytes,
        body: bytes,
        timeouts: _Timeouts,
        *,
        head_only: bool,
        close: bool,
        request: httpx2.Request | None,
    ) -> RawResponse:
        if self._closed:
            raise RuntimeError("the transport is closed")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._adopt(loop)
        await self._acquire(timeouts.pool, request)
        conn: _Connection | None = None
        try:
            conn = self._checkout(origin) or await self._connect(origin, timeouts.connect, request)
            await conn.write(head + body, timeouts.write, request)
            answer = await _read_head(conn, timeouts.read, request, head_only)
        except BaseException:
            if conn is not None:
                conn.close()
                self._open -= 1
            self._free()
            raise
        keep, framing, length = answer.keep and not close, answer.framing, answer.length
        stream = _Body(self, origin, conn, request, framing, length, keep, timeouts.read)
        if framing == "length" and length == 0:
            stream._finish(reuse=keep)
        return RawResponse(answer.status, answer.reason, answer.headers, stream)

    async def aclose(self) -> None:
        self._closed = True
        self._close_idle()
        watcher, self._loop_end = self._loop_end, None
        if watcher is not None and watcher.get_loop() is asyncio.get_running_loop():
            watcher.cancel()

    # -- the pool ----------------------------------------------------------------------------

    def _close_idle(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for conn in idle:
                with contextlib.suppress(RuntimeError):  # the old loop is closed
                    conn.close()
        self._open -= self._idle_count
        self._idle.clear()
        self._idle_count = 0

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve a new event loop (``run_sync`` runs each call on a loop of its own): the
        idle connections belong to the old loop and cannot be used from this one. When the
        new loop ends, its idle connections are closed while it still runs."""
        self._close_idle()
        self._slots = None
        self._loop = loop
        ending = functools.partial(_loop_ending, weakref.ref(self), self._idle)
        self._loop_end = close_at_loop_end(self, ending)

    async def _acquire(self, timeout: float | None, request: httpx2.Request | None) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        if not self._slots.locked():
            await self._slots.acquire()
            return
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout)
        except TimeoutError:
            raise httpx2.PoolTimeout(
                f"all {self.max_connections} connections stayed busy for {timeout:g} s",
                request=request,
            ) from None

    def _free(self) -> None:
        assert self._slots is not None
        self._slots.release()

    def _checkout(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        oldest = asyncio.get_running_loop().time() - self.keepalive_expiry
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest to be alive
            self._idle_count -= 1
            if conn.usable and conn.idle_since >= oldest:
                return conn
            conn.close()
            self._open -= 1
        return None

    async def _connect(
        self, origin: _Origin, timeout: float | None, request: httpx2.Request | None
    ) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                ),
                timeout,
            )
        except TimeoutError:
            raise httpx2.ConnectTimeout(
                f"could not connect to {host}:{port} within {timeout:g} s", request=request
            ) from None
        except OSError as exc:
            raise httpx2.ConnectError(
                f"could not connect to {host}:{port}: {exc}", request=request
            ) from exc
        _keepalive(conn)
        self._open += 1
        return conn

    def _release(self, origin: _Origin, conn: _Connection, *, reuse: bool) -> None:
        self._free()
        if reuse and conn.usable and not self._closed and self._idle_count < self.max_idle:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(origin, collections.deque()).append(conn)
            self._idle_count += 1
            if self._sweep is None:
                self._schedule_sweep()
            return
        conn.close()
        self._open -= 1

    def _schedule_sweep(self, delay: float | None = None) -> None:
        if delay is None:
            delay = min(max(self.keepalive_expiry, 0.1), 1.0)
        self._sweep = asyncio.get_running_loop().call_later(delay, self._sweep_idle)

    def _sweep_idle(self) -> None:
        """Close idle connections past their expiry (the oldest sit on the left), a batch
        at a time, so a thousand expiring together do not hold up the event loop."""
        self._sweep = None
        oldest = asyncio.get_running_loop().time() - self.keepalive_expiry
        budget = _SWEEP_BATCH
        for origin, idle in list(self._idle.items()):
            while budget and idle and (idle[0].idle_since < oldest or not idle[0].usable):
                idle.popleft().close()
                self._idle_count -= 1
                self._open -= 1
                budget -= 1
            if not idle:
                del self._idle[origin]
        if self._idle_count:
            self._schedule_sweep(0.0 if not budget else None)


def _keepalive(conn: _Connection) -> None:
    """TCP keep-alive probes, as the SDKs' own clients set, so a long quiet stream through
    a NAT or load balancer is not dropped silently."""
    sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
    if sock is None:
        return
    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), 60),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), 60),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), 5),
    ]
    for level, option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):  # not every platform takes every option
                sock.setsockopt(level, option, value)


def _request_head(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    lines += [b"%s: %s" % (name, value) for name, value in headers]
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def _origin(url: httpx2.URL, request: httpx2.Request | None) -> _Origin:
    scheme = url.scheme
    if scheme not in ("http", "https"):
        raise httpx2.UnsupportedProtocol(
            f"AsyncioTransport speaks http and https, not {scheme!r}", request=request
        )
    return scheme, url.host, url.port or (443 if scheme == "https" else 80)


async def _loop_ending(
    ref: weakref.ref[AsyncioTransport], idle: dict[_Origin, collections.deque[_Connection]]
) -> None:
    """A transport's duty at its loop's end, or once it was dropped without ``aclose``
    (it is held weakly, so it can be collected): its ``idle`` connections closed."""
    transport = ref()
    if transport is None:
        for conn in (c for pool in idle.values() for c in pool):
            conn.close()
        idle.clear()
    elif transport._loop is asyncio.get_running_loop():
        transport._close_idle()
        transport._loop, transport._loop_end = None, None  # the next request adopts its loop


@attrs.frozen
class _Timeouts:
    connect: float | None
    read: float | None
    write: float | None
    pool: float | None

    @classmethod
    def of(cls, timeouts: dict[str, float | None]) -> _Timeouts:
        get = timeouts.get
        return cls(get("connect"), get("read"), get("write"), get("pool"))


class RawResponse:
    """A response as read off the wire: status, reason, headers (as sent), and the body,
    read by iterating. Close it (``aclose``) when done, read to the end or not."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: _Body
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        key = name.lower().encode("ascii")
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.body.__aiter__()

    def decoded(self) -> AsyncIterator[bytes]:
        """The body with its ``content-encoding`` (gzip or deflate) undone."""
        encoding = (self.header("content-encoding") or "identity").strip().lower()
        if encoding in ("", "identity"):
            return self.body.__aiter__()
        return self._decode(encoding)

    async def _decode(self, encoding: str) -> AsyncIterator[bytes]:
        if encoding not in ("gzip", "deflate"):
            raise httpx2.DecodingError(f"the response is {encoding}-encoded; not supported")
        decoder = zlib.decompressobj(wbits=zlib.MAX_WBITS | (16 if encoding == "gzip" else 0))
        try:
            async for chunk in self.body:
                data = decoder.decompress(chunk)
                if data:
                    yield data
            rest = decoder.flush()
        except zlib.error as exc:
            raise httpx2.DecodingError(f"bad {encoding} data: {exc}") from None
        if rest:
            yield rest

    async def aread(self) -> bytes:
        """The whole (rest of the) body, decoded; the response is closed afterwards."""
        try:
            return b"".join([chunk async for chunk in self.decoded()])
        finally:
            await self.body.aclose()

    async def aclose(self) -> None:
        await self.body.aclose()


async def _read_head(
    conn: _Connection, timeout: float | None, request: httpx2.Request | None, head_only: bool
) -> ResponseHead:
    """The response head, framing decided (interim 1xx responses skipped)."""
    while True:
        end = conn.buffer.find(b"\r\n\r\n")
        while end < 0:
            if len(conn.buffer) > _MAX_HEAD:
                raise httpx2.RemoteProtocolError("the response head is too long", request=request)
            if conn.eof:
                raise httpx2.RemoteProtocolError(
                    "the server closed the connection without sending a response",
                    request=request,
                )
            await conn.more(timeout, request)
            end = conn.buffer.find(b"\r\n\r\n")
        try:
            head = parse_head(conn.take(end + 4)[:-4], head_only=head_only)
        except httpx2.RemoteProtocolError as exc:
            raise httpx2.RemoteProtocolError(str(exc), request=request) from None
        if not head.interim:
            return head


@attrs.frozen
class ResponseHead:
    """A response's status line and headers, and how its body is delimited (RFC 9112 §6):
    ``framing`` is ``"length"`` (``length`` bytes; 0 for a response that has no body),
    ``"chunked"`` or ``"close"`` (read until the server closes); ``keep`` says whether the
    connection may carry another request once the body is read."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    framing: str
    length: int
    keep: bool

    @property
    def interim(self) -> bool:
        """A 1xx response (not 101) that precedes the real one."""
        return 100 <= self.status < 200 and self.status != 101


_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: (.*))?")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DIGITS = re.compile(rb"[0-9]{1,18}")


def _bad(message: str) -> httpx2.RemoteProtocolError:
    return httpx2.RemoteProtocolError(message)


class _HeadFields:
    """The header lines of a response head, and what its framing depends on."""

    __slots__ = ("close", "codings", "headers", "keep_alive", "lengths")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.close = self.keep_alive = False
        self.codings: list[bytes] = []
        self.lengths: set[bytes] = set()

    def add(self, line: bytes) -> None:
        name, sep, value = line.partition(b":")
        if not sep or _TOKEN.fullmatch(name) is None:
            raise _bad(f"bad header line {line[:80]!r}")
        value = value.strip(b" \t")
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"connection":
            options = {o.strip(b" \t").lower() for o in value.split(b",")}
            self.close = self.close or b"close" in options
            self.keep_alive = self.keep_alive or b"keep-alive" in options
        elif lower == b"transfer-encoding":
            self.codings += [c.strip(b" \t").lower() for c in value.split(b",") if c.strip(b" \t")]
        elif lower == b"content-length":
            for item in value.split(b","):
                item = item.strip(b" \t")
                if _DIGITS.fullmatch(item) is None:
                    raise _bad(f"bad content-length {value[:40]!r}: digits only")
                self.lengths.add(item.lstrip(b"0") or b"0")


def _check_framing(codings: list[bytes], lengths: set[bytes], http10: bool) -> None:
    if len(lengths) > 1:
        found = b", ".join(sorted(lengths)).decode()
        raise _bad(f"conflicting content-length values ({found})")
    if codings and lengths:
        raise _bad("both transfer-encoding and content-length: the body cannot be delimited safely")
    if codings and http10:
        raise _bad("transfer-encoding in an HTTP/1.0 response")
    if codings and codings != [b"chunked"]:
        found = b", ".join(codings).decode()
        raise _bad(f"transfer-encoding {found!r} is not supported: only chunked")


def parse_head(head: bytes, *, head_only: bool = False) -> ResponseHead:
    """Parse a response head (status line and header lines, without the blank line) and
    decide its framing, strictly (RFC 9112): the version and the ``connection`` options
    decide reuse (HTTP/1.1 keeps the connection unless ``close``; HTTP/1.0 only with
    ``keep-alive``); ``content-length`` is digits only, repeated only with the same value,
    never beside ``transfer-encoding``; the only transfer coding is ``chunked``. A head
    that breaks a rule raises ``httpx2.RemoteProtocolError`` naming it: its connection
    must be closed, as its body cannot be delimited safely. ``head_only`` is for the
    answer to a HEAD request, which has no body whatever its headers say."""
    lines = head.split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise _bad(f"bad status line {lines[0][:80]!r}")
    http10 = status_line.group(1) == b"0"
    status = int(status_line.group(2))
    fields = _HeadFields()
    for line in lines[1:]:
        fields.add(line)
    keep = not fields.close and (fields.keep_alive or not http10)
    reason = status_line.group(3) or b""
    codings, lengths, headers = fields.codings, fields.lengths, fields.headers
    _check_framing(codings, lengths, http10)
    if head_only or status in _NO_BODY or 100 <= status < 200:
        return ResponseHead(status, reason, headers, "length", 0, keep)
    if codings:
        return ResponseHead(status, reason, headers, "chunked", 0, keep)
    if lengths:
        return ResponseHead(status, reason, headers, "length", int(lengths.pop()), keep)
    return ResponseHead(status, reason, headers, "close", 0, False)
