"""MCP, driven by the official ``mcp`` client: the agent as a tool over streamable HTTP
and stdio, progress, elicitation for approvals, cancellation."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import openai
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from innerloop import Harness, HarnessParams
from innerloop.examples.approval import with_approval
from innerloop.testing import ScriptedProvider, assert_valid_history, reply
from tests.serve.conftest import ended, harness, node, waiting_harness, weather_script

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def connect(server: Any, **options: Any) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(f"{server.base_url}/mcp") as (read, write),
        ClientSession(read, write, **options) as session,
    ):
        await session.initialize()
        yield session


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_the_agent_is_a_tool_that_reports_progress(serve: Any) -> None:
    """One tool named as the served harness; its run's transitions are progress."""
    server = serve(harness(*weather_script()), name="weather")
    seen: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with connect(server) as session:
        tools = await session.list_tools()
        assert [t.name for t in tools.tools] == ["weather"]
        result = await session.call_tool(
            "weather", {"prompt": "Weather in Lisbon?"}, progress_callback=progress
        )
    assert (text(result), result.is_error) == ("Sunny in Lisbon.", False)
    assert "execute" in seen
    assert seen[-1] == "model_complete"


@dataclasses.dataclass
class Weather:
    city: str
    celsius: float


async def test_typed_output_is_structured_content(serve: Any) -> None:
    """A harness with an output_type answers its value as structured content too."""
    params = HarnessParams(model="scripted:m", output_type=Weather)
    model = ScriptedProvider([reply('{"city": "Lisbon", "celsius": 21.5}')])
    async with connect(serve(Harness(params, [model]))) as session:
        result = await session.call_tool("innerloop", {"prompt": "Weather?"})
    assert result.structured_content == {"city": "Lisbon", "celsius": 21.5}
    assert text(result) == '{"city": "Lisbon", "celsius": 21.5}'


async def test_an_approval_is_asked_through_elicitation(serve: Any) -> None:
    """The run's approval is an elicitation; the client's yes lets the tool run."""
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    h = harness(*weather_script(), machine=with_approval())
    async with connect(serve(h), elicitation_callback=elicit) as session:
        result = await session.call_tool("innerloop", {"prompt": "Weather?"})
    assert asked == ['The agent asks to run: weather({"city": "Lisbon"}). Approve?']
    assert text(result) == "Sunny in Lisbon."


async def test_an_approval_without_elicitation_is_refused_clearly(serve: Any) -> None:
    """A client declaring no elicitation gets an error result saying so."""
    h = harness(*weather_script(), machine=with_approval())
    async with connect(serve(h)) as session:
        result = await session.call_tool("innerloop", {"prompt": "Weather?"})
    assert result.is_error
    assert text(result) == (
        'refused: The agent asks to run: weather({"city": "Lisbon"}). Approve? This MCP '
        "client cannot answer (it declares no elicitation capability), so the run is left "
        "suspended, waiting for the answer"
    )


async def test_a_conversation_goes_on_through_the_tool(serve: Any) -> None:
    """conversation_id and its token, as the OpenAI route takes them."""
    h = harness(reply("Hello Ana."), reply("You are Ana."))
    async with connect(serve(h)) as session:
        first = await session.call_tool(
            "innerloop", {"prompt": "I am Ana.", "conversation_id": "c"}
        )
        assert first.structured_content is not None
        token = first.structured_content["conversation_token"]
        refused = await session.call_tool("innerloop", {"prompt": "Who?", "conversation_id": "c"})
        second = await session.call_tool(
            "innerloop",
            {"prompt": "Who am I?", "conversation_id": "c", "conversation_token": token},
        )
    assert refused.is_error
    assert "wants its conversation_token" in text(refused)
    assert text(second) == "You are Ana."


async def test_cancelling_the_call_aborts_the_run(serve: Any, tmp_path: Path) -> None:
    """The client cancels while a tool runs: the run is aborted, its history valid, stored."""

    h = waiting_harness(tmp_path / "s.db")
    executing = anyio.Event()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        if message == "execute":
            executing.set()

    async with connect(serve(h)) as session, anyio.create_task_group() as group:

        async def call() -> None:
            await session.call_tool(
                "innerloop", {"prompt": "Wait.", "conversation_id": "w"}, progress_callback=progress
            )

        group.start_soon(call)
        await executing.wait()
        group.cancel_scope.cancel()
    state = ended(h, "w")
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


async def test_stdio_serves_the_same_tool() -> None:
    """innerloop serve --stdio: MCP over stdin and stdout, for hosts that spawn servers."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "innerloop", "serve", "tests.serve.agents:weather_agent", "--stdio"],
        env={"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("innerloop", {"prompt": "Weather?"})
    assert text(result) == "Sunny in Lisbon."


async def test_the_app_mounted_in_another_serves_both_routes(serve: Any) -> None:
    """Mounted under /agent with its lifespan: chat completions and MCP both answer."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from innerloop.serve import app
    from tests.serve.conftest import Server

    served = app(harness(reply("From OpenAI."), reply("From MCP.")))
    outer = Starlette(routes=[Mount("/agent", served)], lifespan=served.lifespan)
    with Server(outer) as server:
        async with openai.AsyncOpenAI(
            api_key="x", base_url=f"{server.base_url}/agent/v1", max_retries=0
        ) as client:
            done = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Hi"}]
            )
        server.base_url += "/agent"
        async with connect(server) as session:
            result = await session.call_tool("innerloop", {"prompt": "Hi"})
    assert (done.choices[0].message.content, text(result)) == ("From OpenAI.", "From MCP.")


INSPECTOR = "node_modules/@modelcontextprotocol/inspector-cli/build/index.js"


def test_the_mcp_inspector_lists_and_calls_the_tool(serve: Any, node_clients: Path) -> None:
    """The MCP Inspector's command line (under node) sees the tool and gets the answer."""
    url = f"{serve(harness(*weather_script())).base_url}/mcp"
    listed = json.loads(
        node(node_clients, INSPECTOR, url, "--transport", "http", "--method", "tools/list")
    )
    [described] = listed["tools"]
    assert described["name"] == "innerloop"
    assert described["inputSchema"]["required"] == ["prompt"]
    called = json.loads(
        node(
            node_clients,
            INSPECTOR,
            url,
            "--transport",
            "http",
            "--method",
            "tools/call",
            "--tool-name",
            "innerloop",
            "--tool-arg",
            "prompt=Weather in Lisbon?",
        )
    )
    assert called == {"content": [{"type": "text", "text": "Sunny in Lisbon."}], "isError": False}
