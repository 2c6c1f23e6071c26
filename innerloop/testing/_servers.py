"""Loopback API servers: the Anthropic Messages API and the OpenAI Chat Completions API on
127.0.0.1, over real HTTP (SSE when streaming), playing a script of replies and faults.

A server runs its own event loop in a thread, so it serves sync and async tests alike;
``with AnthropicServer([...]) as server:`` (or ``async with``) starts and stops it. Script
steps: a :class:`~innerloop.testing.Reply`, a :class:`~innerloop.testing.Fault`, or one of
the wire-level steps here (:class:`RateLimit`, :class:`SlowReply`, :class:`Truncated`,
:class:`StreamError`, :class:`Raw`, :class:`Oversized`, :class:`Trickle`). Every request
received is kept in ``requests``.

Besides the :class:`~innerloop.testing.Fault` kinds the scripted provider knows, the servers
play malformed streams as ``Fault(kind)``: ``"wrong_shape"`` (valid JSON that is not an
event object), ``"missing_index"`` (a delta that does not say which block or call it
extends) and ``"corrupt_gzip"`` (a gzip-encoded stream whose compressed bytes are damaged).
"""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Literal, Self

import attrs

from innerloop._messages import (
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.testing._checks import anthropic_refusal, chat_refusal, responses_refusal
from innerloop.testing._scripted import Fault, Reply, ScriptStep, reply, script_steps, tool_call

__all__ = [
    "AnthropicServer",
    "LoopbackServer",
    "OpenAIServer",
    "Oversized",
    "RateLimit",
    "Raw",
    "RecordedRequest",
    "ResponsesServer",
    "SlowReply",
    "StreamError",
    "Trickle",
    "Truncated",
]


@attrs.frozen
class RateLimit(ScriptStep):
    """A 429 whose wait is given as ``retry-after`` seconds, an HTTP date, or
    ``retry-after-ms`` (``form``); ``retry_after=None`` sends no header."""

    retry_after: float | None = None
    form: Literal["seconds", "date", "ms"] = "seconds"


@attrs.frozen
class SlowReply(ScriptStep):
    """``reply`` streamed at ``tokens_per_second``: one SSE frame every
    ``1 / tokens_per_second`` seconds (each delta frame carries one token)."""

    reply: Reply
    tokens_per_second: float


@attrs.frozen
class Truncated(ScriptStep):
    """``reply`` cut after ``after_events`` SSE frames: the connection drops mid-body."""

    reply: Reply
    after_events: int = 3


@attrs.frozen
class StreamError(ScriptStep):
    """A 200 stream carrying an in-stream error after ``after_events`` frames."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    after_events: int = 2


@attrs.frozen
class Raw(ScriptStep):
    """A recorded response replayed as is (``gzip=True`` compresses ``body`` first).
    ``close=True``: the server closes the connection once the response is out, though
    its head said keep-alive (as servers do after an error: a client that pools the
    connection finds it dead on its next request)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    gzip: bool = False
    close: bool = False


@attrs.frozen
class Oversized(ScriptStep):
    """A reply whose text arrives as one streamed event of about ``size`` bytes, sent in
    pieces of ``piece`` bytes."""

    size: int
    piece: int = 64 * 1024


@attrs.frozen
class Trickle(ScriptStep):
    """A stream whose event never ends: after the opening frames, one ``data:`` line grows
    by ``piece`` bytes every ``interval`` seconds until the client hangs up (or, with
    ``limit``, until that many bytes of it were sent; then the connection drops)."""

    piece: int = 1024
    interval: float = 0.0
    limit: int | None = None


Step = Reply | Fault | RateLimit | SlowReply | Truncated | StreamError | Raw | Oversized | Trickle
STEPS = (Reply, Fault, RateLimit, SlowReply, Truncated, StreamError, Raw, Oversized, Trickle)


@attrs.frozen
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    query: str = ""
    """The query string, without the ``?``."""


@attrs.define
class _Plan:
    status: int
    headers: list[tuple[str, str]]
    chunks: list[bytes]
    delay: float = 0.0
    drop: bool = False
    hang: bool = False
    stream: bool = False
    trickle: Trickle | None = None
    close: bool = False  # after the response, whatever its head said


_SKIP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
_REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _json_schema(fmt: Any, *path: str) -> Any:
    """The schema of a ``json_schema`` format found at ``path`` in ``fmt``; else None."""
    for key in path:
        fmt = fmt.get(key) if isinstance(fmt, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    named = fmt.get("json_schema", fmt)  # Chat Completions nests name, schema and strict
    return named.get("schema") if isinstance(named, dict) else None


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class LoopbackServer:
    """The shared HTTP machinery; subclasses render replies and errors in their dialect."""

    dialect: ClassVar[str] = ""
    path: str = ""
    """The one route served (a class default; a constructor argument for cloud routes)."""
    api_prefix: ClassVar[str] = ""

    def __init__(
        self,
        script: Iterable[ScriptStep] = (),
        *,
        model: str = "loopback-model-20250101",
        chunk_size: int = 16,
        path: str | None = None,
        output_schema: dict[str, Any] | None = None,
        output_tool: bool = False,
        respond: Callable[[Any], ScriptStep | None] | None = None,
    ) -> None:
        """``output_schema``: every request must ask for its answer in this JSON schema, in
        the dialect's structured-output form (else a 400 names what was sent); with
        ``output_tool``, as the input schema of the ``final_result`` tool instead (and no
        structured-output form). ``respond(body)``, when given, picks the step for each
        request from its JSON body (None: the script's next step), so concurrent runs get
        answers by what they ask, whatever the order their requests arrive in."""
        self.respond = respond
        self.output_schema = output_schema
        self.output_tool = output_tool
        if path is not None:  # a cloud route's path (Vertex, Azure) instead of the API's own
            self.path = path
        self.script: list[Step] = script_steps(script, STEPS, type(self).__name__)
        self.model = model
        self.chunk_size = chunk_size
        self.played = 0
        self.requests: list[RecordedRequest] = []
        self.port = 0
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._storm: tuple[float, RateLimit, int] | None = None
        self.storm_requests: list[float] = []
        self.storm_end: float | None = None
        """When the last storm ended (``time.monotonic()``), once it has."""
        """When (``time.monotonic()``) each request answered by the storm arrived."""

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The root URL, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give the dialect's SDK client."""
        return self.url + self.api_prefix

    def push(self, *steps: Step) -> None:
        """Append steps to the script."""
        self.script.extend(steps)

    def storm(self, seconds: float, retry_after: float | None = None, *, at_least: int = 0) -> None:
        """For the next ``seconds`` (real time), and until it has answered ``at_least``
        requests, answer every request with a 429 (with ``retry_after``, if given) without
        playing the script; then play it again. ``at_least`` makes a storm meet a known
        number of requests however slowly a loaded machine sends them."""
        self._storm = (time.monotonic() + seconds, RateLimit(retry_after), at_least)
        self.storm_requests = []
        self.storm_end = None

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} is already running on {self.url}")
        self._ready = threading.Event()
        self._start_error = None
        self._thread = threading.Thread(target=self._serve, name=type(self).__name__, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._start_error is not None:
            raise RuntimeError(f"loopback server failed to start: {self._start_error}")
        return self

    def stop(self) -> None:
        """Stop serving; open connections (slow or hanging ones too) are closed."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"url={self.url!r}" if self._thread is not None else "stopped"
        return f"<{type(self).__name__} {state} played={self.played}/{len(self.script)}>"

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to start()
            self._start_error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await self._connection(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            except asyncio.CancelledError:
                # the server's own shutdown cancels idle keep-alive connections; ending
                # the task quietly keeps asyncio from logging each one
                return
            finally:
                tasks.discard(task)
                writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    # -- one request ----------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until the client or a plan closes it
        (HTTP/1.1 keep-alive: a client's pooled connection is reused, as with a real API)."""
        while await self._request(reader, writer):
            pass

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; True when the connection stays open for the next one."""
        line = await reader.readline()
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            key, _, value = header.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path, _, query = target.partition("?")
        self.requests.append(RecordedRequest(method, path, headers, body, query))
        try:
            plan = self._plan(path, body)
        except Exception as exc:  # a bad script step: tell the client, keep serving
            plan = self._error(500, "api_error", f"loopback server cannot play the step: {exc!r}")
        keep = not plan.drop and headers.get("connection", "").lower() != "close"
        await self._send(writer, plan, keep)
        return keep and not plan.close

    def _output_refused(self, body: dict[str, Any]) -> str | None:
        """Why ``body`` does not ask for the answer in ``output_schema`` as expected."""
        native = self.output_format(body)
        if not self.output_tool:
            if native == self.output_schema:
                return None
            return (
                f"expected the output schema {self.output_schema} in {self.format_field}, "
                f"got {native}"
            )
        tools = body.get("tools")
        schemas = [self.tool_schema(t) for t in tools if isinstance(t, dict)] if tools else []
        found = next((schema for name, schema in schemas if name == "final_result"), None)
        if native is not None:
            return f"expected the final_result tool, not {self.format_field}"
        if found != self.output_schema:
            return (
                f"expected the output schema {self.output_schema} as the input schema of the "
                f"final_result tool, got {found}"
            )
        return None

    def _plan(self, path: str, body: Any) -> _Plan:
        if path != self.path:
            return self._error(404, "not_found_error", f"no route {path}; this serves {self.path}")
        if self.output_schema is not None:
            refused = self._output_refused(body if isinstance(body, dict) else {})
            if refused is not None:
                return self._error(400, "invalid_request_error", refused)
        refused = self.content_refused(body) if isinstance(body, dict) else None
        if refused is not None:  # played no step: as the API, which refuses before answering
            return self._error(400, "invalid_request_error", refused)
        stream = bool(isinstance(body, dict) and body.get("stream"))
        model = str(body.get("model") or self.model) if isinstance(body, dict) else self.model
        if self._storm is not None:
            now = time.monotonic()
            until, fault, at_least = self._storm
            if now < until or len(self.storm_requests) < at_least:
                self.storm_requests.append(now)
                return self._render(fault, stream, model)
            self._storm, self.storm_end = None, max([until, *self.storm_requests[-1:]])
        chosen = self.respond(body) if self.respond is not None else None
        if chosen is not None:
            if not isinstance(chosen, STEPS):
                names = ", ".join(k.__name__ for k in STEPS)
                raise TypeError(f"respond gave a {type(chosen).__name__}; a step is one of {names}")
            return self._render(chosen, stream, model)
        if self.played >= len(self.script):
            return self._error(
                400,
                "invalid_request_error",
                f"loopback script exhausted: all {len(self.script)} steps were played",
            )
        step = self.script[self.played]
        self.played += 1
        return self._render(step, stream, model)

    def _render(self, step: Step, stream: bool, model: str) -> _Plan:
        if isinstance(step, Reply):
            if not stream:
                return self._json(200, self.message_json(step, model))
            return self._events(self.frames(step, model))
        if isinstance(step, Fault):
            return self._fault(step, model)
        renderers: dict[type, Callable[[Any, str], _Plan]] = {
            SlowReply: self._render_slowreply,
            Truncated: self._render_truncated,
            StreamError: self._render_streamerror,
            RateLimit: self._render_ratelimit,
            Oversized: self._render_oversized,
            Trickle: self._render_trickle,
            Raw: self._render_raw,
        }
        return renderers[type(step)](step, model)

    def _render_slowreply(self, step: SlowReply, model: str) -> _Plan:
        plan = self._events(self.frames(step.reply, model))
        plan.delay = 1.0 / step.tokens_per_second
        return plan

    def _render_truncated(self, step: Truncated, model: str) -> _Plan:
        plan = self._events(self.frames(step.reply, model)[: step.after_events])
        plan.drop = True
        return plan

    def _render_streamerror(self, step: StreamError, model: str) -> _Plan:
        frames = self.frames(reply("partial answer that never ends"), model)
        error = self.error_frame(step.error_type, step.message)
        return self._events([*frames[: step.after_events], error])

    def _render_ratelimit(self, step: RateLimit, model: str) -> _Plan:
        plan = self._error(429, "rate_limit_error", "rate limit exceeded")
        plan.headers += self._retry_after(step)
        return plan

    def _render_oversized(self, step: Oversized, model: str) -> _Plan:
        chunk_size, self.chunk_size = self.chunk_size, step.size
        try:
            body = b"".join(self.frames(reply("x" * step.size), model))
        finally:
            self.chunk_size = chunk_size
        pieces = [body[i : i + step.piece] for i in range(0, len(body), step.piece)]
        return self._events(pieces)

    def _render_trickle(self, step: Trickle, model: str) -> _Plan:
        plan = self._events(self.frames(reply("x"), model)[:2])
        plan.trickle = step
        return plan

    def _render_raw(self, step: Raw, model: str) -> _Plan:
        headers = [(k, v) for k, v in step.headers if k.lower() not in _SKIP_HEADERS]
        body = step.body
        if step.gzip:
            body = gzip.compress(body)
            headers.append(("content-encoding", "gzip"))
        return _Plan(step.status, headers, [body], close=step.close)

    @staticmethod
    def _retry_after(step: RateLimit) -> list[tuple[str, str]]:
        if step.retry_after is None:
            return []
        if step.form == "ms":
            return [("retry-after-ms", str(int(step.retry_after * 1000)))]
        if step.form == "date":
            when = email.utils.formatdate(time.time() + step.retry_after, usegmt=True)
            return [("retry-after", when)]
        return [("retry-after", f"{step.retry_after:g}")]

    def _fault(self, fault: Fault, model: str) -> _Plan:
        kind = fault.kind
        if kind == "hang":
            return _Plan(200, [], [], hang=True)
        broken = self._broken_stream(fault, model)
        if broken is not None:
            return broken
        if kind == "rate_limited":
            return self._render(RateLimit(fault.retry_after), True, model)
        if kind == "context_overflow":
            return self.prompt_too_long()
        error_type = {
            "overloaded": "overloaded_error",
            "server_error": "api_error",
        }.get(kind, "invalid_request_error")
        status = fault.status or 500
        if status == 401:
            error_type = "authentication_error"
        plan = self._error(status, error_type, fault.message or kind)
        if fault.retry_after is not None:
            plan.headers += self._retry_after(RateLimit(fault.retry_after))
        return plan

    def _broken_stream(self, fault: Fault, model: str) -> _Plan | None:
        """The faults that break a stream that opened; None for the others."""
        kind = fault.kind
        if kind == "malformed":
            frames = self.frames(reply("this stream breaks"), model)
            return self._events([*frames[:2], b'data: {"type": "content_block_delta", "ind\n\n'])
        if kind == "wrong_shape":
            frames = self.frames(reply("this stream breaks"), model)
            return self._events([*frames[:2], b'data: ["valid", "JSON", "but not an event"]\n\n'])
        if kind == "missing_index":
            return self._events(self.unindexed_frames(model))
        if kind == "corrupt_gzip":
            body = bytearray(gzip.compress(b"".join(self.frames(reply("a " * 400), model))))
            middle = len(body) // 2
            body[middle : middle + 16] = b"\xff" * 16
            headers = [("content-type", "text/event-stream"), ("content-encoding", "gzip")]
            return _Plan(200, headers, [bytes(body)])
        if kind == "empty":
            return _Plan(200, [("content-type", "text/event-stream")], [b""], stream=True)
        if kind == "dropped":
            plan = self._events(
                self.frames(reply("partial answer ..."), model)[: fault.after_events]
            )
            plan.drop = True
            return plan
        return None

    def _json(self, status: int, body: Any) -> _Plan:
        return _Plan(status, [("content-type", "application/json")], [json.dumps(body).encode()])

    def _events(self, frames: list[bytes]) -> _Plan:
        headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
        return _Plan(200, headers, frames, stream=True)

    def _error(self, status: int, error_type: str, message: str) -> _Plan:
        return self._json(status, self.error_json(error_type, message))

    async def _send(self, writer: asyncio.StreamWriter, plan: _Plan, keep: bool) -> None:
        if plan.hang:
            await asyncio.Event().wait()
        reason = _REASONS.get(plan.status, "Status")
        connection = "keep-alive" if keep else "close"
        head = [f"HTTP/1.1 {plan.status} {reason}", f"connection: {connection}"]
        head += [f"{k}: {v}" for k, v in plan.headers]
        if plan.stream:
            head.append("transfer-encoding: chunked")
        else:
            head.append(f"content-length: {sum(len(c) for c in plan.chunks)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if not plan.stream:
            writer.writelines(plan.chunks)
            await writer.drain()
            return
        if not await self._chunks(writer, plan):
            return
        if plan.trickle is not None:
            await self._trickle(writer, plan.trickle)
            return
        if not plan.drop:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _chunks(writer: asyncio.StreamWriter, plan: _Plan) -> bool:
        """Write the plan's chunks of a chunked body; False when the client hung up (an
        abort) meanwhile: asyncio logs every write to a dead socket, so none is made."""
        for i, chunk in enumerate(plan.chunks):
            if plan.delay and i:
                await asyncio.sleep(plan.delay)
            if writer.transport.is_closing():
                return False
            if chunk:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if plan.delay or plan.drop:
                await writer.drain()
        return True

    @staticmethod
    async def _trickle(writer: asyncio.StreamWriter, step: Trickle) -> None:
        """An event that never ends: ``data:`` and then ``piece`` more bytes at a time."""
        piece = b"x" * max(step.piece, 1)
        writer.write(b"6\r\ndata: \r\n")
        sent = 0
        while step.limit is None or sent < step.limit:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
            await writer.drain()  # raises once the client has hung up
            await asyncio.sleep(step.interval)  # lets the server's loop breathe
        writer.close()  # with a limit: the connection drops mid-event

    # -- dialect ----------------------------------------------------------------------------

    format_field: ClassVar[str] = ""
    """Where the dialect's requests carry a structured-output JSON schema."""

    def output_format(self, body: dict[str, Any]) -> Any:
        """The JSON schema ``body`` asks the answer in; None when it asks none."""
        raise NotImplementedError

    def content_refused(self, body: dict[str, Any]) -> str | None:
        """Why the real API would refuse ``body``'s images, documents, files or prompt-cache
        settings (the limits the real API documents: sizes, counts, media types, cache
        breakpoints); None when it takes them."""
        return None

    def tool_schema(self, tool: dict[str, Any]) -> tuple[Any, Any]:
        """The name and input schema of one tool of a request."""
        function = tool.get("function", tool)  # Chat Completions nests them
        if not isinstance(function, dict):
            return None, None
        return function.get("name"), function.get("parameters", function.get("input_schema"))

    def _tool_id(self, block: ToolUseBlock) -> str:
        return block.id or f"toolu_{next(self._ids):04d}"

    def frames(self, r: Reply, model: str) -> list[bytes]:
        """``r`` as this dialect's SSE frames."""
        raise NotImplementedError

    def message_json(self, r: Reply, model: str) -> dict[str, Any]:
        """``r`` as this dialect's non-streaming body."""
        raise NotImplementedError

    def error_json(self, error_type: str, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def unindexed_frames(self, model: str) -> list[bytes]:
        """A stream with a delta that does not say which block (or call) it extends."""
        raise NotImplementedError

    def error_frame(self, error_type: str, message: str) -> bytes:
        return _sse("error", self.error_json(error_type, message))

    def prompt_too_long(self) -> _Plan:
        raise NotImplementedError


class AnthropicServer(LoopbackServer):
    """``POST /v1/messages``; give the SDK ``base_url=server.base_url``."""

    dialect = "anthropic"
    path = "/v1/messages"
    format_field = "output_config.format"

    def output_format(self, body: dict[str, Any]) -> Any:
        return _json_schema(body, "output_config", "format")

    def content_refused(self, body: dict[str, Any]) -> str | None:
        return anthropic_refusal(body)

    def frames(self, r: Reply, model: str) -> list[bytes]:
        size = self.chunk_size
        u = r.usage
        start_usage = {
            "input_tokens": u.input_tokens,
            "output_tokens": 1,
            "cache_read_input_tokens": u.cache_read_tokens,
            "cache_creation_input_tokens": u.cache_creation_tokens,
        }
        message: dict[str, Any] = {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": r.model or model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        out = [_sse("message_start", {"type": "message_start", "message": message})]
        out.append(_sse("ping", {"type": "ping"}))

        def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
            out.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            for delta in deltas:
                event = {"type": "content_block_delta", "index": index, "delta": delta}
                out.append(_sse("content_block_delta", event))

        def stop(index: int) -> None:
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))

        for i, b in enumerate(r.blocks):
            found = self._block(b, size)
            if found is not None:
                block(i, *found)
            stop(i)
        if r.incomplete_tool is not None:
            name, partial = r.incomplete_tool
            start = {"type": "tool_use", "id": f"toolu_{next(self._ids):04d}", "name": name}
            block(
                len(r.blocks),
                {**start, "input": {}},
                [{"type": "input_json_delta", "partial_json": partial}],
            )
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": r.stop_reason, "stop_sequence": None},
        }
        out.append(_sse("message_delta", {**delta, "usage": {"output_tokens": u.output_tokens}}))
        out.append(_sse("message_stop", {"type": "message_stop"}))
        return out

    def _block(self, b: Any, size: int) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """A content block's ``content_block_start`` and deltas (None: not streamed)."""
        if isinstance(b, TextBlock):
            return {"type": "text", "text": ""}, [
                {"type": "text_delta", "text": p} for p in _pieces(b.text, size)
            ]
        if isinstance(b, ThinkingBlock):
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(b.thinking, size)]
            deltas.append({"type": "signature_delta", "signature": b.signature})
            return {"type": "thinking", "thinking": "", "signature": ""}, deltas
        if isinstance(b, RedactedThinkingBlock):
            return {"type": "redacted_thinking", "data": b.data}, []
        if isinstance(b, ToolUseBlock):
            raw = json.dumps(b.input)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, size)]
            start = {"type": "tool_use", "id": self._tool_id(b), "name": b.name, "input": {}}
            return start, [{"type": "input_json_delta", "partial_json": ""}, *deltas]
        if isinstance(b, ServerToolBlock):
            return _anthropic_server_block(_own(b, "anthropic"), size)
        return None

    def message_json(self, r: Reply, model: str) -> dict[str, Any]:
        content = []
        for b in r.blocks:
            if isinstance(b, ServerToolBlock):
                content.append(dict(_own(b, "anthropic").data))
                continue
            item = b.to_dict()
            if isinstance(b, ToolUseBlock):
                item["id"] = self._tool_id(b)
            content.append(item)
        return {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": r.model or model,
            "content": content,
            "stop_reason": r.stop_reason,
            "stop_sequence": None,
            "usage": _anthropic_usage(r.usage),
        }

    def error_json(self, error_type: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type, "message": message}}

    def unindexed_frames(self, model: str) -> list[bytes]:
        frames = self.frames(reply("this stream breaks"), model)
        delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}
        return [*frames[:3], _sse("content_block_delta", delta), *frames[3:]]

    def prompt_too_long(self) -> _Plan:
        message = "prompt is too long: 212345 tokens > 200000 maximum"
        return self._error(400, "invalid_request_error", message)


def _own(block: ServerToolBlock, dialect: str) -> ServerToolBlock:
    """``block``, when this server's API made it (a script that mixes them is wrong)."""
    if block.dialect != dialect:
        raise ValueError(
            f"a {block.dialect} server-tool block cannot be played by the {dialect} server"
        )
    return block


def _anthropic_server_block(
    block: ServerToolBlock, size: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A server-tool block as Anthropic streams it: a call opens with an empty input that
    JSON deltas fill; a result arrives whole in its ``content_block_start``."""
    data = dict(block.data)
    if "input" not in data or block.is_result:
        return data, []
    raw = json.dumps(data["input"])
    deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, size)]
    return {**data, "input": {}}, deltas


def _anthropic_usage(u: Usage) -> dict[str, int]:
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "cache_creation_input_tokens": u.cache_creation_tokens,
    }


_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
    "stop_sequence": "stop",
}


class OpenAIServer(LoopbackServer):
    """``POST /v1/chat/completions``; give the SDK ``base_url=server.base_url``."""

    dialect = "openai"
    path = "/v1/chat/completions"
    api_prefix = "/v1"
    format_field = "response_format"

    def output_format(self, body: dict[str, Any]) -> Any:
        return _json_schema(body, "response_format")

    def content_refused(self, body: dict[str, Any]) -> str | None:
        return chat_refusal(body)

    def _usage(self, u: Usage) -> dict[str, Any]:
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": u.output_tokens,
            "total_tokens": prompt + u.output_tokens,
            "prompt_tokens_details": {
                "cached_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_creation_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": u.thinking_tokens},
        }

    def frames(self, r: Reply, model: str) -> list[bytes]:
        size = self.chunk_size
        cid = f"chatcmpl-{next(self._ids):04d}"
        model = r.model or model

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            body = {
                "id": cid,
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [choice],
                "usage": None,
            }
            return _sse(None, body)

        out = [chunk({"role": "assistant", "content": ""})]
        calls = 0
        for b in r.blocks:
            if isinstance(b, TextBlock):
                out += [chunk({"content": p}) for p in _pieces(b.text, size)]
            elif isinstance(b, ToolUseBlock):
                head = {"index": calls, "id": self._tool_id(b), "type": "function"}
                out.append(
                    chunk({"tool_calls": [{**head, "function": {"name": b.name, "arguments": ""}}]})
                )
                for p in _pieces(json.dumps(b.input), size):
                    out.append(
                        chunk({"tool_calls": [{"index": calls, "function": {"arguments": p}}]})
                    )
                calls += 1
        if r.incomplete_tool is not None:
            name, partial = r.incomplete_tool
            head = {"index": calls, "id": f"call_{next(self._ids):04d}", "type": "function"}
            out.append(
                chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": partial}}]})
            )
        out.append(chunk({}, _FINISH.get(r.stop_reason, r.stop_reason)))
        usage = {
            "id": cid,
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [],
            "usage": self._usage(r.usage),
        }
        out += [_sse(None, usage), b"data: [DONE]\n\n"]
        return out

    def message_json(self, r: Reply, model: str) -> dict[str, Any]:
        calls = [
            {
                "id": self._tool_id(b),
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input)},
            }
            for b in r.blocks
            if isinstance(b, ToolUseBlock)
        ]
        text = "".join(b.text for b in r.blocks if isinstance(b, TextBlock))
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": _FINISH.get(r.stop_reason, r.stop_reason),
        }
        return {
            "id": f"chatcmpl-{next(self._ids):04d}",
            "object": "chat.completion",
            "model": r.model or model,
            "choices": [choice],
            "usage": self._usage(r.usage),
        }

    def error_json(self, error_type: str, message: str) -> dict[str, Any]:
        kind = {"rate_limit_error": "rate_limit_exceeded"}.get(error_type, error_type)
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def error_frame(self, error_type: str, message: str) -> bytes:
        return _sse(None, self.error_json(error_type, message))

    def unindexed_frames(self, model: str) -> list[bytes]:
        """A tool call whose argument fragments after the first do not name their call."""
        frames = self.frames(reply(tool_call("lookup", {"query": "a long query"})), model)
        unindexed = []
        for frame in frames:
            if b'"name"' not in frame:
                frame = frame.replace(b'[{"index":0,"function"', b'[{"function"')
            unindexed.append(frame)
        return unindexed

    def prompt_too_long(self) -> _Plan:
        body = {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, your "
                "messages resulted in 130512 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
        return self._json(400, body)


_INCOMPLETE_REASONS = {"max_tokens": "max_output_tokens", "refusal": "content_filter"}


class ResponsesServer(LoopbackServer):
    """``POST /v1/responses`` (OpenAI's Responses API); give the SDK
    ``base_url=server.base_url``. A thinking block of a reply streams as a reasoning item
    with a summary and an ``encrypted_content`` of ``enc:<text>``."""

    dialect = "responses"
    path = "/v1/responses"
    api_prefix = "/v1"
    format_field = "text.format"

    def output_format(self, body: dict[str, Any]) -> Any:
        return _json_schema(body, "text", "format")

    def content_refused(self, body: dict[str, Any]) -> str | None:
        return responses_refusal(body)

    def _usage(self, u: Usage) -> dict[str, Any]:
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens
        written = u.cache_creation_tokens
        return {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": u.cache_read_tokens,
                "cache_write_tokens": written,
            },
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.thinking_tokens},
            "total_tokens": prompt + u.output_tokens,
        }

    def _items(self, r: Reply) -> list[dict[str, Any]]:
        """The reply's output items, complete."""
        items: list[dict[str, Any]] = []
        for b in r.blocks:
            n = next(self._ids)
            if isinstance(b, ThinkingBlock):
                summary = [{"type": "summary_text", "text": b.thinking}] if b.thinking else []
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{n:04d}",
                        "summary": summary,
                        "encrypted_content": f"enc:{b.thinking}",
                    }
                )
            elif isinstance(b, TextBlock):
                content = [{"type": "output_text", "text": b.text, "annotations": []}]
                items.append(
                    {
                        "type": "message",
                        "id": f"msg_{n:04d}",
                        "role": "assistant",
                        "status": "completed",
                        "content": content,
                    }
                )
            elif isinstance(b, ServerToolBlock):
                items.append({"id": f"srv_{n:04d}", **_own(b, "responses").data})
            elif isinstance(b, ToolUseBlock):
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{n:04d}",
                        "call_id": self._tool_id(b),
                        "name": b.name,
                        "arguments": json.dumps(b.input),
                        "status": "completed",
                    }
                )
        return items

    def _response(self, r: Reply, model: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        reason = _INCOMPLETE_REASONS.get(r.stop_reason)
        return {
            "id": f"resp_{next(self._ids):04d}",
            "object": "response",
            "created_at": 1_760_000_000,
            "model": r.model or model,
            "status": "incomplete" if reason else "completed",
            "incomplete_details": {"reason": reason} if reason else None,
            "error": None,
            "output": items,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": self._usage(r.usage),
        }

    def _item_events(self, index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        """``output_item.added``, the item's deltas, ``output_item.done``."""
        kind = item["type"]
        if kind not in ("message", "function_call", "reasoning"):
            return self._server_item_events(index, item)
        opened = dict(item)
        base = {"output_index": index, "item_id": item["id"]}
        if kind == "message":
            opened["content"] = []
            name, text = "output_text", item["content"][0]["text"]
            extra: dict[str, Any] = {"content_index": 0, "logprobs": []}
        elif kind == "function_call":
            opened["arguments"] = ""
            name, text, extra = "function_call_arguments", item["arguments"], {}
        else:
            opened.update(summary=[], encrypted_content=None)
            name = "reasoning_summary_text"
            text, extra = "".join(s["text"] for s in item["summary"]), {"summary_index": 0}
        added = {"type": "response.output_item.added", "output_index": index, "item": opened}
        deltas = [
            {"type": f"response.{name}.delta", **base, **extra, "delta": p}
            for p in (_pieces(text, self.chunk_size) if text else ())
        ]
        opens, closes = self._part_events(kind, base, text, extra)
        done = {"type": "response.output_item.done", "output_index": index, "item": item}
        return [added, *opens, *deltas, *closes, done]

    @staticmethod
    def _server_item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        """A built-in tool's item as the API streams it: added in progress (without its
        action or results), its progress events, then done whole."""
        kind = item["type"]
        opened = {k: v for k, v in item.items() if k not in ("action", "results", "outputs")}
        opened["status"] = "in_progress"
        base = {"output_index": index, "item_id": item["id"]}
        steps = ("in_progress", "searching", "completed")
        if kind == "code_interpreter_call":
            steps = ("in_progress", "interpreting", "completed")
        return [
            {"type": "response.output_item.added", "output_index": index, "item": opened},
            *({"type": f"response.{kind}.{step}", **base} for step in steps),
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]

    @staticmethod
    def _part_events(
        kind: str, base: dict[str, Any], text: str, extra: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The part and ``.done`` events around an item's deltas, as the API sends them."""
        if kind == "function_call":
            return [], [
                {"type": "response.function_call_arguments.done", **base, "arguments": text}
            ]
        if kind == "message":
            part = {"type": "output_text", "annotations": [], "logprobs": []}
            at = {**base, "content_index": 0}
            return (
                [{"type": "response.content_part.added", **at, "part": {**part, "text": ""}}],
                [
                    {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
                    {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
                ],
            )
        if not text:
            return [], []
        at = {**base, **extra}
        part = {"type": "summary_text"}
        return (
            [{"type": "response.reasoning_summary_part.added", **at, "part": {**part, "text": ""}}],
            [
                {"type": "response.reasoning_summary_text.done", **at, "text": text},
                {
                    "type": "response.reasoning_summary_part.done",
                    **at,
                    "part": {**part, "text": text},
                },
            ],
        )

    def frames(self, r: Reply, model: str) -> list[bytes]:
        items = self._items(r)
        response = self._response(r, model, items)
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
        for index, item in enumerate(items):
            events += self._item_events(index, item)
        if r.incomplete_tool is not None:
            name, partial = r.incomplete_tool
            index, n = len(items), next(self._ids)
            call = {
                "type": "function_call",
                "id": f"fc_{n:04d}",
                "call_id": f"call_{n:04d}",
                "name": name,
                "arguments": "",
            }
            events += [
                {"type": "response.output_item.added", "output_index": index, "item": call},
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": index,
                    "item_id": call["id"],
                    "delta": partial,
                },
            ]
        end = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append({"type": end, "response": response})
        return [_sse(e["type"], {**e, "sequence_number": i}) for i, e in enumerate(events)]

    def message_json(self, r: Reply, model: str) -> dict[str, Any]:
        return self._response(r, model, self._items(r))

    def error_json(self, error_type: str, message: str) -> dict[str, Any]:
        kind = {"rate_limit_error": "rate_limit_exceeded"}.get(error_type, error_type)
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def error_frame(self, error_type: str, message: str) -> bytes:
        kind = {"overloaded_error": "server_error"}.get(error_type, error_type)
        return _sse(None, {"type": "error", "code": kind, "message": message, "param": None})

    def unindexed_frames(self, model: str) -> list[bytes]:
        """Argument deltas that name no output item."""
        frames = self.frames(reply(tool_call("lookup", {"query": "a long query"})), model)
        return [
            f.replace(b'"output_index":0,', b"") if b"arguments.delta" in f else f for f in frames
        ]

    def prompt_too_long(self) -> _Plan:
        body = {
            "error": {
                "message": "Your input exceeds the context window of this model. Please adjust "
                "your input and try again.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }
        return self._json(400, body)
