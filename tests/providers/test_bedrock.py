"""Amazon Bedrock: AnthropicProvider on a prebuilt ``AsyncAnthropicBedrock``, against the
loopback Bedrock runtime (SigV4-signed requests, AWS event-stream answers)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest
from anthropic import AsyncAnthropicBedrock
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from innerloop import Harness, HarnessParams, HarnessState, Message, Thinking
from innerloop._errors import ErrorCategory, ParamsError, ProviderError
from innerloop._events import Backoff, Event, Fallback
from innerloop._messages import TextBlock, ToolResultBlock, ToolUseBlock
from innerloop.lowlevel import build_request
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider
from innerloop.providers._errors import error_from_status
from innerloop.providers._eventstream import EventStreamSplitter
from innerloop.providers._normalize import RequestSettings
from innerloop.providers._reasoning import family_of
from innerloop.testing import (
    BedrockServer,
    Fault,
    OpenAIServer,
    Oversized,
    RateLimit,
    StreamError,
    Truncated,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.testing._bedrock import chunk_message, event_message, exception_message
from innerloop.testing._servers import Step
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

BEDROCK_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
STREAM_PATH = f"/model/{BEDROCK_ID}/invoke-with-response-stream"
GPT = "openai:gpt-4o-2024-08-06"
OPENAI_KEY = "sk-proj-bedrock-fallback-0123456789"


def _client(server: BedrockServer, **overrides: Any) -> AsyncAnthropicBedrock:
    options: dict[str, Any] = {
        "aws_access_key": server.access_key,
        "aws_secret_key": server.secret_key,
        "aws_region": server.region,
        "base_url": server.url,
        "max_retries": 0,
    }
    return AsyncAnthropicBedrock(**{**options, **overrides})


def _complete(provider: AnthropicProvider) -> Any:
    async def go() -> Any:
        request = build_request(RequestSettings(64), [Message.user("q")], "anthropic", BEDROCK_ID)
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _failure(provider: AnthropicProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        _complete(provider)
    return caught.value


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echo:" + str(args.get("x", "")))


ECHO = ToolSpec(
    "echo", "Echo x back", {"type": "object", "properties": {"x": {"type": "string"}}}, _echo
)


def _run(harness: Any, prompt: str, events: list[Event] | None = None) -> HarnessState:
    """Run to the end on one loop, then close the providers' prebuilt clients (their
    owner's to close) on that loop."""

    async def go() -> HarnessState:
        run = harness.start(prompt)
        try:
            async for event in run.events():
                if events is not None:
                    events.append(event)
            return run.state  # type: ignore[no-any-return]
        finally:
            for provider in harness.providers.values():
                await provider.client.close()

    return asyncio.run(go())


def _params(**kw: Any) -> HarnessParams:
    return HarnessParams(
        model=f"bedrock:{BEDROCK_ID}", system="You are terse.", tools=(ECHO,), **kw
    )


class TestEncoder:
    """The loopback server's event-stream encoder, checked against botocore's decoder."""

    def test_botocore_decodes_chunk_and_exception_messages(self) -> None:
        """Headers, payload and both CRCs as botocore reads them, however the bytes are cut."""
        event = b'{"type":"message_stop"}'
        stream = chunk_message(event) + exception_message("throttlingException", "slow down")
        buffer = EventStreamBuffer()
        messages = []
        for i in range(0, len(stream), 7):
            buffer.add_data(stream[i : i + 7])
            messages += list(buffer)
        assert [m.headers for m in messages] == [
            {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
            {
                ":exception-type": "throttlingException",
                ":content-type": "application/json",
                ":message-type": "exception",
            },
        ]
        assert base64.b64decode(json.loads(messages[0].payload)["bytes"]) == event
        assert json.loads(messages[1].payload) == {"message": "slow down"}
        assert messages[0].prelude.total_length == len(chunk_message(event))

    def test_a_flipped_byte_fails_botocores_checksum(self) -> None:
        """The message CRC is real: botocore refuses a message one byte off."""
        broken = bytearray(event_message({":message-type": "event"}, b"{}"))
        broken[-5] ^= 0x01  # the payload's last byte
        buffer = EventStreamBuffer()
        buffer.add_data(bytes(broken))
        with pytest.raises(ChecksumMismatch):
            list(buffer)

    def test_the_sdks_own_stream_reads_the_server(self) -> None:
        """Anthropic's Bedrock client streaming on its own (botocore's decoder under it)
        reads the server's answer event by event."""
        with BedrockServer([reply("hi there, from the stream")]) as server:
            client = _client(server)

            async def go() -> list[Any]:
                try:
                    stream = await client.messages.create(
                        model=BEDROCK_ID,
                        max_tokens=8,
                        messages=[{"role": "user", "content": "q"}],
                        stream=True,
                        extra_body={"anthropic_version": "bedrock-2023-05-31"},
                    )
                    return [event async for event in stream]
                finally:
                    await client.close()

            events = asyncio.run(go())
        kinds = [e.type for e in events]
        assert kinds[:2] == ["message_start", "content_block_start"]
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        assert text == "hi there, from the stream"
        assert events[-2].delta.stop_reason == "end_turn"


class TestSplitter:
    """EventStreamSplitter: event-stream bytes -> the API events they carry."""

    def test_byte_by_byte(self) -> None:
        """A chunk split anywhere yields its event once; other events are skipped."""
        stream = (
            chunk_message(b'{"type":"ping"}')
            + event_message({":message-type": "event", ":event-type": "metadata"}, b"{}")
            + chunk_message(b'{"type":"message_stop"}')
        )
        splitter = EventStreamSplitter(provider="bedrock")
        found = [data for i in range(len(stream)) for data in splitter.feed(stream[i : i + 1])]
        assert found == [b'{"type":"ping"}', b'{"type":"message_stop"}']
        assert splitter.finish() == []

    def test_an_exception_message_is_its_error(self) -> None:
        """throttlingException mid-stream: rate limited, Bedrock's words kept."""
        splitter = EventStreamSplitter(provider="bedrock")
        with pytest.raises(ProviderError) as caught:
            splitter.feed(exception_message("throttlingException", "Too many requests"))
        assert caught.value.category is ErrorCategory.RATE_LIMITED
        assert str(caught.value.message) == "throttlingException: Too many requests"

    @pytest.mark.parametrize(
        "name", ["modelStreamErrorException", "internalServerException", "modelTimeoutException"]
    )
    def test_model_exceptions_are_transient(self, name: str) -> None:
        splitter = EventStreamSplitter(provider="bedrock")
        with pytest.raises(ProviderError) as caught:
            splitter.feed(exception_message(name, "boom"))
        assert caught.value.category is ErrorCategory.TRANSIENT

    def test_an_error_message_is_its_error(self) -> None:
        """The other kind of failure frame: ``:message-type error`` with its code and
        message in headers."""
        message = event_message(
            {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "x"},
            b"",
        )
        with pytest.raises(ProviderError) as caught:
            EventStreamSplitter(provider="bedrock").feed(message)
        assert (caught.value.category, caught.value.message) == (
            ErrorCategory.TRANSIENT,
            "InternalFailure: x",
        )

    def test_a_bad_checksum_is_malformed(self) -> None:
        broken = bytearray(chunk_message(b"{}"))
        broken[-1] ^= 0xFF
        with pytest.raises(ProviderError, match="event-stream frame cannot be read") as caught:
            EventStreamSplitter(provider="bedrock").feed(bytes(broken))
        assert caught.value.category is ErrorCategory.TRANSIENT

    def test_a_chunk_that_is_not_base64_json_is_malformed(self) -> None:
        message = event_message(
            {":message-type": "event", ":event-type": "chunk"}, b'{"bytes": "not base64!"}'
        )
        with pytest.raises(ProviderError, match=r'not \{"bytes": base64\}') as caught:
            EventStreamSplitter(provider="bedrock").feed(message)
        assert caught.value.category is ErrorCategory.TRANSIENT

    def test_a_stream_ending_inside_a_frame_is_malformed(self) -> None:
        splitter = EventStreamSplitter(provider="bedrock")
        assert splitter.feed(chunk_message(b"{}")[:-3]) == []
        with pytest.raises(ProviderError, match=r"ended inside an event-stream frame \(") as caught:
            splitter.finish()
        assert caught.value.category is ErrorCategory.TRANSIENT

    def test_an_event_past_max_event_bytes_is_refused_before_it_ends(self) -> None:
        message = chunk_message(b'{"type":"x","pad":"' + b"x" * 4000 + b'"}')
        splitter = EventStreamSplitter(1000, provider="bedrock")
        with pytest.raises(ProviderError, match="max_event_bytes=1,000"):
            splitter.feed(message[:1500])


class TestHTTPErrors:
    def test_amazon_error_type_header_names_the_error(self) -> None:
        """Bedrock's HTTP errors say their type in x-amzn-ErrorType, not in the body."""
        headers = {"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/"}
        error = error_from_status("bedrock", 429, headers, '{"message":"Too many requests"}')
        assert (error.category, error.message) == (
            ErrorCategory.RATE_LIMITED,
            "ThrottlingException: Too many requests",
        )

    def test_input_too_long_is_a_context_overflow(self) -> None:
        headers = {"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/coral/"}
        body = '{"message":"Input is too long for requested model."}'
        error = error_from_status("bedrock", 400, headers, body)
        assert error.category is ErrorCategory.CONTEXT_OVERFLOW


class TestRoute:
    """What the server checks, and what the provider sends."""

    def test_path_signature_and_body(self) -> None:
        """The model in the path, a SigV4 signature by the test credentials with
        x-amz-date, and a body with Bedrock's anthropic_version and no model or stream."""
        with BedrockServer([reply("hi from Bedrock")]) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")
            response = _complete(provider)
            sent = server.requests[0]
        assert response.message == Message.assistant("hi from Bedrock")
        assert response.model == "claude-sonnet-4-5-20250929"
        assert sent.path == STREAM_PATH
        auth = sent.headers["authorization"]
        date = sent.headers["x-amz-date"]
        assert auth.startswith(
            f"AWS4-HMAC-SHA256 Credential={server.access_key}/{date[:8]}/us-east-1/bedrock/"
            "aws4_request, SignedHeaders="
        )
        assert sent.body == {
            "max_tokens": 64,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
            "anthropic_version": "bedrock-2023-05-31",
        }

    def test_a_wrong_secret_fails_the_signature(self) -> None:
        """The server recomputes the signature: another secret is a fatal 403."""
        with BedrockServer([reply("never")]) as server:
            client = _client(server, aws_secret_key="not/the/secret/key/0123456789abcdefghijk")
            error = _failure(AnthropicProvider(client=client, name="bedrock"))
            played = server.played
        assert (error.category, error.status) == (ErrorCategory.FATAL, 403)
        assert error.message.startswith(
            "InvalidSignatureException: The request signature we calculated does not match"
        )
        assert played == 0

    def test_another_region_is_refused(self) -> None:
        with BedrockServer([reply("never")]) as server:
            error = _failure(AnthropicProvider(client=_client(server, aws_region="eu-west-1")))
        assert error.status == 403
        assert "credential scope AKIDLOOPBACK00000000/eu-west-1/bedrock is not" in error.message

    def test_concurrent_calls_are_each_checked_against_their_own_body(self) -> None:
        """Twenty calls at once on one client: every signature is checked against the
        body it covers (a body read on one connection never stands for another's)."""
        with BedrockServer([reply(f"answer {i}") for i in range(20)]) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")

            async def go() -> list[Any]:
                def request(i: int) -> Any:
                    history = [Message.user("q" * (i + 1))]
                    return build_request(RequestSettings(64), history, "anthropic", BEDROCK_ID)

                try:
                    return await asyncio.gather(*(provider.complete(request(i)) for i in range(20)))
                finally:
                    await provider.aclose()

            responses = asyncio.run(go())
            sent = [r.body["messages"][0]["content"][0]["text"] for r in server.requests]
        sizes = sorted(len(text) for text in sent)
        assert sorted(r.message.text for r in responses) == sorted(f"answer {i}" for i in range(20))
        assert sizes == list(range(1, 21))

    def test_a_session_token_is_sent_signed(self) -> None:
        """Temporary credentials: x-amz-security-token, signed with the rest."""
        token = "FwoGZXIvYXdzEloopback-session-token"
        with BedrockServer([reply("with a session")], session_token=token) as server:
            client = _client(server, aws_session_token=token)
            response = _complete(AnthropicProvider(client=client, name="bedrock"))
            sent = server.requests[0].headers
        assert response.message == Message.assistant("with a session")
        assert sent["x-amz-security-token"] == token
        assert "x-amz-security-token" in sent["authorization"].split("SignedHeaders=")[1]

    def test_a_missing_session_token_is_refused(self) -> None:
        with BedrockServer([reply("never")], session_token="expected-token") as server:
            error = _failure(AnthropicProvider(client=_client(server), name="bedrock"))
        assert error.status == 403
        assert "security token included in the request is invalid" in error.message

    def test_a_bedrock_api_key_is_a_bearer_token(self) -> None:
        """A Bedrock API key replaces SigV4: Authorization: Bearer, and the key is kept out
        of the provider's repr."""
        key = "ABSKbG9vcGJhY2sta2V5LTAxMjM0NTY3ODk="
        with BedrockServer([reply("with a key")], api_key=key) as server:
            client = AsyncAnthropicBedrock(
                api_key=key, aws_region=server.region, base_url=server.url, max_retries=0
            )
            provider = AnthropicProvider(client=client, name="bedrock")
            shown = repr(provider)
            response = _complete(provider)
            sent = server.requests[0].headers
        assert response.message == Message.assistant("with a key")
        assert sent["authorization"] == f"Bearer {key}"
        assert "x-amz-date" not in sent
        assert key not in shown

    def test_a_wrong_api_key_is_refused(self) -> None:
        with BedrockServer([reply("never")], api_key="the-right-key-0123456789") as server:
            client = AsyncAnthropicBedrock(
                api_key="a-wrong-key-0123456789",
                aws_region=server.region,
                base_url=server.url,
                max_retries=0,
            )
            error = _failure(AnthropicProvider(client=client, name="bedrock"))
        assert (error.category, error.status) == (ErrorCategory.FATAL, 403)
        assert "or this server's api_key as a Bearer token" in error.message

    def test_the_sdks_default_anthropic_version_is_refused(self) -> None:
        """Sent by the SDK alone, the body carries the first-party API version, which
        Bedrock refuses: why the provider sends bedrock-2023-05-31 itself."""
        with BedrockServer([reply("never")]) as server:
            client = _client(server)

            async def go() -> Any:
                try:
                    return await client.messages.create(
                        model=BEDROCK_ID, max_tokens=8, messages=[{"role": "user", "content": "q"}]
                    )
                finally:
                    await client.close()

            with pytest.raises(Exception, match="anthropic_version must be 'bedrock-2023-05-31'"):
                asyncio.run(go())
            assert server.requests[0].path == f"/model/{BEDROCK_ID}/invoke"

    def test_the_wire_route_refuses_bedrock_at_construction(self) -> None:
        """Bedrock signs each request (SigV4): the provider says so when built with a
        transport, naming the way out."""
        with BedrockServer() as server:
            client = _client(server)
            with pytest.raises(ValueError, match="drop the transport argument") as caught:
                AnthropicProvider(client=client, transport=AsyncioTransport())
            asyncio.run(client.close())
        assert "Bedrock's per-request SigV4 signing and per-model path" in str(caught.value)


class TestStreamFaults:
    """Faults over the real SDK route, each taking its category."""

    @pytest.mark.parametrize(
        ("step", "category", "status", "message"),
        [
            (RateLimit(None), ErrorCategory.RATE_LIMITED, 429, "ThrottlingException: "),
            (
                StreamError("throttlingException", "Too many requests, please wait", 2),
                ErrorCategory.RATE_LIMITED,
                None,
                "throttlingException: Too many requests, please wait",
            ),
            (Fault.server_error(500), ErrorCategory.TRANSIENT, 500, "InternalServerException: "),
            (Fault.overloaded(), ErrorCategory.TRANSIENT, 503, "ServiceUnavailableException: "),
            (
                StreamError("modelStreamErrorException", "the model stream broke", 3),
                ErrorCategory.TRANSIENT,
                None,
                "modelStreamErrorException: the model stream broke",
            ),
            (Truncated(reply("a long answer " * 10), 3), ErrorCategory.TRANSIENT, None, ""),
            (Fault.malformed(), ErrorCategory.TRANSIENT, None, "malformed JSON in the stream"),
            (Fault("corrupt_frame"), ErrorCategory.TRANSIENT, None, "malformed response: "),
            (Fault.context_overflow(), ErrorCategory.CONTEXT_OVERFLOW, 400, "ValidationException"),
            (Oversized(2000, 256), ErrorCategory.TRANSIENT, None, "max_event_bytes=1,000"),
            (Fault("wrong_shape"), ErrorCategory.TRANSIENT, None, "an event of the wrong shape"),
            (Fault("missing_index"), ErrorCategory.TRANSIENT, None, "the wrong shape (KeyError"),
            (Fault.dropped(3), ErrorCategory.TRANSIENT, None, "mid-stream: RemoteProtocolError"),
            (Fault.empty(), ErrorCategory.TRANSIENT, None, "empty response: no message_start"),
        ],
    )
    def test_category(
        self, step: Step, category: ErrorCategory, status: int | None, message: str
    ) -> None:
        with BedrockServer([step]) as server:
            client = _client(server)
            error = _failure(AnthropicProvider(client=client, max_event_bytes=1000))
        assert (error.category, error.status) == (category, status)
        assert message in error.message


class TestHarness:
    """Whole runs through the machine against the loopback Bedrock runtime."""

    def test_a_tool_calling_run(self, make_harness: Any) -> None:
        """The model calls a tool, sees its result in the next signed request, answers."""
        script: list[Step] = [
            reply("Let me echo.", tool_call("echo", {"x": "hi"}, id="toolu_01B")),
            reply("It said echo:hi."),
        ]
        with BedrockServer(script) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")
            state = _run(make_harness(_params(), [provider]), "Echo hi, please.")
            requests = server.requests
        assert state.exit_reason == "model_complete"
        assert state.history == [
            Message.user("Echo hi, please."),
            Message(
                "assistant",
                (TextBlock("Let me echo."), ToolUseBlock("toolu_01B", "echo", {"x": "hi"})),
            ),
            Message("user", (ToolResultBlock("toolu_01B", "echo:hi"),)),
            Message.assistant("It said echo:hi."),
        ]
        assert state.resolved_models == ["claude-sonnet-4-5-20250929"]  # each model once
        assert [r.path for r in requests] == [STREAM_PATH, STREAM_PATH]
        assert requests[1].body["messages"][-1] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01B", "content": "echo:hi"}],
        }
        assert all(r.body["anthropic_version"] == "bedrock-2023-05-31" for r in requests)

    def test_throttling_backs_off_and_retries(self, make_harness: Any, clock: Any) -> None:
        """A 429 ThrottlingException and a throttlingException mid-stream both back off
        (1 s, then 2 s) and the run completes on the third call."""
        script: list[Step] = [
            RateLimit(None),
            StreamError("throttlingException", "Too many requests, please wait", 2),
            reply("after the throttling"),
        ]
        with BedrockServer(script) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")
            state = _run(make_harness(_params(), [provider]), "hi")
            played = server.played
        assert state.exit_reason == "model_complete"
        assert state.history[-1] == Message.assistant("after the throttling")
        assert clock.sleeps == [1.0, 2.0]
        assert state.errors == {"rate_limited": 2}
        assert played == 3

    def test_a_cut_stream_is_retried_once(self, make_harness: Any) -> None:
        with BedrockServer([Truncated(reply("cut " * 20), 3), reply("whole")]) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")
            state = _run(make_harness(_params(), [provider]), "hi")
        assert state.exit_reason == "model_complete"
        assert state.history[-1] == Message.assistant("whole")
        assert state.errors == {"transient": 1}

    def test_fallback_to_openai_keeps_a_valid_history(self, make_harness: Any) -> None:
        """A tool call on Bedrock, then throttling past the retries: the run falls back to
        OpenAI with the tool exchange converted, and the history stays valid."""
        script: list[Step] = [
            reply("Let me echo.", tool_call("echo", {"x": "hi"}, id="toolu_01C")),
            *[RateLimit(None)] * 6,
        ]
        with BedrockServer(script) as b, OpenAIServer([reply("It said echo:hi.")]) as o:
            providers = [
                AnthropicProvider(client=_client(b), name="bedrock"),
                OpenAIProvider(OPENAI_KEY, base_url=o.base_url),
            ]
            events: list[Event] = []
            harness = make_harness(_params(fallbacks=(GPT,)), providers)
            state = _run(harness, "Echo hi, please.", events)
            sent = o.requests[0]
            bedrock_calls = len(b.requests)
        assert state.exit_reason == "model_complete"
        assert state.degraded is True
        assert [type(e).__name__ for e in events if isinstance(e, Backoff | Fallback)] == [
            "Backoff"
        ] * 5 + ["Fallback"]
        assert bedrock_calls == 7
        assert_valid_history(state.history)
        assert state.resolved_models == ["claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06"]
        assert sent.body["messages"] == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Echo hi, please."},
            {
                "role": "assistant",
                "content": "Let me echo.",
                "tool_calls": [
                    {
                        "id": "toolu_01C",
                        "type": "function",
                        "function": {"name": "echo", "arguments": '{"x":"hi"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01C", "content": "echo:hi"},
        ]
        assert state.history[-1] == Message.assistant("It said echo:hi.")


class TestReasoning:
    @pytest.mark.parametrize(
        ("model", "family"),
        [
            ("anthropic.claude-sonnet-4-5-20250929-v1:0", "Claude 4"),
            ("us.anthropic.claude-opus-4-6-v1:0", "Claude 4.6"),
            ("global.anthropic.claude-3-7-sonnet-20250219-v1:0", "Claude 3.7"),
            ("anthropic.claude-3-5-haiku-20241022-v1:0", "no reasoning"),
        ],
    )
    def test_bedrock_ids_have_their_claude_family(self, model: str, family: str) -> None:
        """A Bedrock id is read as the Claude model it names, so thinking is checked."""
        found = family_of(model)
        assert found is not None
        assert found.name == family

    def test_thinking_on_a_bedrock_model_is_checked_and_sent(self) -> None:
        """A budget reaches Bedrock's body; an effort Claude 4 does not take is refused."""
        params = _params(thinking=Thinking(2048), max_output_tokens=4096)
        with BedrockServer([reply("thought")]) as server:
            provider = AnthropicProvider(client=_client(server), name="bedrock")
            _run(Harness(params, [provider]), "hi")
            sent = server.requests[0].body
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        with pytest.raises(ParamsError, match=r"takes thinking\.budget_tokens"):
            _params(thinking=Thinking(effort="low"))
