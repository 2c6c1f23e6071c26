"""Tools that change per turn: ``HarnessParams(prepare_tools=...)`` chooses the tools of
each request, and ``tool_sources`` (an MCP server) are read again before each turn. Over
the loopback Anthropic server with the real SDK client; the MCP server is the demo server
of tests/tools (the official SDK's server, over stdio)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, HarnessState, ParamsError, ToolResultBlock
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, assert_valid_history, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from tests.tools.test_mcp import demo_stdio

KEY = "sk-ant-api03-tools-per-turn-0123456789"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"


async def _named(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"ran at turn {ctx.state.turns}")


A, B, C = (ToolSpec(n, f"Tool {n}.", {"type": "object"}, _named) for n in "abc")


def _offered(request: Any) -> list[str]:
    return [t["name"] for t in request.body.get("tools", ())]


def _results(state: HarnessState) -> list[tuple[str, bool]]:
    return [
        (b.content, b.is_error)
        for m in state.history
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def by_turn(state: HarnessState, tools: tuple[ToolSpec, ...]) -> Sequence[ToolSpec | str]:
    """b and a on the first turn, c alone on the second, then a and c (by name)."""
    if state.turns == 0:
        return [tools[1], tools[0]]
    if state.turns == 1:
        return ["c"]
    return ["a", "c"]


def _run(params: HarnessParams, script: list[Any]) -> tuple[HarnessState, list[Any]]:
    with AnthropicServer(script) as server:
        provider = AnthropicProvider(KEY, base_url=server.base_url)
        state = Harness(params, [provider]).run_sync("go")
        return state, list(server.requests)


def test_each_request_carries_the_chosen_tools() -> None:
    """The hook's choice, in its order, is what each request offers; the offered call
    runs, the call to a tool not offered on its turn gets an error result, and the
    history stays valid."""
    script = [
        reply(tool_call("a", {}, id="t1")),
        reply(tool_call("b", {}, id="t2"), tool_call("c", {}, id="t3")),
        reply("done"),
    ]
    params = HarnessParams(model=CLAUDE, tools=(A, B, C), prepare_tools=by_turn)
    state, requests = _run(params, script)
    assert [_offered(r) for r in requests] == [["b", "a"], ["c"], ["a", "c"]]
    assert _results(state) == [
        ("ran at turn 1", False),
        (
            "tool 'b' is not offered on this turn, so it was not run; the tools offered now: c",
            True,
        ),
        ("ran at turn 2", False),
    ]
    assert state.exit_reason == "model_complete"
    assert_valid_history(state.history)


def test_without_a_hook_every_request_offers_the_declared_tools() -> None:
    script = [reply(tool_call("a", {}, id="t1")), reply("done")]
    _, requests = _run(HarnessParams(model=CLAUDE, tools=(A, B)), script)
    assert [_offered(r) for r in requests] == [["a", "b"], ["a", "b"]]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            ["a", "z"],
            "prepare_tools: returned 'z', which is not a declared tool (declared: a, b, c); "
            "return some of the tools it is given (specs or names), in any order",
        ),
        (
            "a",
            "prepare_tools: must return a list of tools, got 'a'; return some of the tools "
            "it is given (specs or names), in any order",
        ),
        (
            ["a", "a"],
            "prepare_tools: returned 'a' twice; return some of the tools it is given (specs "
            "or names), in any order",
        ),
    ],
)
def test_a_bad_choice_is_a_clear_error(returned: Any, message: str) -> None:
    """What the hook returns is checked before the request is sent."""
    params = HarnessParams(model=CLAUDE, tools=(A, B, C), prepare_tools=lambda s, t: returned)
    with pytest.raises(ParamsError) as info:
        _run(params, [reply("never sent")])
    assert str(info.value) == message


def test_a_hook_that_drops_a_forced_tool_is_refused() -> None:
    params = HarnessParams(
        model=CLAUDE, tools=(A, B), tool_choice="tool:a", prepare_tools=lambda s, t: ["b"]
    )
    with pytest.raises(ParamsError) as info:
        _run(params, [reply("never sent")])
    assert str(info.value) == (
        "prepare_tools: left out 'a', which tool_choice='tool:a' forces; offer it on every "
        "turn or use tool_choice='auto'"
    )


def test_prepare_tools_must_be_a_function() -> None:
    with pytest.raises(ParamsError) as info:
        HarnessParams(model=CLAUDE, prepare_tools=["a"])  # type: ignore[arg-type]
    assert str(info.value) == (
        "prepare_tools: must be None or a function (state, tools) -> the tools to offer, got ['a']"
    )


def test_an_mcp_list_change_is_seen_at_the_next_turn() -> None:
    """The MCP server adds a tool during a call (notifications/tools/list_changed, sent
    over stdio before the call's answer): the next request offers it, and the model's
    call of it runs on the server."""
    script = [
        reply(tool_call("add_tool", {"name": "late_tool"}, id="t1")),
        reply(tool_call("late_tool", {}, id="t2")),
        reply("done"),
    ]

    async def main() -> tuple[HarnessState, list[Any]]:
        async with demo_stdio() as mcp:
            params = HarnessParams(model=CLAUDE, tool_sources=[mcp])
            with AnthropicServer(script) as server:
                provider = AnthropicProvider(KEY, base_url=server.base_url)
                state = await Harness(params, [provider]).run("go")
                return state, list(server.requests)

    state, requests = asyncio.run(main())
    first, second, third = (_offered(r) for r in requests)
    assert "late_tool" not in first
    assert second == [*first, "late_tool"] == third
    assert [content for content, _ in _results(state)][1] == "late_tool works"
    assert state.exit_reason == "model_complete"
    assert_valid_history(state.history)


def test_a_source_tool_named_like_a_declared_one_is_refused() -> None:
    echo = ToolSpec("echo", "Local echo.", {"type": "object"}, _named)

    async def main() -> None:
        async with demo_stdio() as mcp:
            params = HarnessParams(model=CLAUDE, tools=[echo], tool_sources=[mcp])
            with AnthropicServer([reply("never sent")]) as server:
                provider = AnthropicProvider(KEY, base_url=server.base_url)
                await Harness(params, [provider]).run("go")

    with pytest.raises(ParamsError) as info:
        asyncio.run(main())
    assert str(info.value) == (
        "tool_sources: 'demo' offers a tool named 'echo', which params.tools declares too; "
        "rename one (an MCPServer takes prefix= or names=)"
    )


def test_a_run_with_an_mcp_server_is_logged(tmp_path: Any) -> None:
    """The documented MCP set-up (``tool_sources=[MCPServer...]``) writes its whole log:
    run_started names the server, each model_call the tools it offered (the server's
    list, changed after the first call)."""
    from innerloop import EventLog, read_event_log

    script = [reply(tool_call("add_tool", {"name": "late_tool"}, id="t1")), reply("done")]
    path = tmp_path / "mcp.jsonl"

    async def main() -> None:
        async with demo_stdio() as mcp:
            params = HarnessParams(model=CLAUDE, tool_sources=[mcp])
            with AnthropicServer(script) as server, EventLog(path) as log:
                provider = AnthropicProvider(KEY, base_url=server.base_url)
                async for event in Harness(params, [provider]).start("go").events():
                    log.write(event)

    asyncio.run(main())
    lines = read_event_log(path)
    started = next(line for line in lines if line["type"] == "run_started")
    assert started["params"]["tool_sources"] == [
        {"name": "demo", "class": "innerloop.tools._mcp:MCPServer"}
    ]
    first, second = (line["tools"] for line in lines if line["type"] == "model_call")
    assert "add_tool" in first
    assert second == [*first, "late_tool"]
    assert lines[-1]["exit_reason"] == "model_complete"
