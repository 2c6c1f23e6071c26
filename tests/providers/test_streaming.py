"""Parsing the two wire formats into stream events: the awkward cases of real traffic."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from innerloop import ProviderError
from innerloop._events import (
    MessageComplete,
    ServerToolEvent,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._messages import (
    ModelResponse,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.providers import AnthropicProvider, OpenAIProvider, WireRequest
from innerloop.providers._anthropic import AnthropicAssembler
from innerloop.providers._http import SSESplitter
from innerloop.providers._openai import OpenAIAssembler
from innerloop.testing import AnthropicServer, OpenAIServer, Raw

KEY = "sk-ant-streaming-0123456789abcdef"
SSE = (("content-type", "text/event-stream"),)


def frame(data: dict[str, Any], pad: str = "") -> bytes:
    return f"event: {data.get('type', 'x')}\ndata: {json.dumps(data)[:-1]}{pad}}}\n\n".encode()


def start(model: str = "claude-x-20250101", **usage: int) -> bytes:
    message = {"model": model, "usage": {"input_tokens": 7, "output_tokens": 1, **usage}}
    return frame({"type": "message_start", "message": message})


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return frame({"type": "content_block_start", "index": index, "content_block": block})


def delta(index: int, d: dict[str, Any], pad: str = "") -> bytes:
    return frame({"type": "content_block_delta", "index": index, "delta": d}, pad)


def stop(index: int) -> bytes:
    return frame({"type": "content_block_stop", "index": index}, "      ")


def end(reason: str, **usage: Any) -> bytes:
    body = {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}
    return frame(body) + b'event: message_stop\ndata: {"type":"message_stop"}'


PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def run_anthropic(body: bytes) -> tuple[list[StreamEvent], ModelResponse]:
    events: list[StreamEvent] = []
    assembler = AnthropicAssembler("anthropic", "asked-model")
    splitter = SSESplitter()
    for data in [*splitter.feed(body), *splitter.finish()]:
        assembler.feed(data, events)
    return events, assembler.finish(events)


def _over_http(server_cls: type, body: bytes, **kw: Any) -> ProviderError:
    """The error a provider raises for ``body``, streamed by a loopback server."""
    provider_cls = AnthropicProvider if server_cls is AnthropicServer else OpenAIProvider

    async def go() -> ProviderError:
        async with server_cls([Raw(200, SSE, body)]) as server:
            provider = provider_cls(KEY, base_url=server.base_url, **kw)
            payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
            try:
                await provider.complete(WireRequest(provider.dialect, "m", payload))
            except ProviderError as exc:
                return exc
            finally:
                await provider.aclose()
        raise AssertionError("no error")

    return asyncio.run(go())


def run_openai(chunks: list[dict[str, Any]]) -> tuple[list[StreamEvent], ModelResponse]:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    events: list[StreamEvent] = []
    assembler = OpenAIAssembler("openai", "asked-model")
    for data in SSESplitter().feed(body + b"data: [DONE]\n\n"):
        assembler.feed(data, events)
    return events, assembler.finish(events)


class TestAnthropicStream:
    def test_pings_anywhere_and_padded_json(self) -> None:
        """Pings before, between and inside blocks are ignored; padded JSON parses."""
        body = (
            start()
            + PING
            + block_start(0, {"type": "text", "text": ""})
            + PING
            + delta(0, {"type": "text_delta", "text": "Hel"}, "        ")
            + delta(0, {"type": "text_delta", "text": ""})
            + delta(0, {"type": "text_delta", "text": "lo"})
            + stop(0)
            + PING
            + end("end_turn", output_tokens=3)
        )
        events, response = run_anthropic(body)
        assert events == [TextDelta(0, "Hel"), TextDelta(0, "lo")]
        assert response.message.content == (TextBlock("Hello"),)
        assert response.usage == Usage(7, 3)
        assert response.model == "claude-x-20250101"

    def test_tool_without_arguments_gets_empty_object(self) -> None:
        """The single empty input_json_delta of a no-argument tool means input ``{}``."""
        body = (
            start()
            + block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}})
            + PING
            + delta(0, {"type": "input_json_delta", "partial_json": ""})
            + stop(0)
            + end("tool_use", output_tokens=9)
        )
        events, response = run_anthropic(body)
        call = ToolUseBlock("toolu_1", "now", {})
        assert events == [ToolUseStart(0, "toolu_1", "now"), ToolUseComplete(0, call)]
        assert response.message.content == (call,)
        assert response.stop_reason == "tool_use"

    def test_tool_cut_at_max_tokens_is_incomplete(self) -> None:
        """A tool_use with no block stop is listed as incomplete, never in the message."""
        body = (
            start()
            + block_start(0, {"type": "text", "text": ""})
            + delta(0, {"type": "text_delta", "text": "Sure."})
            + stop(0)
            + block_start(1, {"type": "tool_use", "id": "toolu_2", "name": "write", "input": {}})
            + delta(1, {"type": "input_json_delta", "partial_json": '{"path": "a.t'})
            + end("max_tokens", output_tokens=50)
        )
        events, response = run_anthropic(body)
        assert ToolInputDelta(1, "toolu_2", '{"path": "a.t') in events
        assert not any(isinstance(e, ToolUseComplete) for e in events)
        assert response.message.content == (TextBlock("Sure."),)
        assert response.incomplete_tool_uses == ("toolu_2",)
        assert response.stop_reason == "max_tokens"

    def test_thinking_and_redacted_thinking_keep_signature_and_data(self) -> None:
        """Thinking keeps its signature; redacted thinking (no deltas) keeps its data."""
        body = (
            start()
            + block_start(0, {"type": "thinking", "thinking": "", "signature": ""})
            + delta(0, {"type": "thinking_delta", "thinking": "hmm"})
            + delta(0, {"type": "thinking_delta", "thinking": ""})
            + delta(0, {"type": "signature_delta", "signature": "EqQBsig"})
            + stop(0)
            + block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgB"})
            + PING
            + stop(1)
            + block_start(2, {"type": "text", "text": ""})
            + delta(2, {"type": "text_delta", "text": "ok"})
            + stop(2)
            + end("end_turn", output_tokens=20, output_tokens_details={"thinking_tokens": 12})
        )
        events, response = run_anthropic(body)
        assert events == [ThinkingDelta(0, "hmm"), TextDelta(2, "ok")]
        assert response.message.content == (
            ThinkingBlock("hmm", "EqQBsig"),
            RedactedThinkingBlock("EmwKAhgB"),
            TextBlock("ok"),
        )
        assert response.usage.thinking_tokens == 12

    def test_cumulative_usage_with_cache_tokens(self) -> None:
        """message_delta usage overrides message_start's, cache counts included."""
        body = start(cache_read_input_tokens=100, cache_creation_input_tokens=30) + end(
            "end_turn", output_tokens=4, input_tokens=8, cache_read_input_tokens=101
        )
        _, response = run_anthropic(body)
        assert response.usage == Usage(8, 4, 101, 30)

    @pytest.mark.parametrize(
        "reason", ["end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"]
    )
    def test_every_stop_reason_is_kept(self, reason: str) -> None:
        """Each Anthropic stop reason reaches the response as is."""
        _, response = run_anthropic(start() + end(reason, output_tokens=1))
        assert response.stop_reason == reason

    def test_error_event_mid_stream_is_overloaded(self) -> None:
        """An ``event: error`` overloaded_error inside a 200 stream raises overloaded."""
        error = {
            "type": "error",
            "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"},
        }
        body = start() + block_start(0, {"type": "text", "text": ""}) + frame(error)
        with pytest.raises(ProviderError) as caught:
            run_anthropic(body)
        assert caught.value.category == "overloaded"
        assert caught.value.message == "overloaded_error: Overloaded"

    def test_server_tool_blocks_are_kept_verbatim(self) -> None:
        """server_tool_use (its input from JSON deltas, no tool_input_delta events) and its
        result are kept in the message as ServerToolBlock and reported as server_tool
        events; the text after them is text."""
        body = (
            start()
            + block_start(
                0,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            )
            + delta(0, {"type": "input_json_delta", "partial_json": '{"query": "x"}'})
            + stop(0)
            + block_start(
                1, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
            )
            + stop(1)
            + block_start(2, {"type": "text", "text": ""})
            + delta(
                2, {"type": "citations_delta", "citation": {"type": "web_search_result_location"}}
            )
            + delta(2, {"type": "text_delta", "text": "Found."})
            + stop(2)
            + end("end_turn", output_tokens=5)
        )
        events, response = run_anthropic(body)
        call = ServerToolBlock(
            "anthropic",
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "x"},
            },
        )
        result = ServerToolBlock(
            "anthropic",
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        )
        assert events == [
            ServerToolEvent(0, call),
            ServerToolEvent(1, result),
            TextDelta(2, "Found."),
        ]
        assert response.message.content == (call, result, TextBlock("Found."))

    @pytest.mark.parametrize(
        "wrong",
        [
            b'data: ["a", "list"]\n\n',
            b"data: 42\n\n",
            b'data: {"type": "content_block_delta", "delta": {"type": "text_delta"}}\n\n',
            b'data: {"type": "content_block_start", "index": 0}\n\n',
            b'data: {"type": "message_delta", "delta": "end_turn"}\n\n',
        ],
    )
    def test_valid_json_of_the_wrong_shape_is_malformed(self, wrong: bytes) -> None:
        """JSON that is not an event this dialect sends is a transient malformed response
        (retried once), not a fatal error; the payload is kept as the raw body."""
        body = start() + block_start(0, {"type": "text", "text": ""}) + wrong + end("end_turn")
        error = _over_http(AnthropicServer, body)
        assert error.category == "transient"
        assert error.message.startswith("malformed response: an event of the wrong shape (")
        assert error.raw == wrong[5:-2].decode()

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            (b"", "empty response: no message_start"),
            (start(), "the stream ended before the message did (no stop_reason)"),
            (start() + b'data: {"type": "content_blo\n\n', "malformed JSON in the stream"),
        ],
    )
    def test_broken_streams_are_transient(self, body: bytes, message: str) -> None:
        """Empty, unfinished and malformed streams are transient failures."""
        with pytest.raises(ProviderError) as caught:
            run_anthropic(body)
        assert caught.value.category == "transient"
        assert caught.value.message.startswith(message)


def _chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **kw: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c", "model": "gpt-4o-2024-08-06", "choices": choices, "usage": None, **kw}


USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "prompt_tokens_details": {"cached_tokens": 64},
    "completion_tokens_details": {"reasoning_tokens": 5},
}


class TestOpenAIStream:
    def test_parallel_tool_calls_and_usage_chunk(self) -> None:
        """Two calls told apart by index; the usage chunk has ``choices: []``."""
        chunks = [
            _chunk({"role": "assistant", "content": None, "refusal": None}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": '}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "g", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk({}, "tool_calls"),
            _chunk(None, usage=USAGE),
        ]
        events, response = run_openai(chunks)
        a, b = ToolUseBlock("call_a", "f", {"x": 1}), ToolUseBlock("call_b", "g", {})
        assert events == [
            ToolUseStart(0, "call_a", "f"),
            ToolInputDelta(0, "call_a", '{"x": '),
            ToolInputDelta(0, "call_a", "1}"),
            ToolUseComplete(0, a),
            ToolUseStart(1, "call_b", "g"),
            ToolUseComplete(1, b),
        ]
        assert response.message.content == (a, b)
        assert response.stop_reason == "tool_use"
        assert response.usage == Usage(36, 20, 64, 0, 5)
        assert response.model == "gpt-4o-2024-08-06"

    @pytest.mark.parametrize(
        ("finish", "stop"),
        [
            ("stop", "end_turn"),
            ("tool_calls", "tool_use"),
            ("length", "max_tokens"),
            ("content_filter", "refusal"),
        ],
    )
    def test_finish_reasons(self, finish: str, stop: str) -> None:
        """finish_reason maps onto the canonical stop reasons."""
        _, response = run_openai([_chunk({"content": "x"}), _chunk({}, finish)])
        assert response.stop_reason == stop

    def test_call_cut_at_length_is_incomplete(self) -> None:
        """Arguments cut off by ``length`` leave the call incomplete, not in the message."""
        chunks = [
            _chunk({"content": "ok"}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_c",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": "b'},
                        }
                    ]
                }
            ),
            _chunk({}, "length"),
        ]
        _, response = run_openai(chunks)
        assert response.message.content == (TextBlock("ok"),)
        assert response.incomplete_tool_uses == ("call_c",)

    def test_error_chunk_mid_stream(self) -> None:
        """An ``error`` object in a chunk raises the mapped ProviderError."""
        error = {"error": {"message": "The server had an error", "type": "server_error"}}
        with pytest.raises(ProviderError) as caught:
            run_openai([_chunk({"content": "x"}), error])
        assert caught.value.category == "transient"

    @pytest.mark.parametrize(
        "wrong",
        [
            b'data: ["a", "list"]\n\n',
            b'data: {"choices": "not a list of choices"}\n\n',
            b'data: {"choices": [{"delta": {"tool_calls": [7]}}]}\n\n',
        ],
    )
    def test_valid_json_of_the_wrong_shape_is_malformed(self, wrong: bytes) -> None:
        """A chunk that is not a chat completion chunk is a transient malformed response."""
        head = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
        error = _over_http(OpenAIServer, head + wrong + b"data: [DONE]\n\n")
        assert error.category == "transient"
        assert error.message.startswith("malformed response: an event of the wrong shape (")

    def test_no_finish_reason_is_transient(self) -> None:
        """A stream that stops before any finish_reason is a transient failure."""
        with pytest.raises(ProviderError, match="no finish_reason"):
            run_openai([_chunk({"content": "x"})])


class TestSSESplitter:
    @given(st.lists(st.integers(min_value=1, max_value=40), max_size=30), st.booleans())
    def test_any_chunking_gives_the_same_payloads(self, cuts: list[int], crlf: bool) -> None:
        """However the bytes are split (CRLF line ends too), the payloads are the same."""
        body = (
            b': comment\n\nevent: a\ndata: {"n": 1}\n\n'
            b'data: [DONE]\n\nid: 3\ndata: {"n":\ndata: 2}\n\ndata: {}'
        )
        if crlf:
            body = body.replace(b"\n", b"\r\n")
        splitter, got, pos = SSESplitter(), [], 0
        for cut in cuts:
            got += splitter.feed(body[pos : pos + cut])
            pos += cut
        got += splitter.feed(body[pos:]) + splitter.finish()
        assert [json.loads(g) if g.strip() != b"[DONE]" else None for g in got] == [
            {"n": 1},
            None,
            {"n": 2},
            {},
        ]

    @pytest.mark.parametrize(
        ("pieces", "payloads"),
        [
            ([b"data: 1\n\n", b"d", b"ata: 2\n\n"], [b" 1", b" 2"]),  # a 1-byte piece
            ([b"data: 1\n\n", b"", b"data: 2\n\n"], [b" 1", b" 2"]),  # an empty one
            ([b"data: 1\n\ndata: 2\n\n"], [b" 1", b" 2"]),  # two frames in one piece
            ([b"data: 1\n", b"\n"], [b" 1"]),  # the blank line in a piece of its own
        ],
    )
    def test_one_frame_per_piece_and_the_cases_around_it(
        self, pieces: list[bytes], payloads: list[bytes]
    ) -> None:
        splitter = SSESplitter()
        got = [data for piece in pieces for data in splitter.feed(piece)]
        assert got + splitter.finish() == payloads

    @pytest.mark.parametrize(
        ("pieces", "payloads"),
        [
            ([b"data: 1\r", b"\n\r\ndata: 2\r\n\r\n"], [b" 1", b" 2"]),  # CR | LF
            ([b"data: 1\r", b"\r"], [b" 1"]),  # CR CR: two line ends in two pieces
            ([b"data: 1\n", b"\n", b"\n", b"data: 2\n\n"], [b" 1", b" 2"]),  # extra LF
            ([b"da", b"ta: 1", b"2", b"3\n", b"\ndata: 4\n\nda"], [b" 123", b" 4"]),
        ],
    )
    def test_line_ends_split_across_pieces(
        self, pieces: list[bytes], payloads: list[bytes]
    ) -> None:
        """A blank line, or a CRLF, cut between two pieces still ends the event once."""
        splitter = SSESplitter()
        got = [data for piece in pieces for data in splitter.feed(piece)]
        assert got + splitter.finish() == payloads

    def test_one_long_event_in_small_pieces_takes_linear_time(self) -> None:
        """A 24 MiB event in 8 KiB pieces is joined once, not once per piece (which took
        minutes: every piece copied the whole event so far)."""
        size, piece = 24 * 2**20, 8 * 1024
        body = b"data: " + b"x" * size + b"\n\n"
        splitter = SSESplitter(max_event_bytes=32 * 2**20)
        started = time.perf_counter()
        got = [d for i in range(0, len(body), piece) for d in splitter.feed(body[i : i + piece])]
        elapsed = time.perf_counter() - started
        assert [len(d) for d in got] == [size + 1]
        assert elapsed < 5.0, f"{elapsed:.1f} s for 24 MiB"

    @pytest.mark.parametrize(
        "pieces",
        [
            [b"data: " + b"x" * 995],  # one unfinished event
            [b"data: " + b"x" * 500, b"x" * 500],  # one unfinished event in two pieces
            [b"data: " + b"x" * 995 + b"\n\n"],  # a whole event in one piece: the fast path
            [b"data: 1\n\ndata: " + b"x" * 995 + b"\n\ndata: 2\n\n"],  # among others
            [b"data: 1\r\n\r\ndata: " + b"x" * 995],  # CRLF line ends
        ],
    )
    def test_an_event_over_the_limit_is_malformed(self, pieces: list[bytes]) -> None:
        """An event longer than max_event_bytes is a transient malformed response that
        says how to raise the limit; memory stops growing there."""
        splitter = SSESplitter(max_event_bytes=1000, provider="anthropic")

        def feed_all() -> None:
            for piece in pieces:
                splitter.feed(piece)

        with pytest.raises(ProviderError) as caught:
            feed_all()
        assert caught.value.category == "transient"
        assert caught.value.provider == "anthropic"
        assert caught.value.message == (
            "malformed response: an event is longer than max_event_bytes=1,000 (an endless "
            "line, or a runaway server); if the API really sends events that large, give "
            "the provider a larger max_event_bytes="
        )

    def test_an_event_at_the_limit_passes(self) -> None:
        """The limit is inclusive: an event of exactly max_event_bytes is read."""
        event = b"data: " + b"x" * 994  # 1,000 bytes
        for pieces in ([event + b"\n\n"], [event[:500], event[500:], b"\n\n"]):
            splitter = SSESplitter(max_event_bytes=1000)
            got = [d for piece in pieces for d in splitter.feed(piece)]
            assert got == [b" " + b"x" * 994]


class TestOverHTTP:
    def test_gzip_body_and_crlf_frames(self) -> None:
        """A gzip-encoded SSE body with CRLF line ends is decoded and parsed."""
        body = (
            start()
            + block_start(0, {"type": "text", "text": ""})
            + delta(0, {"type": "text_delta", "text": "zip"})
            + stop(0)
            + end("end_turn", output_tokens=2)
        )
        body = body.replace(b"\n", b"\r\n")

        async def go() -> ModelResponse:
            async with AnthropicServer([Raw(200, SSE, body, gzip=True)]) as server:
                provider = AnthropicProvider(KEY, base_url=server.base_url)
                request = WireRequest(
                    "anthropic",
                    "m",
                    {"model": "m", "max_tokens": 5, "messages": [], "stream": True},
                )
                try:
                    return await provider.complete(request)
                finally:
                    await provider.aclose()

        response = asyncio.run(go())
        assert response.message.text == "zip"

    def test_openai_stream_ends_with_message_complete(self) -> None:
        """Over HTTP the stream yields deltas and then exactly one MessageComplete."""
        from innerloop.testing import reply, tool_call

        async def go() -> list[StreamEvent]:
            async with OpenAIServer(
                [reply("hi", tool_call("f", {"a": 1}, id="call_9"))], chunk_size=1
            ) as server:
                provider = OpenAIProvider(KEY, base_url=server.base_url)
                request = WireRequest("openai", "m", {"model": "m", "messages": [], "stream": True})
                stream = await provider.open(request)
                events = [e async for e in stream]
                await stream.aclose()
                await provider.aclose()
                return events

        events = asyncio.run(go())
        assert [e.type for e in events].count("message_complete") == 1
        assert isinstance(events[-1], MessageComplete)
        assert events[:2] == [TextDelta(0, "h"), TextDelta(0, "i")]
        assert events[-2] == ToolUseComplete(1, ToolUseBlock("call_9", "f", {"a": 1}))
