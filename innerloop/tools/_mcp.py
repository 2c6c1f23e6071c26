"""MCP servers as tool sources, on the official ``mcp`` SDK (``pip install 'innerloop[mcp]'``).

``MCPServer.stdio(command, args)`` runs a server as a child process and talks to it over
its stdin/stdout; ``MCPServer.http(url)`` talks streamable HTTP. ``await server.tools()``
lists the server's tools as :class:`ToolSpec` objects that go into ``HarnessParams(tools=...)``
or a :class:`Toolset` like any other tool, with a category (default ``network``) and an
optional timeout, per server or per tool.

How a server's connection lives:

- One background task per connection enters the SDK's transport and session and leaves
  them (anyio context managers must be entered and left by the same task); tool calls,
  from any task of the same event loop, send their requests through that session.
- ``async with server:`` connects (starts the process, or opens the HTTP session), runs the
  ``initialize`` handshake and lists the tools; leaving the block closes the connection
  and stops the process. Without it the server connects at the first ``tools()`` or tool
  call, on the event loop running then: ``Harness.run_sync`` runs each run on a fresh
  loop, and the server reconnects on it (the connection of a finished loop ends with it).
- A timeout or an abort cancels the call's task; the SDK then sends the server
  ``notifications/cancelled`` for the request (``JSONRPCDispatcher.send_raw_request``
  writes it, shielded, when the awaiting task is cancelled), so the server can stop.
- A server that exits or drops the connection: the calls in flight come back as
  ``is_error`` results naming the server (with the end of its stderr), and the next call
  starts it again. Calls are never retried by the client: a tool may have done its work.
- ``notifications/tools/list_changed``: the server's tool list is read again (one
  re-read at a time and at most one waiting, each within ``connect_timeout`` and at least
  ``reread_seconds``, 1 s, after the last: a server that notifies after every listing
  costs one listing a second, not a busy loop), and ``on_tools_changed(server)`` is
  called. A run given the server in ``HarnessParams(tool_sources=[server])`` reads
  ``server.tools()`` before each turn and so offers the new list at its next turn (a
  re-read under way is waited for: over stdio, a change notified during a tool call
  arrives before the call's answer and is seen by the very next turn, unless the list was
  read less than ``reread_seconds`` before; over streamable HTTP the notification may
  travel on the session's own stream, and is seen at the first turn after it arrived);
  tools given in ``HarnessParams(tools=...)`` stay as they were, and the next run built
  from ``await server.tools()`` sees the new ones. A re-read that fails keeps the list as
  it was and logs a warning.
- A hostile or broken server is bounded: a listing reads at most ``max_pages`` pages and
  ``max_tools`` tools, a tool's input schema may take at most ``max_schema_bytes`` of
  JSON, and the schemas are checked in a worker thread (never on the event loop); the
  whole first listing, checks included, counts inside ``connect_timeout``.

Tool results are text for the model: text blocks as they are, structured content as JSON
when no text block comes with it, and a bracketed note for each image, audio clip,
resource link and embedded resource (images and audio are not passed to the model: the
project's tool results carry text only). ``ToolCallResult.value`` holds the whole MCP
result as plain JSON (image data included) for the host. A result nested deeper than
:data:`~innerloop._json.MAX_JSON_DEPTH` levels (whether the SDK could read it or not) is an
``is_error`` result saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shlex
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import attrs

from innerloop._errors import ToolDefinitionError
from innerloop._json import _TOKENS, MAX_JSON_DEPTH, JSONTooDeep, json_depth, parse_json
from innerloop.tools._define import _NAME
from innerloop.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from innerloop.tools._validate import ToolSchema, checked_schema

if TYPE_CHECKING:
    import mcp.types as mcp_types
    from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskGroup
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage

__all__ = ["MCPServer", "MCPServerError"]

_STDERR_TAIL = 2_000
"""Characters of a stdio server's stderr quoted when it exits or fails to start."""

MAX_PAGES = 100
"""Default ``MCPServer(max_pages=...)``: pages one listing of a server's tools may take."""

REREAD_SECONDS = 1.0
"""Default ``MCPServer(reread_seconds=...)``: the least time from one re-read of the tool
list (after ``tools/list_changed``) to the next: at most one re-read a second, and at most
one waiting, however often the server notifies."""

MAX_TOOLS = 1_000
"""Default ``MCPServer(max_tools=...)``: tools one server may offer."""

MAX_SCHEMA_BYTES = 64 * 1024
"""Default ``MCPServer(max_schema_bytes=...)``: bytes of JSON one tool's input schema may
take (checking a schema costs time in proportion to its size)."""

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Default ``MCPServer(max_message_bytes=...)``: bytes one message from the server may
take, counted before it is parsed (reading a message costs time in proportion to its size,
on the event loop: a page of 50,000 tools is about 5 MB)."""

TOO_DEEP = -32099
"""The JSON-RPC error code given to a call whose response was too deeply nested to read."""

_log = logging.getLogger(__name__)


class MCPServerError(ToolError):
    """An MCP server could not be started or reached, or it ended during a call. Inside a
    run it becomes the call's ``is_error`` result; from ``tools()`` it is raised."""

    def __init__(self, server: str, message: str) -> None:
        self.server = server
        super().__init__(message)


def _import_mcp() -> None:
    """Import the SDK now, at construction: importing it takes about a second of CPU,
    which inside a running loop would stall every other task on it."""
    try:
        import mcp.client.stdio
        import mcp.client.streamable_http  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the dev environment has it
        raise ImportError(
            "MCPServer needs the mcp package; install it with pip install 'innerloop[mcp]'"
        ) from exc


# -- transports ----------------------------------------------------------------------------


@attrs.frozen
class _Stdio:
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | None

    def describe(self) -> str:
        return shlex.join((self.command, *self.args))

    @contextlib.asynccontextmanager
    async def open(self, errlog: TextIO | None, limit: int) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK's stdio transport, but for reading: each line of the server's stdout is
        parsed only once whole and not longer than ``limit`` bytes (the SDK's reader parses
        whatever comes, on the event loop). The process is started and stopped by the
        SDK's own helpers (its process tree, on every platform)."""
        import anyio
        from mcp.client import stdio as sdk

        assert errlog is not None
        command = await sdk._get_executable_command(self.command)
        process = await sdk._create_platform_compatible_process(
            command=command,
            args=list(self.args),
            env=sdk.get_default_environment() | dict(self.env or {}),
            errlog=errlog,
            cwd=self.cwd,
        )
        # no await until the task group is entered: a cancellation then would leak it
        read_writer, read = anyio.create_memory_object_stream[Any](0)
        write, write_reader = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as group:
            group.start_soon(_read_lines, process, read_writer, limit)
            group.start_soon(_write_lines, process, write_reader, read_writer)
            try:
                yield read, write
            finally:
                with anyio.CancelScope(shield=True):
                    read.close()
                    write.close()
                    await sdk._stop_server_process(process)
                    for stream in (read, write, read_writer, write_reader):
                        await stream.aclose()
                group.cancel_scope.cancel()


@attrs.frozen
class _HTTP:
    url: str
    headers: Mapping[str, str]

    def describe(self) -> str:
        return self.url

    @contextlib.asynccontextmanager
    async def open(self, errlog: TextIO | None, limit: int) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK's streamable HTTP transport, reading no more than ``limit`` bytes of
        one message: of a JSON response's body, of one server-sent event."""
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        async with (
            httpx2.AsyncClient(
                headers=dict(self.headers),
                timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
                transport=_capped_transport(limit),
            ) as client,
            streamable_http_client(self.url, http_client=client, max_sse_event_size=limit) as (
                read,
                write,
            ),
        ):
            yield read, write


# -- one connection --------------------------------------------------------------------------


class _Connection:
    """One connection to the server, owned by its background task on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, errlog: TextIO | None) -> None:
        self.loop = loop
        self.errlog = errlog
        self.ready: asyncio.Future[None] = loop.create_future()
        self.ready.add_done_callback(_retrieve)
        self.finish = asyncio.Event()
        """Set to end the connection (closing, or the server went away)."""
        self.lost = False
        """The server went away: the next call reconnects."""
        self.session: ClientSession | None = None
        self.group: TaskGroup | None = None
        self.task: asyncio.Task[None] | None = None
        self.last_stderr = ""
        self.refusal: str | None = None
        """Why the connection was ended on this side (a message over the size limit)."""
        self.refreshing = False
        """A re-read of the tool list is under way."""
        self.refresh_again = False
        """``tools/list_changed`` came during the re-read: read once more after it."""
        self.settled = asyncio.Event()
        """Set while no re-read of the tool list is under way."""
        self.settled.set()
        self.last_reread = -math.inf
        """When the last re-read of the tool list started (the loop's clock)."""

    def mark_lost(self) -> None:
        self.lost = True
        self.finish.set()

    def stderr_tail(self) -> str:
        if self.errlog is None or self.errlog.closed:
            return self.last_stderr
        try:
            fd = self.errlog.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, _STDERR_TAIL, max(0, size - _STDERR_TAIL))
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", "replace").strip()

    async def stop(self) -> None:
        """End the connection and wait until its transport is closed (process stopped)."""
        self.finish.set()
        if self.task is not None:
            if not self.ready.done():
                self.task.cancel()  # still starting: it waits on the server, not on finish
            await asyncio.wait([self.task])
        self.close_errlog()

    def close_errlog(self) -> None:
        """Close the stderr file, keeping its tail for the messages still to come."""
        if self.errlog is not None and not self.errlog.closed:
            self.last_stderr = self.stderr_tail()
            self.errlog.close()


# -- the server --------------------------------------------------------------------------------


@attrs.frozen
class _RemoteTool:
    """A ToolSpec handler: call ``name`` on ``server``."""

    server: MCPServer
    name: str

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self.server.call(self.name, args)

    def __repr__(self) -> str:
        return f"<MCP tool {self.name!r} of {self.server.name!r}>"


def _positive(field: str, value: float | None, unit: str = "number of seconds") -> None:
    if value is not None and not value > 0:
        raise ToolDefinitionError(f"MCPServer {field} must be a positive {unit}, got {value!r}")


@attrs.frozen
class _Listing:
    """A server's tools as listed, each input schema checked (or the error to raise)."""

    tools: tuple[mcp_types.Tool, ...]
    schemas: Mapping[str, ToolSchema | ToolDefinitionError]


class MCPServer:
    """An MCP server whose tools the model may call. Build one with :meth:`stdio` or
    :meth:`http`.

    Options (both constructors): ``name`` (used in tool errors; default from the command
    or the URL); ``category`` (default ``network``) and ``timeout`` (seconds; default: the
    category's) for every tool, ``categories`` and ``timeouts`` per tool (keyed by the
    server's tool name); ``prefix`` put before every tool name and ``names`` renaming
    single tools (the model sees these names; the server is called with its own);
    ``connect_timeout`` (seconds for start-up, handshake and listing the tools, and for
    each re-read of the list); ``on_tools_changed``, called with the server after its tool
    list changed (``notifications/tools/list_changed``, or different tools after a
    restart); ``reread_seconds`` (default :data:`REREAD_SECONDS`), the least time between
    two re-reads of the list after ``tools/list_changed`` (notices meanwhile wait as one
    re-read, so a server that notifies after every listing costs one listing a second);
    ``max_pages`` (default :data:`MAX_PAGES`), ``max_tools`` (default
    :data:`MAX_TOOLS`) and ``max_schema_bytes`` (default :data:`MAX_SCHEMA_BYTES`), the
    bounds of a listing; ``max_message_bytes`` (default :data:`MAX_MESSAGE_BYTES`), the
    bytes one message from the server may take, counted before it is parsed: a longer one
    is not read, and ends the connection (:class:`MCPServerError` naming the setting).
    """

    def __init__(
        self,
        transport: _Stdio | _HTTP,
        *,
        name: str,
        category: str = "network",
        timeout: float | None = None,
        categories: Mapping[str, str] | None = None,
        timeouts: Mapping[str, float] | None = None,
        prefix: str = "",
        names: Mapping[str, str] | None = None,
        connect_timeout: float = 30.0,
        on_tools_changed: Callable[[MCPServer], object] | None = None,
        max_pages: int = MAX_PAGES,
        max_tools: int = MAX_TOOLS,
        max_schema_bytes: int = MAX_SCHEMA_BYTES,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        reread_seconds: float = REREAD_SECONDS,
    ) -> None:
        _import_mcp()
        _positive("timeout", timeout)
        _positive("connect_timeout", connect_timeout)
        _positive("reread_seconds", reread_seconds)
        for field, count in (
            ("max_pages", max_pages),
            ("max_tools", max_tools),
            ("max_schema_bytes", max_schema_bytes),
            ("max_message_bytes", max_message_bytes),
        ):
            if not isinstance(count, int) or isinstance(count, bool):
                raise ToolDefinitionError(f"MCPServer {field} must be an int, got {count!r}")
            _positive(field, count, "count")
        for tool_name, value in (timeouts or {}).items():
            _positive(f"timeouts[{tool_name!r}]", value)
        self._transport = transport
        self.name = name
        self.category = category
        self.timeout = timeout
        self.categories: Mapping[str, str] = dict(categories or {})
        self.timeouts: Mapping[str, float] = dict(timeouts or {})
        self.prefix = prefix
        self.names: Mapping[str, str] = dict(names or {})
        self.connect_timeout = connect_timeout
        self.on_tools_changed = on_tools_changed
        self.max_pages = max_pages
        self.max_tools = max_tools
        self.max_schema_bytes = max_schema_bytes
        self.max_message_bytes = max_message_bytes
        self.reread_seconds = reread_seconds
        self._conn: _Connection | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._listing: _Listing | None = None
        self._seen: set[str] = set()

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server run as ``command args...``, talking MCP over its stdin and stdout. Its
        environment is the SDK's safe default (``PATH``, ``HOME``, ...) plus ``env``; its
        stderr is kept and quoted when it fails."""
        if isinstance(args, str):
            raise ToolDefinitionError(
                f"MCPServer.stdio args must be a list of arguments, got the string {args!r}; "
                f"write args={shlex.split(args)!r}"
            )
        transport = _Stdio(command, tuple(args), env, str(cwd) if cwd is not None else None)
        return cls(transport, name=name or _stdio_name(command, args), **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server at ``url`` (its streamable HTTP endpoint, often ending in ``/mcp``);
        ``headers`` go with every request (e.g. ``Authorization``)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolDefinitionError(
                f"MCPServer.http needs an http:// or https:// URL, got {url!r} "
                "(for a local command use MCPServer.stdio)"
            )
        return cls(_HTTP(url, dict(headers or {})), name=name or parts.netloc, **options)

    def __repr__(self) -> str:
        state = "connected" if self._conn is not None and not self._conn.lost else "idle"
        return f"<MCPServer {self.name!r} {self._transport.describe()} ({state})>"

    # -- lifecycle

    async def __aenter__(self) -> MCPServer:
        await self._connected()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process is stopped). A later call
        connects again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await _drop(conn)

    async def tools(self) -> tuple[ToolSpec, ...]:
        """The server's tools as specs (connecting first if needed), with this server's
        names, categories and timeouts. Kept current by ``tools/list_changed``: a re-read
        under way is waited for (each within ``connect_timeout``)."""
        conn = await self._connected()
        await conn.settled.wait()
        assert self._listing is not None
        return self._specs(self._listing)

    async def refresh(self) -> tuple[ToolSpec, ...]:
        """Read the server's tool list again now (connecting first if needed), within
        ``connect_timeout``, and return the tools as :meth:`tools` does. Raises
        :class:`MCPServerError` when the listing breaks a bound or takes too long (the
        list stays as it was)."""
        conn = await self._connected()
        await self._reread(conn)
        return await self.tools()

    def _specs(self, listing: _Listing) -> tuple[ToolSpec, ...]:
        for option, keys in (
            ("categories", self.categories),
            ("timeouts", self.timeouts),
            ("names", self.names),
        ):
            unknown = sorted(set(keys) - self._seen)
            if unknown:
                raise ToolDefinitionError(
                    f"MCPServer {self.name!r}: {option} names {', '.join(map(repr, unknown))}, "
                    f"which the server does not offer; its tools: {', '.join(sorted(self._seen))}"
                )
        specs: list[ToolSpec] = []
        for tool in listing.tools:
            local = self.names.get(tool.name, self.prefix + tool.name)
            if not _NAME.match(local):
                raise ToolDefinitionError(
                    f"MCP server {self.name!r} offers a tool named {tool.name!r}; as {local!r} "
                    "it is not a valid tool name for the model (1-64 of a-z A-Z 0-9 _ -); "
                    f"rename it with names={{{tool.name!r}: ...}}"
                )
            schema = listing.schemas[tool.name]
            if isinstance(schema, ToolDefinitionError):
                raise schema
            specs.append(
                ToolSpec(
                    name=local,
                    description=tool.description
                    or tool.title
                    or f"Tool {tool.name} of the MCP server {self.name}.",
                    input_schema=schema,
                    handler=_RemoteTool(self, tool.name),
                    category=self.categories.get(tool.name, self.category),
                    timeout=self.timeouts.get(tool.name, self.timeout),
                )
            )
        return tuple(specs)

    # -- calls

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        """Call the server's tool ``tool`` (its own name, without ``prefix``). Raises
        :class:`MCPServerError` when the server cannot be reached or ends during the call
        or refuses it; a tool's own failure is an ``is_error`` output."""
        import anyio
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

        conn = await self._connected()
        assert conn.session is not None
        try:
            result = await conn.session.call_tool(tool, dict(arguments))
        except MCPError as exc:
            lost = exc.code == CONNECTION_CLOSED or (
                exc.code == INVALID_REQUEST and exc.message == "Session terminated"
            )
            if lost or conn.lost:
                conn.mark_lost()
                raise MCPServerError(self.name, self._lost_message(conn, tool)) from exc
            if exc.code == TOO_DEEP:
                return self._too_deep(tool)
            raise MCPServerError(
                self.name,
                f"MCP server {self.name!r} refused the call to {tool!r}: {exc.message} "
                f"(JSON-RPC error {exc.code})",
            ) from exc
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            conn.mark_lost()
            raise MCPServerError(self.name, self._lost_message(conn, tool)) from exc
        if json_depth(result.structured_content) > MAX_JSON_DEPTH:
            return self._too_deep(tool)
        return ToolOutput(
            render_mcp_result(result),
            is_error=result.is_error,
            value=result.model_dump(mode="json", by_alias=True, exclude_none=True),
        )

    def _too_deep(self, tool: str) -> ToolOutput:
        return ToolOutput(
            f"MCP server {self.name!r} answered the call to {tool!r} with a result nested "
            f"deeper than {MAX_JSON_DEPTH} levels of arrays and objects; it was not read "
            "(ask for less, or fix the server)",
            is_error=True,
        )

    def _too_large(self) -> str:
        limit = self.max_message_bytes
        return (
            f"MCP server {self.name!r} sent a message of more than {limit:,} bytes "
            f"(max_message_bytes={limit:,}); it was not read and the connection was closed; "
            "raise MCPServer(max_message_bytes=...) to accept it"
        )

    def _lost_message(self, conn: _Connection, tool: str) -> str:
        if conn.refusal is not None:
            return f"{conn.refusal} (during the call to {tool!r})"
        if isinstance(self._transport, _Stdio):
            what, then = "exited", "it will be started again at the next call"
        else:
            what, then = "closed the connection", "the next call connects again"
        message = f"MCP server {self.name!r} {what} during the call to {tool!r}; {then}"
        return message + _quoted(conn.stderr_tail())

    # -- the connection

    async def _connected(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = self._conn
        if conn is not None and conn.loop is loop and not conn.lost and conn.ready.done():
            if conn.ready.exception() is None:
                return conn
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        async with self._lock[1]:
            conn = self._conn
            if conn is None or conn.loop is not loop or conn.lost or _failed(conn.ready):
                if conn is not None:
                    await _drop(conn)
                conn = self._conn = self._start(loop)
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await asyncio.shield(conn.ready)
            except TimeoutError:
                self._conn = None
                await _drop(conn)
                raise MCPServerError(
                    self.name,
                    f"MCP server {self.name!r} ({self._transport.describe()}) did not finish "
                    f"its handshake and tool listing within {self.connect_timeout:g} s; check "
                    "that it speaks MCP on this transport, or raise connect_timeout"
                    + _quoted(conn.stderr_tail()),
                ) from None
            except MCPServerError:
                self._conn = None
                await _drop(conn)
                raise
            return conn

    def _start(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        errlog = None
        if isinstance(self._transport, _Stdio):
            # closed when the connection's task ends (or by _drop, if its loop closed first)
            errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        conn = _Connection(loop, errlog)
        conn.task = loop.create_task(self._serve(conn), name=f"MCP server {self.name}")
        return conn

    async def _serve(self, conn: _Connection) -> None:
        """The connection's task: enter the transport and the session, list the tools,
        wait until the connection is to end, leave them (in this same task)."""
        import anyio
        from mcp import ClientSession
        from mcp_types import Implementation

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(
                    self._transport.open(conn.errlog, self.max_message_bytes)
                )
                group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(group.cancel_scope.cancel)
                conn.group = group
                send, receive = anyio.create_memory_object_stream[Any](0)
                group.start_soon(_pump, read, send, conn, self._too_large)

                async def on_message(message: Any) -> None:
                    self._on_message(conn, message)

                session = await stack.enter_async_context(
                    ClientSession(
                        receive,
                        write,
                        message_handler=on_message,
                        client_info=Implementation(name="innerloop", version="0.1.0"),
                    )
                )
                await session.initialize()
                conn.session = session
                self._absorb(await self._read_listing(session))
                conn.ready.set_result(None)
                await conn.finish.wait()
        except Exception as exc:
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # type: ignore[assignment]
            if not conn.ready.done():
                if conn.refusal is not None:
                    conn.ready.set_exception(MCPServerError(self.name, conn.refusal))
                elif isinstance(exc, MCPServerError | ToolDefinitionError):
                    conn.ready.set_exception(exc)  # a listing out of bounds: as it is
                else:
                    conn.ready.set_exception(self._start_error(conn, exc))
        finally:
            conn.lost = True
            conn.close_errlog()  # the transport is closed: the process is gone
            if not conn.ready.done():
                conn.ready.set_exception(
                    MCPServerError(self.name, f"MCP server {self.name!r}: connecting was cancelled")
                )

    def _start_error(self, conn: _Connection, exc: BaseException) -> MCPServerError:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        what = self._transport.describe()
        if isinstance(exc, FileNotFoundError) and isinstance(self._transport, _Stdio):
            fix = f"check that {self._transport.command!r} is installed and on PATH"
        elif isinstance(self._transport, _Stdio):
            fix = "run the command by hand to see why it stops"
        else:
            fix = "check that the server runs and that the URL is its MCP endpoint"
        verb = "started" if isinstance(self._transport, _Stdio) else "reached"
        return MCPServerError(
            self.name,
            f"MCP server {self.name!r} ({what}) could not be {verb}: "
            f"{type(exc).__name__}: {exc}; {fix}" + _quoted(conn.stderr_tail()),
        )

    def _on_message(self, conn: _Connection, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification) and conn.group is not None:
            if conn.refreshing:
                conn.refresh_again = True  # one re-read at a time; one more after it
            else:
                conn.refreshing = True
                if self._reread_wait(conn) <= 0:  # read at once: the next turn waits for it
                    conn.settled.clear()
                conn.group.start_soon(self._refresh, conn)

    def _reread_wait(self, conn: _Connection) -> float:
        return conn.last_reread + self.reread_seconds - conn.loop.time()

    async def _refresh(self, conn: _Connection) -> None:
        """Re-read the list after ``tools/list_changed`` (again if another came meanwhile),
        each at least ``reread_seconds`` after the last (meanwhile :meth:`tools` gives the
        list as last read); a failed re-read keeps the list as it was and must not end the
        connection."""
        try:
            while True:
                wait = self._reread_wait(conn)
                if wait > 0:
                    await asyncio.sleep(wait)
                conn.refresh_again = False
                conn.settled.clear()
                conn.last_reread = conn.loop.time()
                try:
                    await self._reread(conn)
                except Exception as exc:
                    _log.warning("%s", exc)
                conn.settled.set()
                if not conn.refresh_again:
                    return
        finally:
            conn.refreshing = False
            conn.settled.set()

    async def _reread(self, conn: _Connection) -> None:
        assert conn.session is not None
        try:
            async with asyncio.timeout(self.connect_timeout):
                listing = await self._read_listing(conn.session)
        except TimeoutError:
            raise MCPServerError(
                self.name,
                f"MCP server {self.name!r}: reading its tool list again took more than "
                f"{self.connect_timeout:g} s; the list stays as it was (raise connect_timeout "
                "if the server is slow)",
            ) from None
        except (MCPServerError, ToolDefinitionError) as exc:
            raise MCPServerError(self.name, f"{exc} (the tool list stays as it was)") from None
        except Exception:
            if conn.refusal is None:
                raise
            raise MCPServerError(
                self.name, f"{conn.refusal} (the tool list stays as it was)"
            ) from None
        self._absorb(listing)

    async def _read_listing(self, session: ClientSession) -> _Listing:
        """The server's tools, within ``max_pages`` and ``max_tools``, each input schema
        checked in a worker thread."""
        import mcp_types

        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(self.max_pages):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools += page.tools
            if len(tools) > self.max_tools:
                raise MCPServerError(
                    self.name,
                    f"MCP server {self.name!r} offers more than {self.max_tools:,} tools; "
                    "raise MCPServer(max_tools=...) if you want them all",
                )
            cursor = page.next_cursor
            if not cursor:
                schemas = await asyncio.to_thread(self._check_schemas, tools)
                return _Listing(tuple(tools), schemas)
        raise MCPServerError(
            self.name,
            f"MCP server {self.name!r} lists its tools in more than {self.max_pages:,} pages "
            "(it may page forever); raise MCPServer(max_pages=...) if it really has that many",
        )

    def _check_schemas(
        self, tools: Iterable[mcp_types.Tool]
    ) -> dict[str, ToolSchema | ToolDefinitionError]:
        """Each tool's input schema checked (run in a worker thread: a schema's check
        costs time in proportion to its size)."""
        checked: dict[str, ToolSchema | ToolDefinitionError] = {}
        for tool in tools:
            where = f"MCP server {self.name!r}, tool {tool.name!r}"
            if json_depth(tool.input_schema) > MAX_JSON_DEPTH:
                checked[tool.name] = ToolDefinitionError(
                    f"{where}: its input schema is nested deeper than {MAX_JSON_DEPTH} levels "
                    "of arrays and objects; it cannot be checked"
                )
                continue
            size = len(json.dumps(tool.input_schema))
            if size > self.max_schema_bytes:
                checked[tool.name] = ToolDefinitionError(
                    f"{where}: its input schema takes {size:,} bytes of JSON, more than "
                    f"max_schema_bytes={self.max_schema_bytes:,}; raise "
                    "MCPServer(max_schema_bytes=...) to accept it"
                )
                continue
            try:
                checked[tool.name] = checked_schema(tool.input_schema, where)
            except ToolDefinitionError as exc:
                checked[tool.name] = exc
        return checked

    def _absorb(self, listing: _Listing) -> None:
        before = self._listing
        self._listing = listing
        self._seen.update(t.name for t in listing.tools)
        if (
            before is not None
            and _shape(before.tools) != _shape(listing.tools)
            and self.on_tools_changed
        ):
            # on the loop, not here: an exception from the host's callback goes to the
            # loop's exception handler instead of ending the connection
            asyncio.get_running_loop().call_soon(self.on_tools_changed, self)


class _TooLarge(Exception):
    """A message from the server over ``max_message_bytes``, not read."""


async def _pump(
    read: ObjectReceiveStream[SessionMessage | Exception],
    send: ObjectSendStream[SessionMessage | Exception],
    conn: _Connection,
    too_large: Callable[[], str],
) -> None:
    """Pass the transport's messages to the session; when the transport's stream ends (the
    server exited or dropped the connection), end the session's too and mark the
    connection lost. A response the transport could not read because it is nested too
    deep becomes a :data:`TOO_DEEP` error for its request (else that call would wait
    forever); a message over the size limit ends the connection, saying so
    (``too_large()``)."""
    try:
        async with send:
            async for item in read:
                if _is_too_large(item):
                    conn.refusal = too_large()
                    return
                if isinstance(item, Exception):
                    item = _too_deep_response(item) or item
                await send.send(item)
    finally:
        conn.mark_lost()


def _is_too_large(item: object) -> bool:
    """The stdio reader's :class:`_TooLarge`, or the HTTP transport's error response for a
    body or an event over the limit."""
    if isinstance(item, _TooLarge):
        return True
    error = getattr(getattr(item, "message", None), "error", None)
    text = str(getattr(error, "message", ""))
    return _TooLarge.__name__ in text or "Server-sent event exceeded the" in text


async def _read_lines(process: Any, send: ObjectSendStream[Any], limit: int) -> None:
    """Each line of ``process``'s stdout as the SDK's stdio reader gives it (a
    ``SessionMessage``, or the exception parsing it raised), parsed once whole; a line of
    more than ``limit`` bytes is not parsed: :class:`_TooLarge`, and reading ends."""
    import anyio
    from mcp.client import stdio as sdk

    parts: list[bytes] = []
    size = 0
    try:
        async with send:
            async for chunk in process.stdout:
                *whole, rest = chunk.split(b"\n")
                for piece in whole:
                    size += len(piece)
                    if size > limit:
                        await send.send(_TooLarge(limit))
                        return
                    line = b"".join((*parts, piece))
                    parts, size = [], 0
                    if line.strip():
                        await send.send(_parse_line(line))
                size += len(rest)
                if size > limit:
                    await send.send(_TooLarge(limit))
                    return
                if rest:
                    parts.append(rest)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
        pass  # the session is gone, or the server: the stream's end says so
    finally:
        await sdk._drain_stdout(process)  # a server writing on must not block on a full pipe


def _parse_line(line: bytes) -> Any:
    from mcp.client import stdio as sdk

    try:
        return sdk._parse_line(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return exc


async def _write_lines(
    process: Any, receive: ObjectReceiveStream[Any], read_writer: ObjectSendStream[Any]
) -> None:
    """Each message the session sends, one JSON line on ``process``'s stdin (as the SDK
    writes them); a server that cannot be written to ends the session's reading."""
    import anyio

    try:
        async with receive:
            async for message in receive:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((text + "\n").encode("utf-8"))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await read_writer.aclose()


def _capped_transport(limit: int) -> Any:
    """An HTTP transport whose JSON response bodies may take at most ``limit`` bytes: past
    it, reading stops with an error the SDK turns into the request's error response."""
    import httpx2

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for chunk in self.stream:
                size += len(chunk)
                if size > limit:
                    raise httpx2.StreamError(f"{_TooLarge.__name__}: over {limit} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Transport(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            if response.headers.get("content-type", "").startswith("application/json"):
                response.stream = Capped(response.stream)
            return response

    return Transport()


_ID_VALUE = re.compile(r'\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def _too_deep_response(exc: Exception) -> SessionMessage | None:
    """For a message the transport could not read, when it is JSON nested too deep: an
    error response to the request it answers (its top-level ``id``), else None."""
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError) or not exc.errors():
        return None
    line = exc.errors()[0].get("input")
    if not isinstance(line, str):
        return None
    try:
        parse_json(line)
    except JSONTooDeep:
        pass
    except ValueError:
        return None
    else:
        return None
    depth = 0
    for match in _TOKENS.finditer(line):
        token = match.group()
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
        elif depth == 1 and token == '"id"' and (value := _ID_VALUE.match(line, match.end())):
            error = ErrorData(code=TOO_DEEP, message="response nested too deep")
            return SessionMessage(JSONRPCError(jsonrpc="2.0", id=json.loads(value[1]), error=error))
    return None


async def _drop(conn: _Connection) -> None:
    """End ``conn``: here if it belongs to the running loop, else on its own loop (if that
    loop still runs; a closed loop ended the connection's task itself)."""
    if conn.loop is asyncio.get_running_loop():
        await conn.stop()
    elif conn.loop.is_closed():
        conn.close_errlog()
    else:
        with contextlib.suppress(RuntimeError):
            conn.loop.call_soon_threadsafe(conn.finish.set)


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a failed start as seen (the error is raised to whoever waits for it)."""
    if not future.cancelled():
        future.exception()


def _failed(future: asyncio.Future[None]) -> bool:
    return future.done() and future.exception() is not None


def _shape(listing: Iterable[mcp_types.Tool]) -> list[tuple[str, str]]:
    return [(t.name, json.dumps(t.input_schema, sort_keys=True)) for t in listing]


def _quoted(tail: str) -> str:
    return f"\nits stderr ended with:\n{tail}" if tail else ""


def _stdio_name(command: str, args: Sequence[str]) -> str:
    """``python -m pkg`` is ``pkg``; anything else is the command's file name."""
    args = list(args)
    if "-m" in args and args.index("-m") + 1 < len(args):
        return args[args.index("-m") + 1]
    return Path(command).name


# -- results -----------------------------------------------------------------------------------


def _b64_size(data: str) -> int:
    data = "".join(data.split())
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


def render_mcp_result(result: mcp_types.CallToolResult) -> str:
    """The text the model sees for an MCP tool result: text blocks as they are; the
    structured content as JSON when no text block comes with it; for images and audio
    (which tool results here cannot carry), resource links and embedded resources, a
    bracketed note naming what it is."""
    import mcp_types

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            parts.append(
                f"[{kind}: {block.mime_type}, {_b64_size(block.data):,} bytes; not shown: "
                "tool results carry text only]"
            )
        elif isinstance(block, mcp_types.ResourceLink):
            about = f", {block.mime_type}" if block.mime_type else ""
            about += f": {block.description}" if block.description else ""
            parts.append(f"[resource link: {block.name} <{block.uri}>{about}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            mime = res.mime_type or "unknown type"
            if isinstance(res, mcp_types.TextResourceContents):
                parts.append(f"[resource <{res.uri}>, {mime}]\n{res.text}")
            else:
                parts.append(
                    f"[resource <{res.uri}>, {mime}, {_b64_size(res.blob):,} bytes of binary "
                    "data; not shown]"
                )
    has_text = any(isinstance(b, mcp_types.TextContent) for b in result.content)
    if result.structured_content is not None and not has_text:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
