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
- ``notifications/tools/list_changed``: the server's tool list is read again, and
  ``on_tools_changed(server)`` is called. ``HarnessParams`` are frozen, so a run keeps the
  tool list it started with; the next run built from ``await server.tools()`` sees the new
  tools.

Tool results are text for the model: text blocks as they are, structured content as JSON
when no text block comes with it, and a bracketed note for each image, audio clip,
resource link and embedded resource (images and audio are not passed to the model: the
project's tool results carry text only). ``ToolCallResult.value`` holds the whole MCP
result as plain JSON (image data included) for the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import attrs

from innerloop._errors import ToolDefinitionError
from innerloop.tools._define import _NAME
from innerloop.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec

if TYPE_CHECKING:
    import mcp.types as mcp_types
    from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskGroup
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage

__all__ = ["MCPServer", "MCPServerError"]

_STDERR_TAIL = 2_000
"""Characters of a stdio server's stderr quoted when it exits or fails to start."""


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
    async def open(self, errlog: TextIO | None) -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command,
            args=list(self.args),
            env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd,
        )
        assert errlog is not None
        async with stdio_client(params, errlog=errlog) as (read, write):
            yield read, write


@attrs.frozen
class _HTTP:
    url: str
    headers: Mapping[str, str]

    def describe(self) -> str:
        return self.url

    @contextlib.asynccontextmanager
    async def open(self, errlog: TextIO | None) -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with (
            create_mcp_http_client(headers=dict(self.headers)) as client,
            streamable_http_client(self.url, http_client=client) as (read, write),
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


def _positive(field: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ToolDefinitionError(
            f"MCPServer {field} must be a positive number of seconds, got {value!r}"
        )


class MCPServer:
    """An MCP server whose tools the model may call. Build one with :meth:`stdio` or
    :meth:`http`.

    Options (both constructors): ``name`` (used in tool errors; default from the command
    or the URL); ``category`` (default ``network``) and ``timeout`` (seconds; default: the
    category's) for every tool, ``categories`` and ``timeouts`` per tool (keyed by the
    server's tool name); ``prefix`` put before every tool name and ``names`` renaming
    single tools (the model sees these names; the server is called with its own);
    ``connect_timeout`` (seconds for start-up and handshake); ``on_tools_changed``, called
    with the server after its tool list changed (``notifications/tools/list_changed``, or
    different tools after a restart).
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
    ) -> None:
        _import_mcp()
        _positive("timeout", timeout)
        _positive("connect_timeout", connect_timeout)
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
        self._conn: _Connection | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._listing: tuple[mcp_types.Tool, ...] | None = None
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
        names, categories and timeouts. Kept current by ``tools/list_changed``."""
        await self._connected()
        assert self._listing is not None
        return self._specs(self._listing)

    def _specs(self, listing: Iterable[mcp_types.Tool]) -> tuple[ToolSpec, ...]:
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
        for tool in listing:
            local = self.names.get(tool.name, self.prefix + tool.name)
            if not _NAME.match(local):
                raise ToolDefinitionError(
                    f"MCP server {self.name!r} offers a tool named {tool.name!r}; as {local!r} "
                    "it is not a valid tool name for the model (1-64 of a-z A-Z 0-9 _ -); "
                    f"rename it with names={{{tool.name!r}: ...}}"
                )
            specs.append(
                ToolSpec(
                    name=local,
                    description=tool.description
                    or tool.title
                    or f"Tool {tool.name} of the MCP server {self.name}.",
                    input_schema=tool.input_schema,
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
            raise MCPServerError(
                self.name,
                f"MCP server {self.name!r} refused the call to {tool!r}: {exc.message} "
                f"(JSON-RPC error {exc.code})",
            ) from exc
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            conn.mark_lost()
            raise MCPServerError(self.name, self._lost_message(conn, tool)) from exc
        return ToolOutput(
            render_mcp_result(result),
            is_error=result.is_error,
            value=result.model_dump(mode="json", by_alias=True, exclude_none=True),
        )

    def _lost_message(self, conn: _Connection, tool: str) -> str:
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
                    f"its handshake within {self.connect_timeout:g} s; check that it speaks MCP "
                    "on this transport, or raise connect_timeout" + _quoted(conn.stderr_tail()),
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
                read, write = await stack.enter_async_context(self._transport.open(conn.errlog))
                group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(group.cancel_scope.cancel)
                conn.group = group
                send, receive = anyio.create_memory_object_stream[Any](0)
                group.start_soon(_pump, read, send, conn)

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
                self._absorb(await _list_tools(session))
                conn.ready.set_result(None)
                await conn.finish.wait()
        except Exception as exc:
            if not conn.ready.done():
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
            conn.group.start_soon(self._refresh, conn)

    async def _refresh(self, conn: _Connection) -> None:
        if conn.session is None:
            return
        # a failed re-read keeps the list as it was; it must not end the connection
        with contextlib.suppress(Exception):
            self._absorb(await _list_tools(conn.session))

    def _absorb(self, listing: tuple[mcp_types.Tool, ...]) -> None:
        before = self._listing
        self._listing = listing
        self._seen.update(t.name for t in listing)
        if before is not None and _shape(before) != _shape(listing) and self.on_tools_changed:
            # on the loop, not here: an exception from the host's callback goes to the
            # loop's exception handler instead of ending the connection
            asyncio.get_running_loop().call_soon(self.on_tools_changed, self)


async def _pump(
    read: ObjectReceiveStream[SessionMessage | Exception],
    send: ObjectSendStream[SessionMessage | Exception],
    conn: _Connection,
) -> None:
    """Pass the transport's messages to the session; when the transport's stream ends (the
    server exited or dropped the connection), end the session's too and mark the
    connection lost."""
    try:
        async with send:
            async for item in read:
                await send.send(item)
    finally:
        conn.mark_lost()


async def _list_tools(session: ClientSession) -> tuple[mcp_types.Tool, ...]:
    import mcp_types

    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tuple(tools)


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
