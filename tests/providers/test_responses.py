"""The OpenAI Responses provider: its wire format, its faults over loopback HTTP, and
fallback between it, Anthropic and Chat Completions.

No recorded Responses API traffic is in the conformance corpus (shared/corpus/INDEX.md
lists Anthropic Messages and Chat Completions only): the loopback ``ResponsesServer``
builds its events after the openai SDK's own types (``openai.types.responses``), and a
test below checks each event it sends parses as the SDK's ``ResponseStreamEvent``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._errors import ProviderError
from innerloop._events import (
    Event,
    Fallback,
    MessageComplete,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.lowlevel import build_request
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    OpenAIResponsesProvider,
    WireRequest,
)
from innerloop.providers._normalize import RESPONSES_SIGNATURE, RequestSettings
from innerloop.testing import (
    AnthropicServer,
    Fault,
    OpenAIServer,
    RateLimit,
    Raw,
    ResponsesServer,
    StreamError,
    Trickle,
    reply,
    thinking,
    tool_call,
)
from innerloop.testing._servers import Step
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

KEY = "sk-proj-responses-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-responses-0123456789abcdef"
JSON = (("content-type", "application/json"),)
ROUTES = ("sdk", "wire")
GPT5 = "openai:gpt-5-2025-08-07"
CLAUDE = "anthropic:claude-sonnet-4-5-20250929"
CHAT = "chat:gpt-4o-2024-08-06"


def _signature(id: str, encrypted: str) -> str:
    return RESPONSES_SIGNATURE + json.dumps(
        {"id": id, "encrypted_content": encrypted}, separators=(",", ":")
    )


def _provider(server: ResponsesServer, route: str = "sdk", **kw: Any) -> OpenAIResponsesProvider:
    transport = AsyncioTransport() if route == "wire" else None
    return OpenAIResponsesProvider(KEY, base_url=server.base_url, transport=transport, **kw)


def _request(model: str = "gpt-5-2025-08-07") -> WireRequest:
    history = [Message.user("hi")]
    return build_request(RequestSettings(64, "Be terse."), history, "responses", model)


def _complete(server: ResponsesServer, route: str = "sdk", **kw: Any) -> Any:
    async def go() -> Any:
        provider = _provider(server, route, **kw)
        try:
            return await provider.complete(_request())
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()

    return asyncio.run(go())


class TestNormalize:
    def test_history_becomes_input_items(self) -> None:
        """Reasoning (only its own), text, calls and results become input items in order."""
        history = [
            Message.user("Look it up."),
            Message(
                "assistant",
                (
                    ThinkingBlock("Anthropic's", "anthropic-sig"),
                    ThinkingBlock("plan", _signature("rs_1", "ENC")),
                    TextBlock("Looking."),
                    ToolUseBlock("call_1", "lookup", {"q": "x"}),
                ),
            ),
            Message("user", (ToolResultBlock("call_1", "none", is_error=True),)),
        ]
        tools = ({"name": "lookup", "description": "Look up.", "input_schema": {}},)
        settings = RequestSettings(100, "Be terse.", tools=tools, tool_choice="any")
        request = build_request(settings, history, "responses", "gpt-5")
        assert request.payload == {
            "model": "gpt-5",
            "stream": True,
            "max_output_tokens": 100,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "instructions": "Be terse.",
            "tools": [
                {
                    "type": "function",
                    "name": "lookup",
                    "description": "Look up.",
                    "parameters": {},
                    "strict": False,
                }
            ],
            "tool_choice": "required",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Look it up."}]},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "plan"}],
                    "encrypted_content": "ENC",
                },
                {"role": "assistant", "content": "Looking."},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "lookup",
                    "arguments": '{"q":"x"}',
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": "[tool error] none",
                },
            ],
        }

    def test_other_dialects_drop_responses_reasoning(self) -> None:
        """A Responses reasoning item is never sent to Anthropic (it would be rejected)."""
        history = [
            Message.user("q"),
            Message("assistant", (ThinkingBlock("plan", _signature("rs_1", "E")), TextBlock("a"))),
            Message.user("more"),
        ]
        anthropic = build_request(RequestSettings(10), history, "anthropic", "claude")
        assert anthropic.payload["messages"][1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}],
        }

    def test_unknown_dialect_lists_the_known_ones(self) -> None:
        """A misspelt dialect names the three there are."""
        with pytest.raises(ValueError, match="expected one of anthropic, openai, responses"):
            build_request(RequestSettings(10), [], "respones", "m")


class TestStream:
    @pytest.mark.parametrize("route", ROUTES)
    def test_reasoning_text_and_call(self, route: str) -> None:
        """A reasoning item, text and a function call: events, blocks, usage, stop, model
        and response id."""
        usage = Usage(100, 40, 20, 0, 30)
        script = [
            reply(
                thinking("Plan the lookup."),
                "Looking it up.",
                tool_call("lookup", {"query": "weather"}, id="call_9"),
                usage=usage,
                model="gpt-5-2025-08-07",
            )
        ]

        async def go() -> tuple[list[Any], Any]:
            provider = _provider(server, route)
            try:
                stream = await provider.open(_request())
                events = [e async for e in stream]
            finally:
                await provider.aclose()
            final = events[-1]
            assert isinstance(final, MessageComplete)
            return events, final.response

        with ResponsesServer(script, chunk_size=6) as server:
            events, response = asyncio.run(go())
            sent = server.requests[0]
        assert sent.path == "/v1/responses"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.body["input"] == [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        ]
        kinds = {type(e) for e in events}
        assert {ThinkingDelta, TextDelta, ToolUseStart, ToolInputDelta, ToolUseComplete} <= kinds
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Looking it up."
        assert response.message.content == (
            ThinkingBlock("Plan the lookup.", _signature("rs_0001", "enc:Plan the lookup.")),
            TextBlock("Looking it up."),
            ToolUseBlock("call_9", "lookup", {"query": "weather"}),
        )
        assert response.stop_reason == "tool_use"
        assert response.usage == usage
        assert response.model == "gpt-5-2025-08-07"
        assert response.id == "resp_0004"  # the response object's id

    def test_max_output_tokens_is_max_tokens(self) -> None:
        """An incomplete response (max_output_tokens) stops as max_tokens, with the
        call cut off left out and named."""
        step = reply("partial", stop_reason="max_tokens", incomplete_tool=("lookup", '{"q'))
        with ResponsesServer([step]) as server:
            response = _complete(server)
        assert response.stop_reason == "max_tokens"
        assert response.message.content == (TextBlock("partial"),)
        assert len(response.incomplete_tool_uses) == 1

    def test_events_parse_as_the_sdks_types(self) -> None:
        """Every event the loopback server sends is a valid ``ResponseStreamEvent``."""
        from openai.types.responses import ResponseStreamEvent
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
        server = ResponsesServer()
        frames = server.frames(
            reply(thinking("t"), "text", tool_call("f", {"a": 1}, id="c1")), "gpt-5"
        )
        parsed = [adapter.validate_json(f.split(b"data: ", 1)[1]) for f in frames]
        assert parsed[0].type == "response.created"
        assert parsed[-1].type == "response.completed"


class TestFaults:
    @pytest.mark.parametrize(
        ("step", "category", "retry_after"),
        [
            (RateLimit(3.0), "rate_limited", 3.0),
            (RateLimit(1.5, "ms"), "rate_limited", 1.5),
            (RateLimit(None), "rate_limited", None),
            (Fault.overloaded(), "overloaded", None),
            (Fault.server_error(500), "transient", None),
            (Fault.context_overflow(), "context_overflow", None),
            (Fault.fatal(401), "fatal", None),
            (Raw(404, (("content-type", "text/plain"),), b"no such route"), "fatal", None),
            (Fault.empty(), "transient", None),
            (Fault.dropped(), "transient", None),
            (Fault.malformed(), "transient", None),
            (Raw(200, JSON, b""), "transient", None),
            (Raw(200, JSON, b'{"unexpected": true}'), "transient", None),
            (Fault("wrong_shape"), "transient", None),
            (Fault("missing_index"), "transient", None),
            (Fault("corrupt_gzip"), "transient", None),
            (Trickle(100, limit=1000), "transient", None),
            (StreamError("server_error", "The server had an error"), "transient", None),
        ],
    )
    @pytest.mark.parametrize("route", ROUTES)
    def test_each_fault_over_http(
        self, step: Step, category: str, retry_after: float | None, route: str
    ) -> None:
        """The same faults as the other two providers land in the same categories."""
        with ResponsesServer([step]) as server:
            error = _complete(server, route)
        assert isinstance(error, ProviderError)
        assert error.category == category
        assert error.retry_after == retry_after
        assert KEY not in str(error)
        assert KEY not in (error.raw or "")

    def test_missing_output_index_is_malformed(self) -> None:
        """An arguments delta that names no output item is a malformed response."""
        with ResponsesServer([Fault("missing_index")]) as server:
            error = _complete(server)
        assert error.message.startswith(
            "malformed response: an event of the wrong shape (KeyError: 'output_index')"
        )

    def test_no_key_says_where_to_put_one(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a key or a base URL construction names the variable."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(ValueError, match="OPENAI_API_KEY"):
            OpenAIResponsesProvider()


QUOTA = "You exceeded your current quota, please check your plan and billing details."


def _error_stream(error_event: dict[str, Any]) -> Raw:
    """A 200 stream that opens, then carries an ``error`` event and ``response.failed``."""
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r1"}}
    inner = error_event.get("error", error_event)
    failed = {
        "type": "response.failed",
        "sequence_number": 2,
        "response": {"id": "r1", "status": "failed", "error": inner},
    }
    body = b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
        for e in (created, {**error_event, "sequence_number": 1}, failed)
    )
    return Raw(200, (("content-type", "text/event-stream"),), body)


def _nested(kind: str, code: str | None, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "code": code, "message": message}}


class TestErrorEvents:
    @pytest.mark.parametrize(
        ("event", "category", "message"),
        [
            (
                _nested("insufficient_quota", "insufficient_quota", QUOTA),
                "fatal",
                f"insufficient_quota: {QUOTA}",
            ),
            (
                _nested("invalid_request_error", "invalid_value", "Invalid 'input[0]'."),
                "fatal",
                "invalid_request_error: Invalid 'input[0]'.",
            ),
            (
                _nested("requests", "rate_limit_exceeded", "Rate limit reached."),
                "rate_limited",
                "requests: Rate limit reached.",
            ),
            (
                _nested("server_error", "server_error", "The server had an error."),
                "transient",
                "server_error: The server had an error.",
            ),
            (
                {"type": "error", "code": "insufficient_quota", "message": QUOTA, "param": None},
                "fatal",
                f"insufficient_quota: {QUOTA}",
            ),
        ],
    )
    @pytest.mark.parametrize("route", ROUTES)
    def test_an_error_event_keeps_its_message_and_code(
        self, event: dict[str, Any], category: str, message: str, route: str
    ) -> None:
        """An error event in a 200 stream (nested under ``error``, or flat as the SDK's
        ``ResponseErrorEvent``) keeps the message the SDK's ``APIError`` would carry, its
        code in the raw body, and takes its category from its type, else its code."""
        with ResponsesServer([_error_stream(event)]) as server:
            error = _complete(server, route)
        assert isinstance(error, ProviderError)
        assert (error.category, error.message) == (category, message)
        assert f'"code": "{event.get("error", event)["code"]}"' in (error.raw or "")

    def test_out_of_quota_fails_the_run_without_a_retry(self, make_harness: Any) -> None:
        """An out-of-quota error event ends the run at once, failed, quoting the message."""
        event = _nested("insufficient_quota", "insufficient_quota", QUOTA)
        with ResponsesServer([_error_stream(event), reply("never")]) as server:
            provider = _provider(server)
            state = make_harness(HarnessParams(model=GPT5), {"openai": provider}).run_sync("hi")
            sent = len(server.requests)
        assert state.exit_reason == "failed"
        assert sent == 1
        assert state.diagnostic is not None
        assert state.diagnostic["error"]["category"] == "fatal"
        assert QUOTA in state.diagnostic["error_message"]


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echo:" + str(args.get("x", "")))


ECHO = ToolSpec(
    "echo", "Echo x back", {"type": "object", "properties": {"x": {"type": "string"}}}, _echo
)


def _run(harness: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    state = harness.run_sync("Echo hi, please.", on_event=events.append)
    return state, events


def test_reasoning_items_go_back_with_the_history(make_harness: Any) -> None:
    """A tool turn's reasoning item is sent back (encrypted) with the call and its result."""
    script = [
        reply(thinking("I should echo."), tool_call("echo", {"x": "hi"}, id="call_1")),
        reply("It said echo:hi."),
    ]
    params = HarnessParams(model=GPT5, system="Be terse.", tools=(ECHO,))
    with ResponsesServer(script) as server:
        state, _ = _run(make_harness(params, [_provider(server)]))
        second = server.requests[1].body
    assert state.exit_reason == "model_complete"
    assert second["store"] is False
    assert second["include"] == ["reasoning.encrypted_content"]
    assert second["input"][1:] == [
        {
            "type": "reasoning",
            "id": "rs_0001",
            "summary": [{"type": "summary_text", "text": "I should echo."}],
            "encrypted_content": "enc:I should echo.",
        },
        {"type": "function_call", "call_id": "call_1", "name": "echo", "arguments": '{"x":"hi"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "echo:hi"},
    ]


def test_fallback_anthropic_to_responses_to_chat(make_harness: Any) -> None:
    """Anthropic (signed thinking) -> Responses (reasoning item) -> Chat Completions: each
    gets a valid history in its own format, and the run completes."""
    anthropic_script: list[Step] = [
        reply(thinking("Echo it.", "anthropic-sig"), tool_call("echo", {"x": "hi"}, id="toolu_1")),
        *[RateLimit(None)] * 6,
    ]
    responses_script: list[Step] = [
        reply(thinking("Again."), tool_call("echo", {"x": "again"}, id="call_2")),
        *[RateLimit(None)] * 6,
    ]
    params = HarnessParams(model=CLAUDE, fallbacks=(GPT5, CHAT), system="Be terse.", tools=(ECHO,))
    with (
        AnthropicServer(anthropic_script) as a,
        ResponsesServer(responses_script) as r,
        OpenAIServer([reply("Done.")]) as o,
    ):
        providers = [
            AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url),
            _provider(r),
            OpenAIProvider(KEY, base_url=o.base_url, name="chat"),
        ]
        state, events = _run(make_harness(params, providers))
        to_responses = r.requests[0].body["input"]
        to_chat = o.requests[0].body["messages"]
    assert state.exit_reason == "model_complete"
    assert [(e.from_provider, e.to_provider) for e in events if isinstance(e, Fallback)] == [
        ("anthropic", "openai"),
        ("openai", "chat"),
    ]
    # Anthropic's signed thinking is not sent to OpenAI; the call and its result are
    assert [i.get("type", i.get("role")) for i in to_responses] == [
        "user",
        "function_call",
        "function_call_output",
    ]
    assert [m["role"] for m in to_chat] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert state.history[-1] == Message.assistant("Done.")
