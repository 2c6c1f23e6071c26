"""An MCP server for innerloop's tests, built on the SDK's ``MCPServer`` (FastMCP before
mcp 2). It serves streamable HTTP on an inherited listening socket (``--fd N``, so the test
picks a free loopback port with no race) or stdio (``--stdio``).

Tools: ``echo``; ``pid`` (this process's id, so a test can kill it); ``slow`` (sleeps, and
records its request id when it is cancelled); ``cancellations`` (the ids recorded so far,
each with whether the client's ``notifications/cancelled`` for it had arrived);
``picture``, ``link``, ``document`` and ``report`` (each content kind a tool result can
carry); ``fail``; ``add_tool`` (registers a new tool and sends
``notifications/tools/list_changed``).
"""

from __future__ import annotations

import argparse
import base64
import os
from typing import Any

import anyio
import mcp.types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

# the 1x1 transparent PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def build() -> MCPServer:
    server = MCPServer("innerloop-demo", log_level="ERROR")
    _add_call_tools(server)
    _add_content_tools(server)
    return server


def _add_call_tools(server: MCPServer) -> None:
    """Tools about the calls themselves: echo, pid, slow (records cancellations), fail,
    add_tool (changes the tool list)."""
    cancelled: list[dict[str, Any]] = []

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep for the given number of seconds."""
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            # the dispatch context's event is set by the client's notifications/cancelled
            outbound = getattr(ctx.session, "_request_outbound", None)
            notified = getattr(outbound, "cancel_requested", None)
            cancelled.append(
                {
                    "request_id": str(ctx.request_id),
                    "notified": notified is not None and notified.is_set(),
                }
            )
            raise
        return f"slept {seconds} s"

    @server.tool()
    def cancellations() -> list[dict[str, Any]]:
        """The calls of `slow` that were cancelled."""
        return list(cancelled)

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the reason given."""
        raise ToolError(reason)

    @server.tool()
    async def add_tool(name: str, ctx: Context) -> str:
        """Register a new tool called `name` and tell the client the tool list changed."""

        def added() -> str:
            return f"{name} works"

        server.add_tool(added, name=name, description=f"A tool added at run time: {name}.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"


def _add_content_tools(server: MCPServer) -> None:
    """Tools whose results carry images, links, embedded resources, structured content."""

    @server.tool()
    def picture() -> types.CallToolResult:
        """A caption and a one-pixel PNG."""
        return types.CallToolResult(
            content=[
                types.TextContent(text="a pixel:"),
                types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png"),
            ]
        )

    @server.tool()
    def link() -> types.CallToolResult:
        """A link to a resource."""
        return types.CallToolResult(
            content=[
                types.ResourceLink(
                    uri="file:///srv/report.pdf",
                    name="report.pdf",
                    mime_type="application/pdf",
                    description="the quarterly report",
                )
            ]
        )

    @server.tool()
    def document() -> types.CallToolResult:
        """An embedded text resource and an embedded binary one."""
        return types.CallToolResult(
            content=[
                types.EmbeddedResource(
                    resource=types.TextResourceContents(
                        uri="file:///srv/notes.txt", mime_type="text/plain", text="line one"
                    )
                ),
                types.EmbeddedResource(
                    resource=types.BlobResourceContents(
                        uri="file:///srv/blob.bin",
                        mime_type="application/octet-stream",
                        blob=base64.b64encode(b"\x00" * 10).decode(),
                    )
                ),
            ]
        )

    @server.tool()
    def report() -> types.CallToolResult:
        """Structured content only, no text."""
        return types.CallToolResult(content=[], structured_content={"total": 3, "unit": "km"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, help="serve streamable HTTP on this listening socket")
    parser.add_argument("--stdio", action="store_true", help="serve stdio")
    args = parser.parse_args()
    server = build()
    if args.stdio:
        server.run("stdio")
        return
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.Server(uvicorn.Config(app, fd=args.fd, log_level="warning")).run()


if __name__ == "__main__":
    main()
