"""MCP servers as tool sources, against real servers: the third-party ``mcp-server-time``
over stdio, and the SDK's ``MCPServer`` (FastMCP) test server in ``mcp_servers/demo.py``
over streamable HTTP and stdio, started in subprocesses. Full runs go through the
scripted provider."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, HarnessState, ToolDefinitionError, ToolResultBlock
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.tools import MCPServer, MCPServerError, ToolOutput, Toolset, tool

DEMO = str(Path(__file__).parent / "mcp_servers" / "demo.py")
HOSTILE = str(Path(__file__).parent / "mcp_servers" / "hostile.py")
TIME_ARGS = ["-m", "mcp_server_time", "--local-timezone", "UTC"]


def time_server(**options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, TIME_ARGS, **options)


def demo_stdio(**options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, [DEMO, "--stdio"], name="demo", **options)


def results(state: HarnessState) -> list[ToolResultBlock]:
    return [b for m in state.history for b in m.content if isinstance(b, ToolResultBlock)]


async def run(tools: Any, *steps: Any) -> HarnessState:
    """A full run whose model makes the scripted ``steps`` then says done."""
    provider = ScriptedProvider([*steps, reply("done")])
    params = HarnessParams(model="scripted:m", tools=tuple(tools))
    return await Harness(params, [provider]).run("go")


def start_demo(port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    """The demo server on streamable HTTP, on a listening socket it inherits (port 0: a
    free loopback port, no race)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        proc = subprocess.Popen(
            [sys.executable, DEMO, "--fd", str(sock.fileno())], pass_fds=(sock.fileno(),)
        )
        return proc, sock.getsockname()[1]


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    """The URL of a demo server shared by the module's tests; killed at the end."""
    proc, port = start_demo()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def children(marker: str) -> list[int]:
    """Live child processes of this one whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and marker in cmdline:
            found.append(int(entry.name))
    return found


class TestTimeServerOverStdio:
    def test_full_run_converts_a_time(self) -> None:
        """The model calls the third-party server's convert_time; its answer comes back
        as the tool result, and the tools carry the network category."""

        async def main() -> tuple[HarnessState, list[Any]]:
            async with time_server() as server:
                tools = await server.tools()
                args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
                return await run(tools, reply(tool_call("convert_time", args))), list(tools)

        state, tools = asyncio.run(main())
        assert [(t.name, t.category, t.timeout) for t in tools] == [
            ("get_current_time", "network", None),
            ("convert_time", "network", None),
        ]
        assert state.exit_reason == "model_complete"
        [result] = results(state)
        assert not result.is_error
        data = json.loads(result.content)
        assert data["target"]["timezone"] == "Asia/Tokyo"
        assert data["target"]["datetime"].endswith("T21:00:00+09:00")
        assert data["time_difference"] == "+9.0h"

    def test_run_sync_connects_on_its_own_loop(self) -> None:
        """Tools listed on one event loop work in run_sync's fresh loop: the server
        connects again at the first call; its own error comes back as is_error."""
        server = time_server()
        tools = asyncio.run(server.tools())
        provider = ScriptedProvider(
            [
                reply(tool_call("get_current_time", {"timezone": "Europe/Lisbon"})),
                reply(tool_call("get_current_time", {"timezone": "Nowhere/Atlantis"})),
                reply("done"),
            ]
        )
        state = Harness(HarnessParams(model="scripted:m", tools=tools), [provider]).run_sync("go")
        ok, bad = results(state)
        assert json.loads(ok.content)["timezone"] == "Europe/Lisbon"
        assert not ok.is_error
        assert bad.is_error
        assert bad.content == (
            "Error executing tool get_current_time: Invalid timezone: "
            "'No time zone found with key Nowhere/Atlantis'"
        )
        assert children("mcp_server_time") == []

    def test_killed_server_is_started_again(self) -> None:
        """After the server process is killed, the next call starts a new one."""

        async def main() -> tuple[int, list[int], HarnessState]:
            async with time_server() as server:
                [pid] = children("mcp_server_time")
                os.kill(pid, signal.SIGKILL)
                await wait_for(lambda: pid not in children("mcp_server_time"))
                await asyncio.sleep(0.1)  # the client sees the pipe close
                state = await run(
                    await server.tools(),
                    reply(tool_call("get_current_time", {"timezone": "UTC"})),
                )
                return pid, children("mcp_server_time"), state

        pid, now, state = asyncio.run(main())
        [result] = results(state)
        assert not result.is_error
        assert json.loads(result.content)["timezone"] == "UTC"
        assert len(now) == 1
        assert now[0] != pid
        assert children("mcp_server_time") == []


async def wait_for(condition: Any, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


class TestCrash:
    def test_server_killed_during_a_call(self) -> None:
        """A stdio server killed mid-call gives that call an is_error result naming the
        server; the model's next call runs on a new process."""

        async def main() -> tuple[int, HarnessState]:
            async with demo_stdio() as server:
                pid = (await server.call("pid", {})).value["structuredContent"]["result"]
                asyncio.get_running_loop().call_later(1.0, os.kill, pid, signal.SIGKILL)
                state = await run(
                    await server.tools(),
                    reply(tool_call("slow", {"seconds": 30})),
                    reply(tool_call("pid")),
                )
                return pid, state

        pid, state = asyncio.run(main())
        crashed, after = results(state)
        assert crashed.is_error
        assert crashed.content == (
            "MCP server 'demo' exited during the call to 'slow'; "
            "it will be started again at the next call"
        )
        assert not after.is_error
        assert int(after.content) != pid
        assert state.exit_reason == "model_complete"

    def test_command_that_does_not_exist(self) -> None:
        """A server that cannot start: tools() and call() raise an error naming the fix
        (inside a run, that text is the call's is_error result)."""
        server = MCPServer.stdio("/nonexistent/mcp-server", ["--flag"])
        with pytest.raises(MCPServerError) as info:
            asyncio.run(server.tools())
        message = (
            "MCP server 'mcp-server' (/nonexistent/mcp-server --flag) could not be started: "
            "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'; "
            "check that '/nonexistent/mcp-server' is installed and on PATH"
        )
        assert str(info.value) == message
        assert info.value.server == "mcp-server"
        with pytest.raises(MCPServerError) as again:
            asyncio.run(server.call("anything", {}))
        assert str(again.value) == message

    def test_server_that_never_answers(self) -> None:
        """A process that does not speak MCP: the handshake times out with the fix, and
        the process is stopped."""
        server = MCPServer.stdio(
            sys.executable, ["-c", "import sys; sys.stdin.read()"], name="mute", connect_timeout=0.5
        )
        with pytest.raises(MCPServerError) as info:
            asyncio.run(asyncio.wait_for(server.tools(), 30))
        assert str(info.value) == (
            f"MCP server 'mute' ({sys.executable} -c 'import sys; sys.stdin.read()') did not "
            "finish its handshake and tool listing within 0.5 s; check that it speaks MCP on "
            "this transport, or raise connect_timeout"
        )
        assert children("sys.stdin.read()") == []

    def test_server_that_exits_at_start_quotes_its_stderr(self) -> None:
        """A server that dies before its handshake: the error quotes its stderr."""
        server = MCPServer.stdio(
            sys.executable, ["-c", "import sys; sys.exit('no config file found')"], name="bad"
        )
        with pytest.raises(MCPServerError) as info:
            asyncio.run(server.tools())
        assert str(info.value).startswith("MCP server 'bad' (")
        assert str(info.value).endswith("its stderr ended with:\nno config file found")


class TestDemoOverHTTP:
    def test_full_run_calls_a_tool(self, demo_url: str) -> None:
        """A full run calls the HTTP server's tool next to a local one in one Toolset."""

        @tool
        def local() -> str:
            """A local tool."""
            return "local result"

        async def main() -> HarnessState:
            async with MCPServer.http(demo_url, name="demo") as server:
                toolset = Toolset([local, *await server.tools()])
                return await run(
                    toolset,
                    reply(tool_call("echo", {"text": "héllo"}), tool_call("local")),
                )

        state = asyncio.run(main())
        assert [(r.content, r.is_error) for r in results(state)] == [
            ("héllo", False),
            ("local result", False),
        ]

    def test_timeout_sends_notifications_cancelled(self, demo_url: str) -> None:
        """A call over its timeout is stopped, and the server receives the client's
        notifications/cancelled for it (its handler is cancelled, not left running)."""

        async def main() -> tuple[HarnessState, list[dict[str, Any]]]:
            async with MCPServer.http(demo_url, name="demo", timeouts={"slow": 2}) as server:
                before = await cancellations(server)
                state = await run(await server.tools(), reply(tool_call("slow", {"seconds": 30})))
                return state, await new_cancellations(server, before)

        state, new = asyncio.run(main())
        [result] = results(state)
        assert result.is_error
        assert re.fullmatch(
            r"tool 'slow' timed out after [\d.]+ s \(limit 2 s from the tool's own timeout\); "
            "it was stopped",
            result.content,
        )
        assert len(new) == 1
        assert new[0]["notified"] is True

    def test_abort_sends_notifications_cancelled(self, demo_url: str) -> None:
        """Aborting the run during a call cancels it on the server too."""

        async def main() -> tuple[HarnessState, list[dict[str, Any]]]:
            async with MCPServer.http(demo_url, name="demo") as server:
                before = await cancellations(server)
                provider = ScriptedProvider([reply(tool_call("slow", {"seconds": 30}))])
                params = HarnessParams(model="scripted:m", tools=await server.tools())
                handle = Harness(params, [provider]).start("go")
                asyncio.get_running_loop().call_later(2, handle.abort)
                state = await handle.run()
                return state, await new_cancellations(server, before)

        state, new = asyncio.run(main())
        assert state.exit_reason == "aborted"
        assert len(new) == 1
        assert new[0]["notified"] is True

    def test_list_changed_brings_the_new_tool(self, demo_url: str) -> None:
        """A server's tools/list_changed re-reads its tools: the running params keep
        theirs (frozen), and the next run built from server.tools() can call the new one."""
        changed: list[str] = []

        async def main() -> tuple[list[str], list[str], HarnessState]:
            async with MCPServer.http(
                demo_url, name="demo", on_tools_changed=lambda s: changed.append(s.name)
            ) as server:
                first = await server.tools()
                await run(first, reply(tool_call("add_tool", {"name": "late_tool"})))
                await wait_for(lambda: changed)
                second = await server.tools()
                state = await run(second, reply(tool_call("late_tool")))
                return [t.name for t in first], [t.name for t in second], state

        first, second, state = asyncio.run(main())
        assert "late_tool" not in first
        assert second == [*first, "late_tool"]
        assert changed == ["demo"]
        assert [r.content for r in results(state)] == ["late_tool works"]

    def test_server_gone_during_a_call(self) -> None:
        """An HTTP server killed mid-call: that call is an is_error result naming the
        server, a call while it is down says it cannot be reached, and once it is back
        the next call connects again."""

        async def main() -> tuple[str, str, str]:
            proc, port = start_demo()
            server = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="demo")
            try:
                await server.call("echo", {"text": "up"})
                asyncio.get_running_loop().call_later(0.5, proc.kill)
                with pytest.raises(MCPServerError) as during:
                    await server.call("slow", {"seconds": 30})
                proc.wait()
                with pytest.raises(MCPServerError) as down:
                    await server.call("echo", {"text": "down"})
                proc, _ = start_demo(port)
                back = (await server.call("echo", {"text": "back"})).content
            finally:
                await server.aclose()
                proc.kill()
                proc.wait()
            return str(during.value), str(down.value), back

        during, down, back = asyncio.run(main())
        assert during == (
            "MCP server 'demo' closed the connection during the call to 'slow'; "
            "the next call connects again"
        )
        assert down.startswith("MCP server 'demo' (http://127.0.0.1:")
        assert down.endswith(
            "/mcp) could not be reached: ConnectError: All connection attempts failed; "
            "check that the server runs and that the URL is its MCP endpoint"
        )
        assert back == "back"

    def test_failing_tools_changed_callback_keeps_the_connection(self, demo_url: str) -> None:
        """An exception from on_tools_changed goes to the event loop's exception handler;
        the connection and the new tool list are unaffected."""
        reported: list[str] = []

        def broken(server: MCPServer) -> None:
            raise RuntimeError("host bug")

        async def main() -> tuple[list[str], str]:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _, ctx: reported.append(repr(ctx["exception"])))
            async with MCPServer.http(demo_url, name="demo", on_tools_changed=broken) as server:
                await server.call("add_tool", {"name": "other_tool"})
                await wait_for(lambda: reported)
                names = [t.name for t in await server.tools()]
                return names, (await server.call("echo", {"text": "still here"})).content

        names, echoed = asyncio.run(main())
        assert reported == ["RuntimeError('host bug')"]
        assert "other_tool" in names
        assert echoed == "still here"

    def test_result_contents_become_text(self, demo_url: str) -> None:
        """Images, resource links, embedded resources and structured content map to text
        the model can read; the whole MCP result stays in value."""

        async def main() -> dict[str, Any]:
            async with MCPServer.http(demo_url, name="demo") as server:
                names = ("picture", "link", "document", "report")
                return {n: await server.call(n, {}) for n in names} | {
                    "fail": await server.call("fail", {"reason": "disk full"})
                }

        out = asyncio.run(main())
        assert out["picture"].content == (
            "a pixel:\n[image: image/png, 70 bytes; not shown: tool results carry text only]"
        )
        image = out["picture"].value["content"][1]
        assert image["type"] == "image"
        assert image["mimeType"] == "image/png"
        assert out["link"].content == (
            "[resource link: report.pdf <file:///srv/report.pdf>, application/pdf: "
            "the quarterly report]"
        )
        assert out["document"].content == (
            "[resource <file:///srv/notes.txt>, text/plain]\nline one\n"
            "[resource <file:///srv/blob.bin>, application/octet-stream, 10 bytes of binary "
            "data; not shown]"
        )
        assert out["report"].content == '{"total": 3, "unit": "km"}'
        assert out["report"].value["structuredContent"] == {"total": 3, "unit": "km"}
        assert (out["fail"].content, out["fail"].is_error) == (
            "Error executing tool fail: disk full",
            True,
        )
        assert not any(out[n].is_error for n in ("picture", "link", "document", "report"))


async def cancellations(server: MCPServer) -> list[dict[str, Any]]:
    out = await server.call("cancellations", {})
    result: list[dict[str, Any]] = out.value["structuredContent"]["result"]
    return result


async def new_cancellations(
    server: MCPServer, before: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The cancellations recorded since ``before`` (waiting for the server to record
    one; a notification is handled a moment after it is sent)."""
    deadline = time.monotonic() + 5.0
    while len(now := await cancellations(server)) == len(before):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    return now[len(before) :]


class TestOptions:
    def test_names_categories_timeouts(self) -> None:
        """prefix, names, categories and timeouts shape the specs; the server is called
        with its own names."""

        async def main() -> tuple[list[tuple[str, str, float | None]], str]:
            async with demo_stdio(
                prefix="demo_",
                names={"echo": "say"},
                category="code",
                categories={"slow": "shell"},
                timeouts={"slow": 2.5},
            ) as server:
                tools = await server.tools()
                state = await run(tools, reply(tool_call("say", {"text": "hi"})))
                shapes = [(t.name, t.category, t.timeout) for t in tools]
                return shapes, results(state)[0].content

        shapes, said = asyncio.run(main())
        assert shapes[:4] == [
            ("say", "code", None),
            ("demo_pid", "code", None),
            ("demo_slow", "shell", 2.5),
            ("demo_cancellations", "code", None),
        ]
        assert said == "hi"

    def test_unknown_tool_in_options(self) -> None:
        """An option naming a tool the server does not offer is refused with the list."""
        server = time_server(categories={"convert": "file"})
        with pytest.raises(ToolDefinitionError) as info:
            asyncio.run(server.tools())
        assert str(info.value) == (
            "MCPServer 'mcp_server_time': categories names 'convert', which the server does "
            "not offer; its tools: convert_time, get_current_time"
        )

    def test_invalid_tool_name(self) -> None:
        """A name the model cannot take is refused, saying how to rename it."""
        server = time_server(prefix="time.")
        with pytest.raises(ToolDefinitionError) as info:
            asyncio.run(server.tools())
        assert str(info.value) == (
            "MCP server 'mcp_server_time' offers a tool named 'get_current_time'; as "
            "'time.get_current_time' it is not a valid tool name for the model (1-64 of a-z "
            "A-Z 0-9 _ -); rename it with names={'get_current_time': ...}"
        )

    def test_bad_constructor_arguments(self) -> None:
        """Misuse is caught at construction, with the fix."""
        with pytest.raises(ToolDefinitionError, match=r"write args=\['-m', 'srv'\]"):
            MCPServer.stdio("python", "-m srv")
        with pytest.raises(ToolDefinitionError, match="needs an http:// or https:// URL"):
            MCPServer.http("localhost:8000/mcp")
        with pytest.raises(ToolDefinitionError, match=r"timeouts\['slow'\] must be a positive"):
            MCPServer.http("http://127.0.0.1:1/mcp", timeouts={"slow": 0})


def hostile(*args: str, **options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, [HOSTILE, *args], name="hostile", **options)


async def pages_listed(server: MCPServer) -> int:
    """How many tools/list requests the hostile server has answered."""
    return int((await server.call("pages", {})).content)


class TestHostileServer:
    def test_endless_pages_are_refused_at_connect(self) -> None:
        """A server whose listing pages forever is refused after max_pages pages."""
        server = hostile("endless", max_pages=5)
        with pytest.raises(MCPServerError) as info:
            asyncio.run(server.tools())
        assert str(info.value) == (
            "MCP server 'hostile' lists its tools in more than 5 pages (it may page "
            "forever); raise MCPServer(max_pages=...) if it really has that many"
        )
        assert children(HOSTILE) == []

    def test_list_changed_then_endless_pages_is_bounded(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After tools/list_changed the server pages forever: the re-read stops after
        max_pages pages with a warning, the list stays as it was, the connection works."""
        message = (
            "MCP server 'hostile' lists its tools in more than 5 pages (it may page "
            "forever); raise MCPServer(max_pages=...) if it really has that many "
            "(the tool list stays as it was)"
        )

        async def main() -> tuple[list[str], int, int]:
            async with hostile("endless-after-announce", max_pages=5) as server:
                before = [t.name for t in await server.tools()]
                await server.call("announce", {})
                for _ in range(1_000):  # the re-read runs in the background
                    if caplog.records:
                        break
                    await asyncio.sleep(0.01)
                after_notice = await pages_listed(server)
                with pytest.raises(MCPServerError) as info:
                    await server.refresh()
                assert str(info.value) == message
                after = [t.name for t in await server.tools()]
                assert after == before
                return before, after_notice, await pages_listed(server)

        with caplog.at_level("WARNING", logger="innerloop.tools._mcp"):
            names, after_notice, after_refresh = asyncio.run(main())
        assert names == ["pages", "announce", "deep"]
        assert (after_notice, after_refresh) == (1 + 5, 1 + 5 + 5)
        assert [r.getMessage() for r in caplog.records] == [message]

    def test_a_server_that_always_notifies_is_reread_at_the_documented_rate(self) -> None:
        """A server that answers every listing with another tools/list_changed gets one
        re-read at once, then waits reread_seconds for the next (one pending re-read, the
        notices meanwhile coalesced): here an hour, so no other listing follows while the
        connection idles (it made thousands a second); tools() meanwhile gives the list as
        read, without waiting."""

        async def main() -> tuple[int, int, list[str]]:
            async with hostile("chatty", reread_seconds=3600) as server:
                await server.tools()
                await server.call("announce", {})  # its notice comes before its answer
                names = [t.name for t in await server.tools()]  # waits for that re-read
                first = await pages_listed(server)
                for _ in range(30):  # idle; each call a round trip the notices go before
                    await asyncio.sleep(0.01)
                    await server.call("pages", {})
                assert [t.name for t in await server.tools()] == names
                return first, await pages_listed(server), names

        first, later, names = asyncio.run(main())
        assert (first, later) == (2, 2)
        assert names == ["pages", "announce", "deep"]

    def test_reread_seconds_must_be_positive(self) -> None:
        with pytest.raises(ToolDefinitionError, match="reread_seconds"):
            hostile("chatty", reread_seconds=0)

    def test_too_many_tools(self) -> None:
        """More tools than max_tools is refused, naming the setting."""
        server = hostile("many", "11", max_tools=10)
        with pytest.raises(MCPServerError) as info:
            asyncio.run(server.tools())
        assert str(info.value) == (
            "MCP server 'hostile' offers more than 10 tools; raise MCPServer(max_tools=...) "
            "if you want them all"
        )
        assert asyncio.run(hostile("many", "7", max_tools=10).tools())[-1].name == "t6"

    def test_schema_over_the_size_limit_names_the_tool(self) -> None:
        """A schema over max_schema_bytes is refused before it is checked, naming the tool;
        the default bound refuses a schema of 20,000 properties."""
        with pytest.raises(ToolDefinitionError) as info:
            asyncio.run(hostile("wide", "100", max_schema_bytes=1_000).tools())
        assert str(info.value) == (
            "MCP server 'hostile', tool 'wide': its input schema takes 2,724 bytes of JSON, "
            "more than max_schema_bytes=1,000; raise MCPServer(max_schema_bytes=...) to "
            "accept it"
        )
        with pytest.raises(ToolDefinitionError, match="takes 588,924 bytes of JSON, more than"):
            asyncio.run(hostile("wide", "20000").tools())
        [*_, wide] = asyncio.run(hostile("wide", "100").tools())
        assert len(wide.input_schema["properties"]) == 100

    def test_schema_nested_too_deep_names_the_tool(self) -> None:
        """A schema nested past the JSON depth limit is refused before it is checked."""
        with pytest.raises(ToolDefinitionError) as info:
            asyncio.run(hostile("tall", "60").tools())
        assert str(info.value) == (
            "MCP server 'hostile', tool 'tall': its input schema is nested deeper than 100 "
            "levels of arrays and objects; it cannot be checked"
        )

    def test_listing_that_stalls_counts_in_connect_timeout(self) -> None:
        """A server that stops answering in the middle of its listing: the listing counts
        inside connect_timeout, and the process is stopped."""
        server = hostile("stall", connect_timeout=0.5)
        with pytest.raises(MCPServerError) as info:
            asyncio.run(asyncio.wait_for(server.tools(), 30))
        assert str(info.value) == (
            f"MCP server 'hostile' ({sys.executable} {HOSTILE} stall) did not finish its "
            "handshake and tool listing within 0.5 s; check that it speaks MCP on this "
            "transport, or raise connect_timeout"
        )
        assert children(HOSTILE) == []

    def test_refresh_that_stalls_times_out(self, caplog: pytest.LogCaptureFixture) -> None:
        """A re-read the server never answers ends at connect_timeout, in the background
        (a warning) and through refresh() (raised); the list and the connection stay."""
        message = (
            "MCP server 'hostile': reading its tool list again took more than 0.5 s; the "
            "list stays as it was (raise connect_timeout if the server is slow)"
        )

        async def main() -> tuple[str, list[str]]:
            async with hostile("stall-after-announce", connect_timeout=0.5) as server:
                await server.call("announce", {})
                for _ in range(1_000):  # the re-read runs in the background
                    if caplog.records:
                        break
                    await asyncio.sleep(0.01)
                with pytest.raises(MCPServerError) as info:
                    await server.refresh()
                assert str(info.value) == message
                names = [t.name for t in await server.tools()]
                return (await server.call("pages", {})).content, names

        with caplog.at_level("WARNING", logger="innerloop.tools._mcp"):
            listed, names = asyncio.run(main())
        assert [r.getMessage() for r in caplog.records] == [message]
        assert (listed, names) == ("3", ["pages", "announce", "deep"])

    @pytest.mark.parametrize("depth", [101, 5_000])
    def test_result_nested_too_deep_is_an_error_result(self, depth: int) -> None:
        """Structured content nested past the JSON depth limit is an is_error result, both
        when the SDK reads it (101) and when it cannot (5,000: the call would hang)."""

        async def main() -> HarnessState:
            async with hostile("deep", str(depth), timeout=30) as server:
                return await run(await server.tools(), reply(tool_call("deep")))

        state = asyncio.run(main())
        [result] = results(state)
        assert (result.content, result.is_error) == (
            "MCP server 'hostile' answered the call to 'deep' with a result nested deeper "
            "than 100 levels of arrays and objects; it was not read (ask for less, or fix "
            "the server)",
            True,
        )
        assert state.exit_reason == "model_complete"

    def test_result_at_the_depth_limit_is_read(self) -> None:
        """Structured content exactly at the limit comes through."""

        async def main() -> ToolOutput:
            async with hostile("deep", "100") as server:
                return await server.call("deep", {})

        out = asyncio.run(main())
        assert not out.is_error
        assert out.content == '{"a": ' * 99 + "{}" + "}" * 99

    def test_bad_bounds(self) -> None:
        """A bound that is not a positive int is refused at construction."""
        with pytest.raises(ToolDefinitionError) as info:
            hostile("many", "1", max_tools=0)
        assert str(info.value) == "MCPServer max_tools must be a positive count, got 0"
        with pytest.raises(ToolDefinitionError) as again:
            hostile("many", "1", max_pages=2.5)
        assert str(again.value) == "MCPServer max_pages must be an int, got 2.5"


def too_large(limit: int) -> str:
    return (
        f"MCP server 'hostile' sent a message of more than {limit:,} bytes "
        f"(max_message_bytes={limit:,}); it was not read and the connection was closed; "
        "raise MCPServer(max_message_bytes=...) to accept it"
    )


def listing_bytes(*args: str) -> int:
    """The bytes of the hostile server's first tools/list answer (request id 1)."""
    from tests.tools.mcp_servers.hostile import Hostile

    page = Hostile(args[0], int(args[1]) if len(args) > 1 else 0).listing(None)
    return len(json.dumps({"jsonrpc": "2.0", "id": 1, "result": page}))


class TestMessageSize:
    """What a server may send is bounded before it is parsed: max_message_bytes."""

    def test_a_page_of_50000_tools_is_refused_before_it_is_read(self) -> None:
        """The default bound refuses a page of 50,000 tools (5.4 MB) as it is read, well
        within connect_timeout, naming the setting; the process is stopped."""
        server = hostile("many", "50000", connect_timeout=30)
        with pytest.raises(MCPServerError) as info:
            asyncio.run(server.tools())
        assert str(info.value) == too_large(4 * 1024 * 1024)
        assert listing_bytes("many", "50000") > 4 * 1024 * 1024
        assert children(HOSTILE) == []

    def test_the_bound_counts_the_bytes_of_one_message(self) -> None:
        """A listing of exactly max_message_bytes is read; one byte less refuses it."""
        size = listing_bytes("many", "7")
        assert [t.name for t in asyncio.run(hostile("many", "7", max_message_bytes=size).tools())][
            -1
        ] == "t6"
        with pytest.raises(MCPServerError) as info:
            asyncio.run(hostile("many", "7", max_message_bytes=size - 1).tools())
        assert str(info.value) == too_large(size - 1)

    def test_a_result_over_the_bound_is_the_calls_error(self) -> None:
        """A tool result over the bound ends the connection; the call is an is_error
        result naming the setting, and the next call starts the server again."""
        limit = listing_bytes("deep", "100") + 100  # the listing fits, the result does not

        async def main() -> tuple[HarnessState, str]:
            async with hostile("deep", "100", max_message_bytes=limit) as server:
                state = await run(await server.tools(), reply(tool_call("deep")))
                return state, (await server.call("pages", {})).content

        state, listed = asyncio.run(main())
        [result] = results(state)
        assert (result.content, result.is_error) == (
            f"{too_large(limit)} (during the call to 'deep')",
            True,
        )
        assert listed == "1"  # a new process: one listing so far

    def test_a_reread_over_the_bound_keeps_the_list(self) -> None:
        """A page over the bound after tools/list_changed: refresh() says so, naming the
        setting, and the list stays as it was."""
        limit = listing_bytes("many", "100") - 1

        async def main() -> tuple[str, list[str]]:
            async with hostile("many-after-announce", "100", max_message_bytes=limit) as server:
                await server.call("announce", {})
                with pytest.raises(MCPServerError) as info:
                    await server.refresh()
                return str(info.value), [t.name for t in await server.tools()]

        message, names = asyncio.run(main())
        assert message == f"{too_large(limit)} (the tool list stays as it was)"
        assert names == ["pages", "announce", "deep"]

    def test_over_streamable_http(self, demo_url: str) -> None:
        """The bound holds over streamable HTTP too."""
        with pytest.raises(MCPServerError) as info:
            asyncio.run(MCPServer.http(demo_url, name="hostile", max_message_bytes=300).tools())
        assert str(info.value) == too_large(300)
        tools = asyncio.run(MCPServer.http(demo_url, max_message_bytes=100_000).tools())
        assert tools

    def test_a_bad_bound(self) -> None:
        with pytest.raises(ToolDefinitionError) as info:
            hostile("many", "1", max_message_bytes=0)
        assert str(info.value) == "MCPServer max_message_bytes must be a positive count, got 0"
