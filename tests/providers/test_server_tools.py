"""Server-side tools (Anthropic's web search, web fetch, code execution; the Responses
API's web search, file search, code interpreter): enabled through params, kept in the
history, sent back to the same API, shown as events, dropped validly with an alert on
fallback. Over the loopback servers with the real SDK clients, and against recorded
Responses API traffic (tests/fixtures/corpus/pydantic-ai/.../test_openai_responses).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from innerloop import (
    HarnessParams,
    Message,
    ModelResponse,
    ParamsError,
    ServerTool,
    ServerToolBlock,
    TextBlock,
    ToolUseBlock,
)
from innerloop.events import Alert, Fallback, ModelResponseEvent, ServerToolEvent
from innerloop.lowlevel import build_request
from innerloop.providers import (
    AnthropicProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
    WireRequest,
)
from innerloop.providers._normalize import RequestSettings
from innerloop.recovery._compaction import render_transcript
from innerloop.recovery._tokens import message_text
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    RateLimit,
    Raw,
    ResponsesServer,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.testing._servers import Step
from innerloop.tools import ToolSpec
from innerloop.ui._view import run_detail
from tests.providers._corpus import Case, load_cases
from tests.providers.test_responses import ECHO, _echo, _run

ANTHROPIC_KEY = "sk-ant-api03-servertools-0123456789abcdef"
OPENAI_KEY = "sk-proj-servertools-0123456789abcdef"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
GPT5 = "openai:gpt-5-2025-08-07"
CHAT = "chat:gpt-4o-2024-08-06"

SEARCH_CALL = ServerToolBlock(
    "anthropic",
    {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "weather in Lisbon"},
    },
)
SEARCH_RESULT = ServerToolBlock(
    "anthropic",
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.org/lisbon",
                "title": "Lisbon weather",
                "encrypted_content": "EqgfCioIARgBIiQ3",
                "page_age": None,
            }
        ],
    },
)
RESPONSES_SEARCH = ServerToolBlock(
    "responses",
    {
        "type": "web_search_call",
        "id": "ws_01",
        "status": "completed",
        "action": {
            "type": "search",
            "query": "weather in Lisbon",
            "sources": [{"type": "url", "url": "https://example.org/lisbon"}],
        },
    },
)


class TestParams:
    def test_unknown_server_tool(self) -> None:
        """A name that is no server tool is refused, listing the known ones."""
        with pytest.raises(ParamsError) as info:
            ServerTool("web_serach")
        assert str(info.value) == (
            "server_tools: unknown server tool 'web_serach'; known: code_execution, "
            "code_interpreter, file_search, web_fetch, web_search"
        )

    def test_file_search_needs_vector_stores(self) -> None:
        """file_search without vector_store_ids is refused, showing what to write."""
        with pytest.raises(ParamsError) as info:
            ServerTool("file_search")
        assert str(info.value) == (
            "server_tools: file_search needs vector_store_ids: "
            "ServerTool('file_search', {'vector_store_ids': [...]})"
        )

    def test_name_taken_by_a_tool(self) -> None:
        """A tool of the run named like a server tool is refused."""
        echo = ToolSpec("web_search", "x", {"type": "object"}, _echo)
        with pytest.raises(ParamsError) as info:
            HarnessParams(model=CLAUDE, tools=[echo], server_tools=[ServerTool("web_search")])
        assert str(info.value) == (
            "tools: the tool name 'web_search' is taken by the server tool of that name; "
            "rename the tool"
        )

    def test_duplicate(self) -> None:
        with pytest.raises(ParamsError) as info:
            HarnessParams(model=CLAUDE, server_tools=[ServerTool("web_search")] * 2)
        assert str(info.value) == "server_tools: duplicate server tool 'web_search'"

    def test_chat_completions_route_is_refused(self, make_harness: Any) -> None:
        """A server tool on a Chat Completions model fails at the harness, naming the fix."""
        params = HarnessParams(model=CHAT, server_tools=[ServerTool("web_search")])
        chat = OpenAIProvider(OPENAI_KEY, base_url="http://127.0.0.1:9/v1", name="chat")
        with pytest.raises(ParamsError) as info:
            make_harness(params, [chat])
        assert str(info.value) == (
            "server_tools: server tool 'web_search' cannot run on chat:gpt-4o-2024-08-06 (its "
            "provider speaks 'openai'; web_search runs on Anthropic and the Responses API): "
            "the Chat Completions API runs no server tools: use OpenAIResponsesProvider for "
            "this model"
        )

    def test_anthropic_tool_on_responses_is_refused(self, make_harness: Any) -> None:
        params = HarnessParams(model=GPT5, server_tools=[ServerTool("web_fetch")])
        provider = OpenAIResponsesProvider(OPENAI_KEY, base_url="http://127.0.0.1:9/v1")
        with pytest.raises(ParamsError) as info:
            make_harness(params, [provider])
        assert str(info.value) == (
            "server_tools: server tool 'web_fetch' cannot run on openai:gpt-5-2025-08-07 (its "
            "provider speaks 'responses'; web_fetch runs on Anthropic): run it through "
            "AnthropicProvider, or use a Responses API server tool"
        )


class TestRequests:
    def test_definitions_per_dialect(self) -> None:
        """Each dialect is sent the server tools it runs, after the run's own tools."""
        tools = (ECHO.to_definition(),)
        server = (
            ServerTool("web_search", {"max_uses": 3}),
            ServerTool("code_interpreter"),
            ServerTool("code_execution"),
        )
        settings = RequestSettings(64, tools=tools, server_tools=server)
        history = [Message.user("hi")]
        anthropic = build_request(settings, history, "anthropic", "claude-sonnet-4-5")
        responses = build_request(settings, history, "responses", "gpt-5")
        chat = build_request(settings, history, "openai", "gpt-4o")
        assert [t.get("type", "custom") for t in anthropic.payload["tools"]] == [
            "custom",
            "web_search_20250305",
            "code_execution_20250825",
        ]
        assert anthropic.payload["tools"][1] == {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 3,
        }
        assert responses.payload["tools"][1:] == [
            {"type": "web_search", "max_uses": 3},
            {"type": "code_interpreter", "container": {"type": "auto"}},
        ]
        assert responses.payload["include"] == [
            "reasoning.encrypted_content",
            "code_interpreter_call.outputs",
        ]
        assert [t["function"]["name"] for t in chat.payload["tools"]] == ["echo"]

    def test_blocks_go_back_to_their_own_dialect_only(self) -> None:
        """Anthropic blocks go back verbatim to Anthropic; a Responses item goes back to
        the Responses API (less its output-only sources); neither reaches another API."""
        history = [
            Message.user("Weather?"),
            Message.assistant((SEARCH_CALL, SEARCH_RESULT, RESPONSES_SEARCH, TextBlock("Sunny."))),
            Message.user("Thanks."),
        ]
        settings = RequestSettings(64)
        anthropic = build_request(settings, history, "anthropic", "claude-sonnet-4-5")
        responses = build_request(settings, history, "responses", "gpt-5")
        chat = build_request(settings, history, "openai", "gpt-4o")
        assert anthropic.payload["messages"][1] == {
            "role": "assistant",
            "content": [
                dict(SEARCH_CALL.data),
                dict(SEARCH_RESULT.data),
                {"type": "text", "text": "Sunny."},
            ],
        }
        assert responses.payload["input"][1:3] == [
            {
                "type": "web_search_call",
                "id": "ws_01",
                "status": "completed",
                "action": {"type": "search", "query": "weather in Lisbon"},
            },
            {"role": "assistant", "content": "Sunny."},
        ]
        assert chat.payload["messages"][1] == {"role": "assistant", "content": "Sunny."}


def test_anthropic_server_tools_kept_shown_and_sent_back(make_harness: Any) -> None:
    """Streamed over SSE as Anthropic does (a call's input in JSON deltas, a result whole):
    the blocks are events, stay in the history, and the next request carries them
    verbatim; the request offers web_search."""
    script: list[Step] = [
        reply(SEARCH_CALL, SEARCH_RESULT, "Sunny.", tool_call("echo", {"x": "hi"}, id="tu_1")),
        reply("Done."),
    ]
    params = HarnessParams(model=CLAUDE, tools=(ECHO,), server_tools=[ServerTool("web_search")])
    with AnthropicServer(script, chunk_size=7) as server:
        provider = AnthropicProvider(ANTHROPIC_KEY, base_url=server.base_url)
        state, events = _run(make_harness(params, [provider]))
        first, second = (r.body for r in server.requests)
    assert first["tools"][-1] == {"type": "web_search_20250305", "name": "web_search"}
    assert [e.block for e in events if isinstance(e, ServerToolEvent)] == [
        SEARCH_CALL,
        SEARCH_RESULT,
    ]
    assert state.history[1].content[:3] == (SEARCH_CALL, SEARCH_RESULT, TextBlock("Sunny."))
    sent_back = second["messages"][1]["content"][:2]
    assert sent_back == [dict(SEARCH_CALL.data), dict(SEARCH_RESULT.data)]
    assert state.exit_reason == "model_complete"
    assert_valid_history(state.history)


def test_responses_server_tools_kept_shown_and_sent_back(make_harness: Any) -> None:
    """The Responses API's web_search_call item: an event, kept, and sent back as an input
    item on the next turn."""
    script: list[Step] = [
        reply(RESPONSES_SEARCH, "Sunny.", tool_call("echo", {"x": "hi"}, id="call_1")),
        reply("Done."),
    ]
    params = HarnessParams(model=GPT5, tools=(ECHO,), server_tools=[ServerTool("web_search")])
    with ResponsesServer(script) as server:
        provider = OpenAIResponsesProvider(OPENAI_KEY, base_url=server.base_url)
        state, events = _run(make_harness(params, [provider]))
        first, second = (r.body for r in server.requests)
    assert first["tools"][-1] == {"type": "web_search"}
    assert [e.block for e in events if isinstance(e, ServerToolEvent)] == [RESPONSES_SEARCH]
    assert state.history[1].content[0] == RESPONSES_SEARCH
    assert second["input"][1] == {
        "type": "web_search_call",
        "id": "ws_01",
        "status": "completed",
        "action": {"type": "search", "query": "weather in Lisbon"},
    }
    assert_valid_history(state.history)


def test_fallback_drops_server_blocks_with_an_alert(make_harness: Any) -> None:
    """Anthropic made server-tool blocks, then is rate limited: the run falls back to
    Chat Completions, which is sent a valid history without them, and an alert says so."""
    anthropic: list[Step] = [
        reply(SEARCH_CALL, SEARCH_RESULT, tool_call("echo", {"x": "hi"}, id="tu_1")),
        *[RateLimit(None)] * 6,
    ]
    params = HarnessParams(
        model=CLAUDE, fallbacks=(CHAT,), tools=(ECHO,), server_tools=[ServerTool("web_search")]
    )
    with AnthropicServer(anthropic) as a, OpenAIServer([reply("Done.")]) as o:
        providers = [
            AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url),
            OpenAIProvider(OPENAI_KEY, base_url=o.base_url, name="chat"),
        ]
        state, events = _run(make_harness(params, providers))
        to_chat = o.requests[0].body
    assert [e.to_provider for e in events if isinstance(e, Fallback)] == ["chat"]
    alerts = [e for e in events if isinstance(e, Alert) and e.kind == "server_tools_dropped"]
    assert [a.message for a in alerts] == [
        "chat:gpt-4o-2024-08-06 (openai) cannot take server tools: 2 server-tool block(s) of "
        "the history (server_tool_use, web_search_tool_result) are left out of its requests "
        "(the history keeps them, the text around them stays); server tools web_search are "
        "not offered to it"
    ]
    assert [m["role"] for m in to_chat["messages"]] == ["user", "assistant", "tool"]
    assert to_chat["messages"][1]["tool_calls"][0]["function"]["name"] == "echo"
    assert [t["function"]["name"] for t in to_chat["tools"]] == ["echo"]
    assert state.history[1].server_tools == (SEARCH_CALL, SEARCH_RESULT)
    assert state.exit_reason == "model_complete"
    assert_valid_history(state.history)


# -- recorded Responses API traffic -------------------------------------------------------

RECORDED = [c for c in load_cases(("responses",)) if c.status == 200 and c.streaming]


def _done_items(case: Case) -> list[dict[str, Any]]:
    items = []
    for line in case.decoded().decode().splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event["type"] == "response.output_item.done":
                items.append(event["item"])
    return items


def _replay(case: Case) -> Any:
    with ResponsesServer([Raw(case.status, case.headers, case.body)]) as server:

        async def go() -> Any:
            provider = OpenAIResponsesProvider(OPENAI_KEY, base_url=server.base_url)
            payload = {"model": "recorded-model", "stream": True, "input": []}
            try:
                return await provider.complete(WireRequest("responses", "recorded-model", payload))
            finally:
                await provider.aclose()

        return asyncio.run(go())


def test_recordings_cover_the_three_builtin_tools() -> None:
    kinds = {i["type"] for c in RECORDED for i in _done_items(c)}
    assert {"web_search_call", "file_search_call", "code_interpreter_call"} <= kinds


@pytest.mark.parametrize("case", RECORDED, ids=[c.id for c in RECORDED])
def test_recorded_response_keeps_its_server_items(case: Case) -> None:
    """Every built-in tool item of the recording is kept verbatim, in order; the text is
    the recorded text."""
    response = _replay(case)
    items = _done_items(case)
    kept = [i for i in items if i["type"].endswith("_call") and i["type"] != "function_call"]
    assert [b.data for b in response.message.server_tools] == kept
    assert {b.dialect for b in response.message.server_tools} == {"responses"}
    text = "".join(
        p["text"] for i in items if i["type"] == "message" for p in i["content"] if "text" in p
    )
    assert response.message.text == text


def test_recorded_web_search_goes_back_as_the_recorded_next_request() -> None:
    """The recording's second request (pydantic-ai sending the conversation back) holds
    the web_search_call item as the next request built here does."""
    [case] = [c for c in RECORDED if "web_search_tool_stream" in c.id and c.id.endswith("#0")]
    response = _replay(case)
    history = [Message.user("What is the weather in San Francisco today?"), response.message]
    history.append(Message.user("how about Mexico City?"))
    sent = build_request(RequestSettings(64), history, "responses", "gpt-5").payload["input"]
    [recorded_next] = [c for c in load_cases(("responses",)) if c.id == case.id.replace("#0", "#1")]
    recorded = [i for i in recorded_next.request["input"] if i.get("type") == "web_search_call"]
    assert [i for i in sent if i.get("type") == "web_search_call"] == recorded
    assert ToolUseBlock not in {type(b) for b in response.message.content}


def test_server_blocks_are_counted_and_summarized() -> None:
    """Their data counts towards the context (the provider bills what it is sent back),
    and a summarizer's transcript names them, cut like tool results."""
    message = Message.assistant((SEARCH_CALL, SEARCH_RESULT, TextBlock("Sunny.")))
    assert list(message_text(message)) == [
        json.dumps(SEARCH_CALL.data, separators=(",", ":")),
        json.dumps(SEARCH_RESULT.data, separators=(",", ":")),
        "Sunny.",
    ]
    assert render_transcript([Message.user("Weather?"), message], 40) == (
        "USER:\nWeather?\n\nASSISTANT:\n"
        '[server tool web_search call]: {"name":"web_search","input":{"query":"w [...]\n'
        '[server tool web_search result]: {"content":[{"type":"web_search_result", [...]\n'
        "Sunny."
    )


def test_the_live_view_lists_them_with_the_tool_calls() -> None:
    """The run detail's tool list shows a turn's server-tool call (its input) and result
    (what came back), outcome ``server`` and ``server result``."""
    response = ModelResponse(
        Message.assistant((SEARCH_CALL, SEARCH_RESULT, TextBlock("Sunny."))),
        "end_turn",
        model="claude-sonnet-4-5-20250929",
    )
    line = {**ModelResponseEvent(response, 1).to_dict(), "t": 0.5}
    tools = run_detail([line])["tools"]
    assert [(r["id"], r["name"], r["outcome"], r["t"]) for r in tools] == [
        ("srvtoolu_01", "web_search", "server", 0.5),
        ("srvtoolu_01", "web_search", "server result", 0.5),
    ]
    assert tools[0]["output"] == '{"query": "weather in Lisbon"}'
    assert tools[1]["output"].startswith('{"content": [{"type": "web_search_result"')


def test_a_paused_turn_is_sent_back_and_goes_on_in_the_same_message(make_harness: Any) -> None:
    """Anthropic pauses a long server-tool turn (stop_reason pause_turn): the next request
    sends the paused turn back as it was, last, and the continuation joins it in one
    assistant message, so the history stays valid."""
    script: list[Step] = [
        reply(SEARCH_CALL, stop_reason="pause_turn"),
        reply(SEARCH_RESULT, "Sunny."),
    ]
    params = HarnessParams(model=CLAUDE, server_tools=[ServerTool("web_search")])
    with AnthropicServer(script) as server:
        provider = AnthropicProvider(ANTHROPIC_KEY, base_url=server.base_url)
        state, _ = _run(make_harness(params, [provider]))
        second = server.requests[1].body
    assert second["messages"][-1] == {"role": "assistant", "content": [dict(SEARCH_CALL.data)]}
    assert [m.role for m in state.history] == ["user", "assistant"]
    assert state.history[1].content == (SEARCH_CALL, SEARCH_RESULT, TextBlock("Sunny."))
    assert (state.exit_reason, state.turns) == ("model_complete", 2)
    assert_valid_history(state.history)
