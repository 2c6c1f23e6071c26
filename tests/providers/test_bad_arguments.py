"""Broken tool-call JSON from the model is the model's mistake: the call stands with an
unreadable input, is answered with an ``is_error`` result naming the problem, and the run
goes on, its history valid for every dialect."""

from __future__ import annotations

import json
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._events import StreamEvent
from innerloop._json import unreadable_reason
from innerloop._messages import ToolResultBlock, ToolUseBlock
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.providers._anthropic import AnthropicAssembler
from innerloop.providers._normalize import normalize
from innerloop.providers._openai import OpenAIAssembler
from innerloop.providers._responses import ResponsesAssembler
from innerloop.testing import AnthropicServer, OpenAIServer, Raw, assert_valid_history, reply
from innerloop.tools import tool

BROKEN = '{ "city": ");\n{"'  # what SmolLM2-135M wrote on llama.cpp's server
SSE = (("content-type", "text/event-stream"),)


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def _sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events
    )


def _openai_body() -> bytes:
    call: dict[str, Any] = {"index": 0, "id": "call_1", "type": "function"}
    call["function"] = {"name": "weather", "arguments": BROKEN}
    return _sse(
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        "[DONE]",
    )


def _anthropic_body() -> bytes:
    message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant"}
    message["model"] = "m"
    message.update(content=[], usage={"input_tokens": 3, "output_tokens": 1})
    block = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": BROKEN}
    return _sse(
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    )


def _responses_body() -> dict[str, Any]:
    item = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": BROKEN}
    return {"object": "response", "id": "resp_1", "model": "m", "status": "completed"} | {
        "output": [item],
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def _assembled(dialect: str) -> ToolUseBlock:
    out: list[StreamEvent] = []
    if dialect == "responses":
        responses = ResponsesAssembler("p", "m")
        responses.feed_json(_responses_body(), out)
        [call] = responses.finish(out).tool_uses
        return call
    body = _openai_body() if dialect == "openai" else _anthropic_body()
    assembler = OpenAIAssembler("p", "m") if dialect == "openai" else AnthropicAssembler("p", "m")
    for frame in body.split(b"\n\n"):
        if frame:
            assembler.feed(frame.removeprefix(b"data: "), out)
    [call] = assembler.finish(out).tool_uses
    return call


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses"])
def test_each_assembler_keeps_the_call_with_an_unreadable_input(dialect: str) -> None:
    """No ProviderError: the call stands, its input the stand-in naming the problem."""
    call = _assembled(dialect)
    assert call.name == "weather"
    reason = unreadable_reason(call.input)
    assert reason is not None
    assert reason.startswith("not valid JSON (")
    assert repr(BROKEN) in reason


def test_a_cut_off_call_stays_incomplete() -> None:
    """Arguments cut by max_tokens are still a call never made, not an unreadable one."""
    out: list[StreamEvent] = []
    assembler = OpenAIAssembler("p", "m")
    body = _openai_body().replace(b'"tool_calls"}', b'"length"}')
    for frame in body.split(b"\n\n"):
        if frame:
            assembler.feed(frame.removeprefix(b"data: "), out)
    response = assembler.finish(out)
    assert response.tool_uses == ()
    assert response.incomplete_tool_uses == ("call_1",)


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_the_run_answers_the_call_with_an_error_and_goes_on(
    dialect: str, make_harness: Any
) -> None:
    """Over HTTP: one request, no retry; the call's result is an is_error naming the
    problem; the model's next turn ends the run; the history normalizes for both
    dialects."""
    body = _openai_body() if dialect == "openai" else _anthropic_body()
    server_cls = OpenAIServer if dialect == "openai" else AnthropicServer
    with server_cls([Raw(200, SSE, body), reply("Sorry, Oslo is sunny.")]) as server:
        if dialect == "openai":
            provider: Any = OpenAIProvider(base_url=server.base_url)
            model = "openai:m"
        else:
            provider = AnthropicProvider("k", base_url=server.base_url)
            model = "anthropic:claude-sonnet-4-5-20250929"
        params = HarnessParams(model=model, tools=[weather])
        state = make_harness(params, [provider]).run_sync("Weather in Oslo?")
        requests = len(server.requests)
    assert state.exit_reason == "model_complete"
    assert requests == 2
    [result] = [b for b in state.history[2].content if isinstance(b, ToolResultBlock)]
    assert result.is_error
    assert result.content.startswith(
        "the arguments of tool 'weather' could not be read (not valid JSON ("
    )
    assert result.content.endswith("the tool was not run; call it again with one JSON object")
    assert_valid_history(state.history)
    for wire_dialect in ("openai", "anthropic"):
        assert normalize(state.history, wire_dialect)
